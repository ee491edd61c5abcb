"""Faults injected from outside the product on real GPUs: each must FAIL naming the node, GPU or rank.

`python -m pytest -m gpu tests/gpu/test_faults.py` runs bench/fault_suite.py's scenarios one by one
(`gpu-acceptance local --quick` as a user runs it, with another process saturating a GPU,
NCCL_P2P_DISABLE=1, a rank stopped or killed mid-sweep, one GPU hidden, 2 and 4 simulated nodes healthy and
with the last one's GPUs saturated). With FAULT_SUITE_OUT set,
the outcomes are also written there as JSON (the detection table in docs/benchmarks.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.workload.multiproc import REPO

pytestmark = pytest.mark.gpu

_spec = importlib.util.spec_from_file_location("fault_suite", REPO / "bench" / "fault_suite.py")
fault_suite = importlib.util.module_from_spec(_spec)
sys.modules["fault_suite"] = fault_suite  # its dataclasses look their module up there
_spec.loader.exec_module(fault_suite)
OUTCOMES: list = []


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory):
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert gpus >= 2, f"the fault tests need at least 2 CUDA GPUs; torch sees {gpus}"
    yield fault_suite.Ctx(gpus=gpus, cpu=False, full=False, tmp=tmp_path_factory.mktemp("faults"))
    out = os.environ.get("FAULT_SUITE_OUT")
    if out:
        Path(out).write_text(json.dumps([asdict(o) for o in OUTCOMES], indent=2) + "\n")


@pytest.mark.parametrize("name", list(fault_suite.SCENARIOS))
def test_fault_is_detected_and_named(name: str, ctx) -> None:
    if not fault_suite.SCENARIOS[name].fits(ctx):
        pytest.skip(f"{name} needs a GPU count its simulated nodes divide; this machine has {ctx.gpus}")
    outcome = fault_suite.run_scenario(fault_suite.SCENARIOS[name], ctx, 1)
    OUTCOMES.append(outcome)
    assert outcome.detected, fault_suite.table([outcome]) + "\n" + "\n".join(outcome.reasons)
    if name == "rank-exits":
        assert outcome.seconds < fault_suite.TIMEOUT + 60 + 60  # the timeout, a minute, and the run before it
    # frozen-rank(-ddp): `detected` already holds the run to its scenario's bound from the stop (90 s)
