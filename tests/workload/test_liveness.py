"""A rank frozen (SIGSTOP) or killed (SIGKILL) from outside, mid-run, is named with its node in failedNodes.

The real `python -m acceptance_workload` on every rank (gloo on CPU, one OS
process per rank, three ranks on two nodes); the fault comes from this test
with os.kill once rank 0 announces the stage, with no hook in the workload.
The live ranks must end within the collective timeout plus a minute; with
heartbeatTimeoutSeconds far shorter than the collective timeout (300), a rank
stopped in any stage is named by its silent heartbeat within the heartbeat
timeout + 30 s. One stage runs with the default (60 s); the others with 10 s (the
smallest the API allows: a healthy rank beats every second), which names the
same rank by the same path 50 s sooner each (the suite's time).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import HEARTBEAT_TIMEOUT_SECONDS
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.local import cpu_smoke_checks

from tests.checks import enable_only
from tests.workload.multiproc import free_port, rank_env, start

NODES = ["node-a", "node-b", "node-b"]  # rank 2 is node-b's GPU 1
COLLECTIVE_TIMEOUT = 10
HEARTBEAT_TIMEOUT = HEARTBEAT_TIMEOUT_SECONDS  # the default, which DEFAULT_STAGE runs with


def _config(tmp_path: Path, collective_timeout: int = COLLECTIVE_TIMEOUT, nodes: int = 2,
            longer: str | None = None, heartbeat: int | None = None,
            only: tuple[str, ...] | None = None) -> WorkloadConfig:
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    if only is not None:  # the stage under test and what it needs: the checks before it would only add time
        enable_only(checks, *only)
    if heartbeat is not None:
        checks.heartbeat_timeout_seconds = heartbeat
    # `longer`: the stage made to last seconds rather than a second, so the fault lands inside it on a loaded
    # machine too (a smoke sweep of 3 operations a size could end within the 1 s delay: the victim was in DDP).
    if longer == "gpu":
        checks.gpu.gemm_size, checks.gpu.windows = 1024, 15
    elif longer == "sweep":
        checks.nccl.iters = 60
    elif longer == "p2p":  # node-b's two processes' turns: seconds of gloo copies, not a tenth of one
        checks.p2p.bytes, checks.p2p.iters = "16Mi", 300
    storage = None
    if longer == "storage":  # the shared volume's stage: a directory every simulated node sees
        storage = tmp_path / "volume"
        storage.mkdir()
        checks.storage.enabled, checks.storage.throughput_bytes = True, "256Mi"
    if longer == "soak":  # the burn-in after the other checks: a minute of load, the fault a few seconds in
        checks.soak.enabled, checks.soak.duration_seconds = True, 60
    checks.nccl.collective_timeout_seconds = collective_timeout
    checks.nccl.localize = "always"  # the localisation stage runs too (two nodes)
    checks.ddp.steps = 120  # ~5 s of DDP with torch 2.15 on 2 cores: the fault 1 s in lands inside it
    return WorkloadConfig(mode="cpu-smoke", profile="custom", nodes=nodes, gpus_per_node=2, fabric="ethernet",
                          checks=checks, report_file=str(tmp_path / "report.json"),
                          storage_path=None if storage is None else str(storage))


def _run_with_fault(tmp_path: Path, trigger: str, sig: signal.Signals, victim: int,
                    collective_timeout: int = COLLECTIVE_TIMEOUT, nodes: list[str] = NODES, delay: float = 0.0,
                    longer: str | None = None, heartbeat: int | None = None, only: tuple[str, ...] | None = None
                    ) -> tuple[list[int | None], list[str], float]:
    """Start a rank per entry of `nodes`; `delay` s after rank 0 prints `trigger`, send `sig` to `victim`;
    wait for the others to end.

    Returns every rank's exit code (None: the victim, still stopped), every rank's stderr, and the
    seconds from the fault until the last of the other ranks ended.
    """
    config = _config(tmp_path, collective_timeout, len(set(nodes)), longer, heartbeat, only)
    port = free_port()
    world = len(nodes)
    envs = [rank_env(r, world, port, nodes[r], nodes[: r + 1].count(nodes[r]) - 1, nodes.count(nodes[r]),
                     {CONFIG_ENV: config.to_env()}) for r in range(world)]
    procs = start([[sys.executable, "-m", "acceptance_workload"]] * world, envs)
    logs: list[list[str]] = [[] for _ in range(world)]
    fired = threading.Event()
    faulted_at: list[float] = []

    def read(rank: int) -> None:
        for line in procs[rank].stderr:
            logs[rank].append(line)
            if rank == 0 and trigger in line and not fired.is_set():
                time.sleep(delay)
                os.kill(procs[victim].pid, sig)
                faulted_at.append(time.monotonic())
                fired.set()

    readers = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(world)]
    for t in readers:
        t.start()
    codes: list[int | None] = [None] * world
    try:
        for r in range(world):
            if r != victim:
                codes[r] = procs[r].wait(timeout=min(collective_timeout, heartbeat or HEARTBEAT_TIMEOUT) + 120)
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


def _assert_names_rank_2(report: Report, stage: str | tuple[str, ...], how: str = "last heartbeat") -> None:
    assert not report.passed
    assert report.failed_nodes == ["node-b"]  # neither rank 0's node nor the live rank 1 is blamed
    culprits = [r for r in report.results if r.name == "rank_responding"]
    assert [(r.node, r.gpu, r.passed) for r in culprits] == [("node-b", 1, False)]
    assert culprits[0].check in ((stage,) if isinstance(stage, str) else stage), culprits[0].check
    assert f"rank 2 on node node-b, GPU 1, stopped responding ({how}" in culprits[0].message
    assert report.error and "rank 2 on node node-b, GPU 1, stopped responding" in report.error


# Per stage: rank 0's progress line that starts it; how long after it the victim is stopped (inside the
# stage by then); the checks the culprit may be filed under and the steps the victim and rank 0 may be at; the
# checks of preflight, gpu, nccl and ddp that run (the stage and what it needs: storage and soak are turned on by
# _config; the checks before a stage would only add their time to each case).
# A CPU preflight takes milliseconds: the victim is often past it (waiting for the verdict) when stopped, and
# rank 0 then already in the gpu check, where the culprit is filed. Stopped with no delay, the victim may also not
# have beaten its first step yet ('not started': seen once in CI under load); it is named all the same.
STAGES = {
    "preflight": ("] preflight", 0.0, ("preflight", "gpu"), ("preflight", "not started"), ("preflight", "gpu"),
                  ("preflight", "gpu")),
    "gpu": ("] gpu: ", 1.0, ("gpu",), ("gpu",), ("gpu",), ("gpu",)),
    "p2p": ("] p2p", 1.0, ("p2p",), ("p2p",), ("p2p",), ("p2p",)),
    "sweep": ("] nccl sweep", 1.0, ("nccl",), ("nccl",), ("nccl job ",), ("nccl",)),
    "localisation": ("] nccl localize", 0.3, ("nccl",), ("nccl localize ",), ("nccl localize ",), ("nccl",)),
    "ddp": ("] ddp ", 1.0, ("ddp",), ("ddp",), ("ddp",), ("ddp",)),
    # The victim is no node's first rank: it waits for the node leaders' files, then saves the checkpoint.
    "storage": ("] storage: ", 0.3, ("storage",), ("storage", "checkpoint "), ("storage", "checkpoint "), ()),
    "soak": ("] soak: GEMM", 3.0, ("soak",), ("soak window 0",), ("soak window 0",), ()),
}


SHORT_HEARTBEAT = 10  # checks.heartbeatTimeoutSeconds of every stage but DEFAULT_STAGE
DEFAULT_STAGE = "sweep"  # the stage run with the default heartbeat timeout, not set by the test


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_rank_frozen_in_any_stage_is_named_by_its_heartbeat(tmp_path: Path, stage: str) -> None:
    """The heartbeat (60 s by default, 10 s set) names it; the collective timeout (300 s) would come far too late.

    Localisation runs on 3 nodes or more: a fourth rank on node-c there.
    """
    trigger, delay, checks, victim_steps, root_steps, only = STAGES[stage]
    heartbeat = None if stage == DEFAULT_STAGE else SHORT_HEARTBEAT
    limit = heartbeat or HEARTBEAT_TIMEOUT
    nodes = [*NODES, "node-c"] if stage == "localisation" else NODES
    codes, stderr, elapsed = _run_with_fault(tmp_path, trigger, signal.SIGSTOP, victim=2, collective_timeout=300,
                                             nodes=nodes, delay=delay, heartbeat=heartbeat, only=only,
                                             longer=stage if stage in ("gpu", "p2p", "sweep", "storage", "soak")
                                             else None)
    live = [c for r, c in enumerate(codes) if r != 2]
    assert live == [2] * len(live), stderr[0][-3000:]
    assert limit - 5 < elapsed < limit + 30, elapsed
    report = _report(tmp_path, stderr)
    _assert_names_rank_2(report, checks, how="no heartbeat for ")
    error = report.error or ""
    assert any(f"last at step '{s}" in error for s in victim_steps), error  # the stage the victim was in
    assert any(f"rank 0's last step: '{s}" in error for s in root_steps), error
    assert f"checks.heartbeatTimeoutSeconds ({limit}s)" in error
    assert "did not complete within" not in error
