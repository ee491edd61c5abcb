"""The checks over real torch.distributed (gloo on CPU), one OS process per rank."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.local import cpu_smoke_checks
from acceptance_workload.report.model import NcclSweep

from tests.workload.multiproc import collect, free_port, rank_env, run_workers, start


def _root(ranks) -> dict:
    for r in ranks:
        assert r.returncode == 0, f"rank {r.rank} exited {r.returncode}:\n{r.stderr[-3000:]}"
    assert ranks[0].data is not None
    return ranks[0].data


def test_sweep_of_every_collective_is_correct_on_two_ranks(tmp_path: Path) -> None:
    data = _root(run_workers("sweep", 2, tmp_path))
    sweeps = [NcclSweep.model_validate(s) for s in data["sweeps"]]
    assert [s.collective for s in sweeps] == ["all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                              "broadcast", "sendrecv"]
    for s in sweeps:
        assert s.scope == "job" and s.ranks == 2 and s.dtype == "float32"
        assert s.rows, s.collective
        assert all(r.wrong == 0 for r in s.rows), s
        assert all(r.time_us > 0 and r.busbw_gbps >= 0 for r in s.rows)
    # 8 B .. 4 KiB by x8: the gather-type collectives drop 8 B (one float per rank needs 8 B on 2 ranks: kept)
    assert [r.size for r in sweeps[0].rows] == [8, 64, 512, 4096]
    assert [r.count for r in sweeps[1].rows] == [1, 8, 64, 512]
    results = [CheckResult.model_validate(r) for r in data["results"]]
    correctness = [r for r in results if r.name.endswith("_correctness")]
    assert len(correctness) == 6 and all(r.passed and r.value == 0 for r in correctness)
    assert data["skipped"] == []  # one node: no separate per-node sweep, and gloo ran all six


def test_a_wrong_element_is_counted_and_fails(tmp_path: Path) -> None:
    data = _root(run_workers("corrupt", 2, tmp_path))
    results = {r["name"]: CheckResult.model_validate(r) for r in data["results"]}
    assert results["all_reduce_correctness"].passed
    bad = results["all_gather_correctness"]
    assert not bad.passed and bad.value == 4  # one element per size, four sizes
    assert "4 wrong elements" in bad.message
    sweep = next(NcclSweep.model_validate(s) for s in data["sweeps"] if s["collective"] == "all_gather")
    assert [r.wrong for r in sweep.rows] == [1, 1, 1, 1]


def test_a_collective_the_backend_cannot_run_is_skipped_and_its_threshold_fails(tmp_path: Path) -> None:
    data = _root(run_workers("unsupported", 2, tmp_path))
    assert [s["collective"] for s in data["sweeps"]] == ["all_reduce"]
    assert data["skipped"] == [{"check": "nccl", "name": "alltoall",
                                "reason": "gloo (float32): ProcessGroupGloo does not support alltoall"}]
    results = {r["name"]: CheckResult.model_validate(r) for r in data["results"]}
    assert "alltoall_correctness" not in results
    threshold = results["alltoall_busbw"]
    assert threshold.value is None and not threshold.passed
    assert "not measured" in threshold.message


def test_per_node_sweeps_name_each_node(tmp_path: Path) -> None:
    data = _root(run_workers("sweep", 4, tmp_path, nodes=["node-a", "node-a", "node-b", "node-b"], timeout=120))
    assert data["nodes"] == ["node-a", "node-b"]
    sweeps = [NcclSweep.model_validate(s) for s in data["sweeps"]]
    node_sweeps = [(s.collective, s.node, s.ranks) for s in sweeps if s.scope == "node"]
    assert ("all_reduce", "node-a", 2) in node_sweeps and ("all_reduce", "node-b", 2) in node_sweeps
    assert len(node_sweeps) == 12 and all(s.ranks == 4 for s in sweeps if s.scope == "job")
    assert all(r.wrong == 0 for s in sweeps for r in s.rows)
    node_results = [CheckResult.model_validate(r) for r in data["results"] if r["name"] == "node_all_reduce_busbw"]
    assert sorted(r.node for r in node_results) == ["node-a", "node-b"]
    assert all(r.passed and r.value is not None for r in node_results)


def test_a_rank_that_never_joins_the_collective_is_named_within_the_timeout(tmp_path: Path) -> None:
    t0 = time.monotonic()
    ranks = run_workers("hang", 2, tmp_path, wait_for=[0], timeout=60)
    elapsed = time.monotonic() - t0
    assert ranks[0].returncode == 3, ranks[0].stderr[-3000:]  # the watchdog's on_fatal ran
    message = ranks[0].data["fatal"]
    assert "rank 1 on node node-a, GPU 1, is alive but fell behind" in message  # it beats, but never came
    assert "did not complete within 3s" in message
    assert ranks[0].data["culprits"] == [[1, "behind"]]
    assert elapsed < 30


def test_workload_run_with_a_hung_rank_reports_the_rank_and_exits_2(tmp_path: Path) -> None:
    """The real `python -m acceptance_workload` on rank 0; rank 1 joins and then hangs."""
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", gpus_per_node=2, fabric="ethernet",
                            checks=cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True),
                            report_file=str(tmp_path / "report.json"))
    config.checks.nccl.collective_timeout_seconds = 10
    port = free_port()
    envs = [rank_env(r, 2, port, extra={CONFIG_ENV: config.to_env(), "HANG_TIMEOUT": "10"}) for r in range(2)]
    argvs = [[sys.executable, "-m", "acceptance_workload"],
             [sys.executable, "-m", "tests.workload.workers", "join-then-sleep", str(tmp_path)]]
    t0 = time.monotonic()
    ranks = collect(start(argvs, envs), tmp_path, timeout=90, wait_for=[0])
    elapsed = time.monotonic() - t0
    assert ranks[0].returncode == 2, ranks[0].stderr[-3000:]
    report = Report.model_validate(json.loads((tmp_path / "report.json").read_text()))
    assert not report.passed and report.error
    assert "rank 1 (node node-a, GPU 1)" in report.error and "within 10s" in report.error
    assert elapsed < 60
    # alive (it beats) but never delivered: blamed as lagging, under the first check, with its node
    culprit = next(r for r in report.results if r.name == "rank_progress")
    assert (culprit.check, culprit.node, culprit.gpu) == ("preflight", "node-a", 1)
    assert report.failed_nodes == ["node-a"]


def test_a_rank_that_fails_in_a_check_fails_that_check_at_once_with_its_error(tmp_path: Path) -> None:
    """Rank 1's DDP check raises; rank 0, waiting for it inside DDP, is released well before any timeout and the
    error is a failed result of the check (stages.py), not a run that could not complete."""
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    checks.preflight.enabled = checks.gpu.enabled = checks.p2p.enabled = checks.nccl.enabled = False
    checks.signals.enabled = False
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", gpus_per_node=2, fabric="ethernet", checks=checks,
                            report_file=str(tmp_path / "report.json"))
    port = free_port()
    envs = [rank_env(r, 2, port, extra={CONFIG_ENV: config.to_env()}) for r in range(2)]
    argvs = [[sys.executable, "-m", "acceptance_workload"],
             [sys.executable, "-m", "tests.workload.workers", "crash-in-ddp", str(tmp_path)]]
    t0 = time.monotonic()
    ranks = collect(start(argvs, envs), tmp_path, timeout=90)
    assert time.monotonic() - t0 < 30  # the collective timeout is 60 s: the error travelled, not a timeout
    assert [r.returncode for r in ranks] == [1, 1], ranks[0].stderr[-3000:]
    report = Report.model_validate(json.loads((tmp_path / "report.json").read_text()))
    assert report.error is None and not report.passed and report.checks_run == ["ddp"]
    [culprit] = [r for r in report.results if not r.passed]  # the failing rank, as a result of its check
    assert (culprit.check, culprit.name, culprit.node, culprit.gpu) == ("ddp", "stage_error", "node-a", 1)
    assert culprit.message == ("rank 1 on node node-a, GPU 1, raised in stage ddp (step 'ddp'): "
                               "RuntimeError: CUDA error: an illegal memory access was encountered")
    assert report.failed_nodes == ["node-a"]
