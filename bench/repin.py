"""Re-pin one live rank of a running job to other CPUs, from outside the workload (a fault injector).

    python bench/repin.py --rank 2 --cpus 64-127 -- gpu-acceptance local --json out.json

Starts the command, finds the process whose environment says RANK=<rank> among
its descendants (/proc), waits until the launcher has pinned it (its allowed
CPUs narrowed from what it started with), then keeps setting every thread of it
to --cpus until the command ends: what a stray `taskset`, a node agent or a
wrong CPU manager does to a rank. Exits with the command's code.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workload"))
from acceptance_workload.runtime.pinning import parse_cpulist


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out += children.get(pid, [])
        todo += children.get(pid, [])
    return out


def rank_pid(root: int, rank: int) -> int | None:
    """The descendant of `root` that is the workload rank `rank` (RANK in its environment, python in its command)."""
    want = f"RANK={rank}".encode()
    for pid in descendants(root):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if want in env and b"acceptance_workload" in cmd:
            return pid
    return None


def repin(pid: int, cpus: frozenset[int]) -> bool:
    done = False
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            if os.sched_getaffinity(int(tid)) != cpus:
                os.sched_setaffinity(int(tid), cpus)
            done = True
        except OSError:
            continue
    return done


def run(command: list[str], rank: int, cpus: frozenset[int], log=sys.stderr) -> int:
    proc = subprocess.Popen(command)
    started_on = os.sched_getaffinity(proc.pid)  # what the launcher's ranks start with
    pid, pinned = None, False
    while proc.poll() is None:
        pid = pid or rank_pid(proc.pid, rank)
        if pid is not None:
            try:
                now = os.sched_getaffinity(pid)
            except OSError:
                now = None
            if not pinned and now is not None and now != started_on:
                pinned = True
                print(f"repin: rank {rank} (pid {pid}) pinned itself to {sorted(now)}; re-pinning to "
                      f"{sorted(cpus)}", file=log, flush=True)
            if pinned:
                repin(pid, cpus)
        time.sleep(0.005)
    return proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--cpus", required=True, help="kernel CPU list, e.g. 0-3,8")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run(command, args.rank, parse_cpulist(args.cpus))


if __name__ == "__main__":
    sys.exit(main())
