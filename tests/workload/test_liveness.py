"""A rank frozen (SIGSTOP) or killed (SIGKILL) from outside, mid-run, is named with its node in failedNodes.

The real `python -m acceptance_workload` on every rank (gloo on CPU, one OS
process per rank, three ranks on two nodes); the fault comes from this test
with os.kill once rank 0 announces the stage, with no hook in the workload.
The live ranks must end within the collective timeout plus a minute.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from acceptance_workload.config import CONFIG_ENV, WorkloadConfig
from acceptance_workload.local import cpu_smoke_checks
from acceptance_workload.report import Report

from tests.workload.multiproc import free_port, rank_env, start

NODES = ["node-a", "node-b", "node-b"]  # rank 2 is node-b's GPU 1
COLLECTIVE_TIMEOUT = 10


def _config(tmp_path: Path) -> WorkloadConfig:
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    checks.nccl.collective_timeout_seconds = COLLECTIVE_TIMEOUT
    checks.ddp.steps = 30  # long enough that the fault lands inside DDP
    return WorkloadConfig(mode="cpu-smoke", profile="custom", nodes=2, gpus_per_node=2, fabric="ethernet",
                          checks=checks, report_file=str(tmp_path / "report.json"))


def _run_with_fault(tmp_path: Path, trigger: str, sig: signal.Signals, victim: int,
                    ) -> tuple[list[int | None], list[str], float]:
    """Start 3 ranks; when rank 0 prints `trigger`, send `sig` to `victim`; wait for the others to end.

    Returns every rank's exit code (None: the victim, still stopped), every rank's stderr, and the
    seconds from the fault until the last of the other ranks ended.
    """
    config = _config(tmp_path)
    port = free_port()
    envs = [rank_env(r, 3, port, NODES[r], NODES[: r + 1].count(NODES[r]) - 1, NODES.count(NODES[r]),
                     {CONFIG_ENV: config.to_env()}) for r in range(3)]
    procs = start([[sys.executable, "-m", "acceptance_workload"]] * 3, envs)
    logs: list[list[str]] = [[], [], []]
    fired = threading.Event()
    faulted_at: list[float] = []

    def read(rank: int) -> None:
        for line in procs[rank].stderr:
            logs[rank].append(line)
            if rank == 0 and trigger in line and not fired.is_set():
                os.kill(procs[victim].pid, sig)
                faulted_at.append(time.monotonic())
                fired.set()

    readers = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(3)]
    for t in readers:
        t.start()
    codes: list[int | None] = [None, None, None]
    try:
        for r in range(3):
            if r != victim:
                codes[r] = procs[r].wait(timeout=COLLECTIVE_TIMEOUT + 120)
        ended = time.monotonic()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for t in readers:
            t.join(timeout=10)
    stderr = ["".join(lines) for lines in logs]
    assert fired.is_set(), f"rank 0 never printed {trigger!r}:\n{stderr[0][-3000:]}"
    return codes, stderr, ended - faulted_at[0]


def _report(tmp_path: Path, stderr: list[str]) -> Report:
    path = tmp_path / "report.json"
    assert path.exists(), stderr[0][-3000:]
    return Report.model_validate(json.loads(path.read_text()))


def _assert_names_rank_2(report: Report, stage: str) -> None:
    assert not report.passed
    assert report.failed_nodes == ["node-b"]  # neither rank 0's node nor the live rank 1 is blamed
    culprits = [r for r in report.results if r.name == "rank_responding"]
    assert [(r.check, r.node, r.gpu, r.passed) for r in culprits] == [(stage, "node-b", 1, False)]
    assert "rank 2 on node node-b, GPU 1, stopped responding (last heartbeat" in culprits[0].message
    assert report.error and "rank 2 on node node-b, GPU 1, stopped responding" in report.error


def test_a_rank_frozen_with_sigstop_during_the_sweep_is_named(tmp_path: Path) -> None:
    codes, stderr, elapsed = _run_with_fault(tmp_path, "] nccl sweep", signal.SIGSTOP, victim=2)
    assert codes[:2] == [2, 2], stderr[0][-3000:]  # the live rank 1 ends with rank 0's code
    assert elapsed < COLLECTIVE_TIMEOUT + 60, elapsed
    report = _report(tmp_path, stderr)
    _assert_names_rank_2(report, "nccl")
    assert "did not complete within 10s" in report.error
    assert "the collective itself hung" not in report.error


def test_a_rank_killed_during_ddp_is_named(tmp_path: Path) -> None:
    codes, stderr, elapsed = _run_with_fault(tmp_path, "] ddp ", signal.SIGKILL, victim=2)
    assert codes[:2] == [2, 2], stderr[0][-3000:]
    assert elapsed < COLLECTIVE_TIMEOUT + 60, elapsed
    _assert_names_rank_2(_report(tmp_path, stderr), "ddp")


def test_rank_0_frozen_the_others_exit_2_naming_it(tmp_path: Path) -> None:
    """Rank 0 hosts the store and writes the report: frozen, no report exists; the others say who it was."""
    codes, stderr, elapsed = _run_with_fault(tmp_path, "] nccl sweep", signal.SIGSTOP, victim=0)
    assert codes[1:] == [2, 2], stderr[1][-3000:]
    assert elapsed < COLLECTIVE_TIMEOUT + 60, elapsed
    assert not (tmp_path / "report.json").exists()
    for log in stderr[1:]:  # the termination message each of them writes, also in its log
        assert "no report can be written without rank 0:\nCPU SMOKE RUN FAILED: 0/4 checks passed" in log, log[-3000:]
        assert "rank 0 on node node-a, GPU 0, stopped responding" in log
        assert "failed nodes: node-a" in log
