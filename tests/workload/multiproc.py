"""Start N ranks on this machine the way torchrun would, and collect what each wrote."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Rank:
    rank: int
    returncode: int | None
    data: dict[str, Any] | None
    stderr: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, node: str = "node-a", local_rank: int | None = None,
             local_world: int | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_"))}
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank if local_rank is None else local_rank),
               LOCAL_WORLD_SIZE=str(world if local_world is None else local_world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), NODE_NAME=node, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "workload"), os.environ.get("PYTHONPATH", "")]))
    env.update(extra or {})
    return env


def throttle(proc: subprocess.Popen, keep_going: Callable[[], bool], stopped: float = 0.045,
             running: float = 0.005) -> None:
    """Hold `proc` stopped (SIGSTOP) most of the time, from outside, while keep_going() and it lives.

    A process stopped 45 ms of every 50 runs at a tenth of its speed: what a
    neighbour saturating its GPU, or a throttled clock, does to a rank. It is
    always continued before this returns. Popen.send_signal does nothing once
    the process has been reaped (its pid may be reused).
    """
    with contextlib.suppress(ProcessLookupError):
        while keep_going() and proc.poll() is None:
            proc.send_signal(signal.SIGSTOP)
            time.sleep(stopped)
            proc.send_signal(signal.SIGCONT)
            time.sleep(running)


def start(argvs: list[list[str]], envs: list[dict[str, str]]) -> list[subprocess.Popen]:
    return [subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for argv, env in zip(argvs, envs, strict=True)]


def collect(procs: list[subprocess.Popen], outdir: Path, timeout: float, wait_for: list[int] | None = None,
            ) -> list[Rank]:
    """Wait for the ranks in `wait_for` (default all) to exit, then kill the rest; read rank{r}.json."""
    wait_for = list(range(len(procs))) if wait_for is None else wait_for
    outputs: dict[int, tuple[str, str]] = {}
    try:
        for r in wait_for:
            outputs[r] = procs[r].communicate(timeout=timeout)
    finally:
        for r, p in enumerate(procs):
            if p.poll() is None:
                p.kill()
            if r not in outputs:
                outputs[r] = p.communicate()
    ranks = []
    for r, p in enumerate(procs):
        path = outdir / f"rank{r}.json"
        ranks.append(Rank(r, p.returncode, json.loads(path.read_text()) if path.exists() else None,
                          outputs[r][1]))
    return ranks


def node_envs(nodes: list[str], extra: dict[str, str] | None = None) -> list[dict[str, str]]:
    """One rank per entry, nodes[r] its NODE_NAME, local ranks counted within each node; a fresh port."""
    port = free_port()
    envs = []
    for r in range(len(nodes)):
        same = [i for i, n in enumerate(nodes) if n == nodes[r]]
        envs.append(rank_env(r, len(nodes), port, nodes[r], same.index(r), len(same), extra))
    return envs


def run_workers(scenario: str, world: int, outdir: Path, *, timeout: float = 90,
                nodes: list[str] | None = None, wait_for: list[int] | None = None,
                extra: dict[str, str] | None = None) -> list[Rank]:
    """`python -m tests.workload.workers SCENARIO` on `world` ranks; nodes[r] is rank r's NODE_NAME."""
    envs = node_envs(nodes or ["node-a"] * world, extra)
    argv = [sys.executable, "-m", "tests.workload.workers", scenario, str(outdir)]
    return collect(start([argv] * world, envs), outdir, timeout, wait_for)


def run_with_a_slowed_rank(env: dict[str, str], nodes: list[str], victim: int, slow_from: str,
                           slow_until: str | None = None, stopped: float = 0.045, timeout: float = 150,
                           ) -> tuple[list[int], str]:
    """`python -m acceptance_workload` on one rank per entry of `nodes`; `victim` throttled from outside.

    The throttle starts when rank 0 prints a line containing `slow_from` and lasts until it prints
    `slow_until` (if given) or the run ends. Returns every rank's exit code and rank 0's stderr.
    """
    procs = start([[sys.executable, "-m", "acceptance_workload"]] * len(nodes), node_envs(nodes, env))
    started, released, done, stderr = threading.Event(), threading.Event(), threading.Event(), []

    def read_rank0() -> None:
        assert procs[0].stderr is not None
        for line in procs[0].stderr:
            stderr.append(line)
            if slow_from in line:
                started.set()
            if slow_until is not None and slow_until in line:
                released.set()

    def slow() -> None:
        if started.wait(120):
            throttle(procs[victim], lambda: not done.is_set() and not released.is_set(), stopped=stopped)

    threads = [threading.Thread(target=read_rank0, daemon=True), threading.Thread(target=slow, daemon=True)]
    for t in threads:
        t.start()
    try:
        codes = [p.wait(timeout=timeout) for p in procs]
    finally:
        done.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for t in threads:
            t.join(5)
    assert started.is_set(), "".join(stderr)[-3000:]
    return codes, "".join(stderr)
