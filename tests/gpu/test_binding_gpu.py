"""On GPUs (issue 21): a healthy rank is pinned within its GPU's NUMA-local CPUs, and a rank re-pinned from
outside to a remote NUMA node's CPUs (bench/repin.py, through /proc) fails naming node, GPU and CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_workload.checks.report_model import Report
from acceptance_workload.runtime import pinning

from tests.workload.multiproc import REPO

pytestmark = pytest.mark.gpu
VICTIM = 1  # the rank (and GPU) re-pinned


def _remote_cpus(gpu: int) -> frozenset[int]:
    from acceptance_workload.runtime.gpus import nvml_init

    nvml = nvml_init()
    local = pinning.mask_cpus(nvml.nvmlDeviceGetCpuAffinity(nvml.nvmlDeviceGetHandleByIndex(gpu),
                                                            pinning.CPU_SET_WORDS))
    return frozenset(os.sched_getaffinity(0)) - local


def test_a_rank_on_a_remote_numa_node_fails_naming_node_gpu_and_cpus(tmp_path: Path) -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.fail(f"needs at least 2 CUDA GPUs; torch sees {torch.cuda.device_count()}")
    remote = _remote_cpus(VICTIM)
    if not remote:
        pytest.skip(f"GPU {VICTIM} is local to every CPU of this host (one NUMA node): nothing remote to pin to")
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "repin.py"), "--rank", str(VICTIM), "--cpus",
                           pinning.cpulist(remote), "--", sys.executable, "-m", "acceptance_operator.cli", "local",
                           "--quick", "--json", "r.json"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    affinity = [r for r in report.results if r.name == "cpu_affinity"]
    bad = [r for r in affinity if not r.passed]
    assert proc.returncode == 1 and [r.gpu for r in bad] == [VICTIM], proc.stderr[-3000:]
    assert all(r.passed for r in affinity if r.gpu != VICTIM)  # the others stayed where the launcher put them
    assert bad[0].node in report.failed_nodes and "NUMA-local CPUs" in bad[0].message
    assert f"GPU {VICTIM} on node {bad[0].node}: the rank ran on CPUs" in bad[0].message
