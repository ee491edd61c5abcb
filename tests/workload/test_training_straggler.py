"""A rank slowed from outside while it trains is named by its straggler ratio, in DDP and in FSDP alike.

Issue 21 asks that FSDP name a slow or frozen rank as DDP does (the frozen one: test_fsdp_storage.py). The fault
is the one test_gpubench.py uses for the per-GPU check: from the moment rank 0 says the training check starts,
rank 2 is held stopped most of the time with SIGSTOP, from outside. Its one-GPU (for FSDP: unsharded) baseline
then runs at a fraction of the others' speed, while the sharded or DDP steps, which wait for it, are slow on
every rank and name nobody. Three gloo ranks on two uneven nodes, as a GPU run would see them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.local import cpu_smoke_checks

from tests.checks import enable_only
from tests.workload.multiproc import run_with_a_slowed_rank

STRAGGLER = 1.5  # the profiles' FSDP ceiling; DDP's is 1.10 on GPUs, too tight for 3 ranks sharing 2 CPU cores
# Stopped 30 ms of every 35: about a seventh of the speed (ratios 4-11 measured from 20 to 45 ms; shorter stops keep
# the suite short, longer ones only widen the margin).
STOPPED = 0.030
NODES = ["node-a", "node-b", "node-b"]
STAGE = {"ddp": "ddp gpt: one-GPU baseline", "fsdp": "fsdp: unsharded baseline, then"}


def _slowed_training(tmp_path: Path, check: str) -> tuple[Report, list[int], str]:
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    enable_only(checks, check)
    training = getattr(checks, check)
    training.thresholds.max_straggler_ratio = STRAGGLER
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", nodes=2, gpus_per_node=2, fabric="ethernet",
                            checks=checks, report_file=str(tmp_path / "report.json"))
    codes, stderr = run_with_a_slowed_rank({CONFIG_ENV: config.to_env()}, NODES, victim=2,
                                           slow_from=f"[gpu-acceptance cpu-smoke] {STAGE[check]}", stopped=STOPPED,
                                           timeout=180)
    return Report.model_validate(json.loads((tmp_path / "report.json").read_text())), codes, stderr


@pytest.mark.parametrize("check", ["ddp", "fsdp"])
def test_a_rank_slowed_from_outside_while_training_is_named(tmp_path: Path, check: str) -> None:
    report, codes, stderr = _slowed_training(tmp_path, check)
    assert codes == [1, 1, 1], stderr[-3000:]
    assert report.checks_run == [check] and report.error is None and not report.passed
    failed = [(r.check, r.name, r.node, r.gpu) for r in report.results if not r.passed]
    assert failed == [(check, "straggler_ratio", "node-b", 1)], stderr[-3000:]
    assert report.failed_nodes == ["node-b"]
    ratio = next(r for r in report.results if r.name == "straggler_ratio")
    # Why: the ratio crossed the threshold the test set. How far it went is the machine's business: with other
    # work on the cores the slowed rank's lead shrinks (2.14 seen with two busy loops), so no margin is asserted.
    assert ratio.threshold == STRAGGLER and ratio.value is not None and ratio.value > STRAGGLER
    assert "slowest (GPU 1 on node node-b)" in ratio.message
