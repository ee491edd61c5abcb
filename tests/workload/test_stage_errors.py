"""An exception raised inside a check's stage is a failed result of that check, with a report (issue 31).

Each fault is injected from outside the workload (tests/workload/faultshim: a check's entry, a volume's write or
torch.save made to raise in one rank of a `gpu-acceptance local --cpu` run with real gloo processes). Whatever
the stage, the run ends FAILED (exit 1) with a written report whose `stage_error` result names the node, GPU,
rank, stage and the error, the traceback in the evidence, and the checks after it still run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workload.faults import run_local

NO_CHECKPOINT = {"enabled": True, "checkpoint": False}
EIO = "OSError: [Errno 5] Input/output error"


@pytest.mark.parametrize(("check", "target"), [
    ("preflight", "acceptance_workload.checks.preflight.preflight:run_preflight:1:0"),
    ("gpu", "acceptance_workload.checks.gpu.gpubench:run_gpu:1:0"),
    ("nccl", "acceptance_workload.checks.nccl.nccl:run_sweeps:1:0"),
    ("ddp", "acceptance_workload.checks.ddp.ddp:run_ddp:1:0"),
    ("fsdp", "acceptance_workload.checks.fsdp.fsdp:run_fsdp:1:0"),
])
def test_an_exception_in_a_stage_fails_its_check_and_the_next_check_runs(tmp_path: Path, check: str,
                                                                         target: str) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    checks = {check: {"enabled": True}, "storage": NO_CHECKPOINT}
    if check == "nccl":
        checks[check]["collectives"] = ["all_reduce"]
    code, report, out = run_local(tmp_path, checks, "--storage", str(volume), fault=f"{target}:EIO:x")
    assert code == 1 and not report.passed and report.error is None, out[-4000:]
    node = report.environment.hostnames[0]
    [failed] = [r for r in report.results if not r.passed]
    assert (failed.check, failed.name, failed.node, failed.gpu) == (check, "stage_error", node, 1)
    assert failed.message.startswith(f"rank 1 on node {node}, GPU 1, raised in stage {check} (step '")
    assert failed.message.endswith(EIO)
    [evidence] = report.stage_errors
    assert (evidence.rank, evidence.check, evidence.error) == (1, check, EIO)
    assert "Traceback (most recent call last)" in evidence.traceback and "OSError" in evidence.traceback
    assert report.failed_nodes == [node]
    storage = [r for r in report.results if r.check == "storage"]
    if check == "preflight":  # the one check the others depend on
        assert not storage and [s.check for s in report.skipped if s.reason.startswith("preflight failed")] == [
            "storage"]
    else:
        assert storage and all(r.passed for r in storage), [r.message for r in storage if not r.passed]
    assert "VERDICT: FAILED (CPU smoke run)" in out and "stage_error" in out


def test_an_exception_in_storage_keeps_what_ran_before_and_cleans_the_volume(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    code, report, out = run_local(tmp_path, {"nccl": {"collectives": ["all_reduce"]}, "storage": NO_CHECKPOINT},
                                  "--storage", str(volume),
                                  fault="acceptance_workload.checks.storage.storage:_node_io:0:0:EIO:x")
    assert code == 1 and report.error is None, out[-4000:]
    assert [(r.check, r.name, r.gpu) for r in report.results if not r.passed] == [("storage", "stage_error", 0)]
    assert any(r.check == "nccl" and r.name == "all_reduce_correctness" and r.passed for r in report.results)
    assert list(volume.iterdir()) == []  # the run's directory was removed


def test_a_checkpoint_that_cannot_be_written_is_a_failed_result_not_a_lost_report(tmp_path: Path) -> None:
    """The issue's full volume: torch.distributed.checkpoint raised CheckpointException (a BaseException) on every
    rank and rank 0 died without a report. Here rank 1's torch.save hits ENOSPC."""
    volume = tmp_path / "volume"
    volume.mkdir()
    code, report, out = run_local(tmp_path, {"storage": {"enabled": True}}, "--storage", str(volume),
                                  fault="torch:save:1:0:ENOSPC:x")
    assert code == 1 and report.error is None, out[-4000:]
    match = [r for r in report.results if r.name == "checkpoint_match"]
    assert len(match) == 2 and not any(r.passed for r in match)
    assert "rank 1: ENOSPC (errno 28): No space left on device" in match[0].message
    assert f"save under {volume}" in match[0].message
    assert list(volume.iterdir()) == []  # what was written is removed
