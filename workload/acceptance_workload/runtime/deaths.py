"""How a rank's process ended, as the process that started it saw it: its exit code or signal, and the OOM killer.

Only a process's parent learns how it ended (waitpid), and a killed rank
cannot say so itself; its heartbeat merely stops, which rank 0 would only
call "stopped responding" after checks.heartbeatTimeoutSeconds. So the parent
writes the end down at once: `gpu-acceptance local`'s launcher (local.py) puts
one file per dead rank into the directory named by DEATHS_ENV, which every
rank is given; in pods each rank's guard (guard.py) writes that node's
directory and the rendezvous store. Rank 0's watchdog reads both on every
look (Blamer.died): the rank is named with its signal, node, GPU and step
within seconds.

Signal names for a container's exit code (128 + N: the signal N) come from
here too, so the operator's diagnosis and the workload spell them alike.
Stdlib only: the operator imports it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
from pathlib import Path
from typing import Any

DEATHS_ENV = "GPU_ACCEPTANCE_DEATHS_DIR"
CGROUP_ROOT = Path("/sys/fs/cgroup")
KMSG = Path("/dev/kmsg")
MAX_KMSG_RECORDS = 20000  # the kernel's ring buffer holds far fewer; a bound in case a reader never sees EAGAIN


def signal_name(number: int) -> str:
    """'SIGKILL' for 9; 'signal 70' for a number Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_returncode(code: int) -> str:
    """A Popen returncode in words: 'killed by SIGKILL (signal 9)', 'exited with code 3'."""
    if code < 0:
        return f"killed by {signal_name(-code)} (signal {-code})"
    return f"exited with code {code}"


def exit_code_signal(code: int) -> int | None:
    """The signal a shell or container runtime encodes as exit code 128 + N (137: 9), None for a plain exit."""
    return code - 128 if 128 < code < 128 + 65 else None


def cgroup_dir(pid: int | str = "self", proc: Path = Path("/proc"), root: Path = CGROUP_ROOT) -> Path | None:
    """The directory of the cgroup whose memory accounting `pid` is under (v2 unified, else v1's memory tree)."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = v1 = None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            unified = root / path.lstrip("/")
        elif "memory" in controllers.split(","):
            v1 = root / "memory" / path.lstrip("/")
    if unified is not None and (unified / "memory.events").exists():
        return unified
    return v1


def oom_kills(cgroup: Path | None) -> int | None:
    """The cgroup's count of processes the OOM killer killed (v2 memory.events, v1 memory.oom_control)."""
    if cgroup is None:
        return None
    for name in ("memory.events", "memory.oom_control"):
        with contextlib.suppress(OSError, ValueError):
            for line in (cgroup / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return None


def kernel_oom_line(pid: int, kmsg: Path = KMSG) -> str | None:
    """The kernel log's record of the OOM killer killing `pid`, when the log is readable here (root, no lockdown)."""
    wanted = re.compile(rf"(Killed process {pid} |oom-kill:.*[,:]pid={pid},)")
    found = None
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        for _ in range(MAX_KMSG_RECORDS):
            try:
                record = os.read(fd, 8192).decode(errors="replace")
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while read: go on with the next record
                    continue
                break  # EAGAIN: the end of the log
            if not record:
                break
            for line in record.splitlines():  # /dev/kmsg gives one record a read: "prio,seq,time,flags;text"
                if wanted.search(line):
                    found = line.partition(";")[2].strip() or line.strip()
    finally:
        os.close(fd)
    return found


class OomWatch:
    """The OOM killer's evidence about one process: the cgroup's oom_kill count since this was made, the kernel log."""

    def __init__(self, cgroup: Path | None = None, kmsg: Path = KMSG):
        self.cgroup = cgroup_dir() if cgroup is None else cgroup
        self.kmsg = kmsg
        self.before = oom_kills(self.cgroup)

    def evidence(self, pid: int) -> str | None:
        line = kernel_oom_line(pid, self.kmsg)
        if line is not None:
            return f"the OOM killer killed it (kernel log: {line[:300]})"
        now = oom_kills(self.cgroup)
        if now is not None and self.before is not None and now > self.before:
            return (f"the OOM killer acted in its cgroup ({self.cgroup}: oom_kill {self.before} -> {now}): "
                    "it ran out of memory")
        return None


def describe_death(code: int, pid: int, oom: OomWatch | None = None) -> str:
    """'killed by SIGKILL (signal 9): the OOM killer killed it (...); pid 123'."""
    text = describe_returncode(code)
    why = oom.evidence(pid) if oom is not None and code == -signal.SIGKILL else None
    return f"{text}{': ' + why if why else ''}; pid {pid}"


def record(directory: str | Path, rank: int, text: str) -> None:
    """Write rank's end for rank 0 to read (whole or not at all: written aside, then renamed)."""
    path = Path(directory) / str(rank)
    scratch = path.with_suffix(".part")
    scratch.write_text(text)
    scratch.replace(path)


def tell_store(store: Any, rank: int, text: str) -> None:
    """Write rank's end into the rendezvous store, for a rank 0 on another node (guard.py)."""
    store.set(f"died/{rank}", text[:2000])
    store.add("deaths", 1)


def from_store(store: Any, world_size: int) -> dict[int, str]:
    """Every rank's end written into the store, by rank (one call when there is none)."""
    if store.add("deaths", 0) == 0:
        return {}
    return {r: store.get(f"died/{r}").decode(errors="replace") for r in range(world_size)
            if store.check([f"died/{r}"])}


def read(directory: str | Path | None) -> dict[int, str]:
    """Every rank's end written into `directory`, by rank (empty when there is none, or no directory)."""
    if not directory:
        return {}
    out = {}
    with contextlib.suppress(OSError):
        for entry in Path(directory).iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    out[int(entry.name)] = entry.read_text()
    return out
