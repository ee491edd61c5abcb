"""The workload on real GPUs with NCCL (2 GPUs or more): `python -m pytest -m gpu tests/gpu`.

These are the only tests of the CUDA paths (NVML preflight, NCCL sweeps and
transport, bf16 DDP, CUDA-graph timing, the watchdog under NCCL); they fail,
rather than skip, on a machine with fewer than two GPUs, since running them
there is a mistake.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_workload.checks.gpu.parts import gpu_table
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.local import run_processes

from tests.workload.multiproc import REPO, run_workers

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpus() -> int:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert count >= 2, f"the GPU tests need at least 2 CUDA GPUs; torch sees {count}"
    return 2


def test_two_gpu_run_measures_checks_and_passes(gpus: int, tmp_path: Path) -> None:
    checks = ChecksSpec.model_validate({
        "preflight": {"thresholds": {"maxGpuTemperatureC": 90, "maxUncorrectedEccErrors": 0,
                                     "maxPendingRowRemaps": 0, "minPcieWidth": 1}},
        "nccl": {"maxBytes": "256Mi", "stepFactor": 4, "iters": 10, "warmupIters": 3, "requireTransport": "P2P",
                 "thresholds": {"referenceBytes": "64Mi", "allReduceBusbwGBps": 50}},
        "ddp": {"steps": 10, "warmupSteps": 3},
    })
    config = WorkloadConfig.build(checks=checks, profile="custom", nodes=1, gpus_per_node=gpus, fabric="ethernet",
                                  report_file=str(tmp_path / "r.json"))
    code = run_processes(config, gpus)
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    failed = [r for r in report.results if not r.passed]
    assert code == 0 and report.passed, (report.error, failed)
    env = report.environment
    assert env.world_size == gpus and env.gpu_model and env.driver_version and env.nccl_version
    assert "P2P" in env.transports
    assert len(report.nccl) == 6 and all(row.wrong == 0 for s in report.nccl for row in s.rows)
    names = {r.name for r in report.results}
    assert {"gpu_model", "temperature", "ecc_uncorrected", "pcie_generation", "gpu_count", "driver_version",
            "nccl_version", "transport", "all_reduce_busbw"} <= names
    # NVLink: measured on SXM boards; a PCIe card has none, which is recorded as a skip, never as a pass
    assert "nvlink_active_links" in names or any(s.name.startswith("nvlink") for s in report.skipped)
    gpus_seen = {(r.node, r.gpu) for r in report.results if r.name == "temperature"}
    assert len(gpus_seen) == gpus  # every GPU inspected, named by node and index
    assert report.ddp is not None and report.ddp.last_loss < report.ddp.first_loss
    assert all(r.baseline_throughput > 0 and r.ddp_throughput > 0 for r in report.ddp.ranks)


def _bench(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "nccl_ddp.py"), "--gpus", "2", "--no-ddp",
                           "--min-bytes", "1Mi", "--max-bytes", "64Mi", "--iters", "20", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_cuda_graph_timing_agrees_with_eager_timing(gpus: int, tmp_path: Path) -> None:
    eager = _bench(tmp_path, "eager", "--cuda-graphs", "never")
    graphs = _bench(tmp_path, "graphs", "--cuda-graphs", "always")
    assert graphs["meta"]["cudaGraphs"] == "always" and eager["meta"]["cudaGraphs"] == "never"
    assert eager["meta"]["wrongElements"] == 0 == graphs["meta"]["wrongElements"]

    def busbw_at_largest(run: dict) -> float:
        sweep = next(s for s in run["report"]["nccl"] if s["collective"] == "all_reduce")
        return sweep["rows"][-1]["busbwGBps"]

    e, g = busbw_at_largest(eager), busbw_at_largest(graphs)
    assert e > 0 and abs(g - e) / e < 0.10, (e, g)  # at 64 MiB launch overhead is negligible: same bandwidth


def test_a_rank_that_never_joins_an_nccl_collective_is_named(gpus: int, tmp_path: Path) -> None:
    ranks = run_workers("hang", 2, tmp_path, wait_for=[0], timeout=120,
                        extra={"CUDA_VISIBLE_DEVICES": "0,1", "WORKER_BACKEND": "nccl"})
    assert ranks[0].returncode == 3, ranks[0].stderr[-3000:]
    assert "rank 1 (node node-a, GPU 1)" in ranks[0].data["fatal"]


def _gpu_check_only(tmp_path: Path, gpus: int, name: str) -> WorkloadConfig:
    """Only the per-GPU check, judged by the profile of the GPUs here (h100-sxm, h200-sxm, ...)."""
    import torch
    from acceptance_workload.configuration.profiles import profile_for_gpu

    checks = ChecksSpec.model_validate({"preflight": {"enabled": False}, "nccl": {"enabled": False},
                                        "ddp": {"enabled": False}})
    profile = profile_for_gpu(torch.cuda.get_device_name(0)) or "custom"
    return WorkloadConfig.build(checks=checks, profile=profile, nodes=1, gpus_per_node=gpus,
                                report_file=str(tmp_path / f"{name}.json"))


def test_gpu_check_measures_every_gpu_and_passes_on_healthy_gpus(gpus: int, tmp_path: Path) -> None:
    config = _gpu_check_only(tmp_path, gpus, "healthy")
    code = run_processes(config, gpus)
    report = Report.model_validate(json.loads((tmp_path / "healthy.json").read_text()))
    assert report.gpu is not None and [r.gpu for r in report.gpu.rows] == list(range(gpus))
    for row in report.gpu.rows:  # every measurement taken, in the range these parts reach
        assert row.error is None and row.gemm_tflops and row.hbm_gbps and row.h2d_gbps and row.d2h_gbps, row
        assert 100 < row.gemm_tflops < 2500 and 500 < row.hbm_gbps < 20_000 and 5 < row.h2d_gbps < 200, row
    failed = [r for r in report.results if not r.passed]
    assert code == 0 and report.passed, failed
    assert len(report.results) == gpus * 4 * 2 and report.skipped == []


def test_gpu_check_names_a_gpu_saturated_by_another_process(gpus: int, tmp_path: Path) -> None:
    """A second process runs matmuls on GPU 1 for the whole check: GPU 1, and only GPU 1, is blamed."""
    hog = subprocess.Popen([sys.executable, "-c", (
        "import time, torch\n"
        "a = torch.randn(8192, 8192, device='cuda:1', dtype=torch.bfloat16)\n"
        "end = time.time() + 240\n"
        "while time.time() < end:\n"
        "    for _ in range(20): a @ a\n"
        "    torch.cuda.synchronize(1)\n"
        "    print('busy', flush=True)\n")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout is not None and hog.stdout.readline().strip() == "busy"  # GPU 1 is loaded from here on
        config = _gpu_check_only(tmp_path, gpus, "hog")
        code = run_processes(config, gpus)
    finally:
        hog.kill()
        hog.wait()
    report = Report.model_validate(json.loads((tmp_path / "hog.json").read_text()))
    blamed = {(r.name, r.gpu) for r in report.results if not r.passed}
    print(gpu_table(report))
    assert code == 1 and ("gemm_tflops_ratio_to_node_median", 1) in blamed, (blamed, gpu_table(report))
    assert all(gpu == 1 for _, gpu in blamed), (blamed, gpu_table(report))


def test_cross_check_with_real_nccl_tests_agrees_on_every_collective(gpus: int, tmp_path: Path) -> None:
    """checks.nccl.crossCheck with NVIDIA's binaries ($GPU_ACCEPTANCE_NCCL_TESTS_DIR, else .nccl-tests/build as
    bench/compare_nccl_tests.sh builds them): every collective within the tolerance of nccl-tests."""
    import os

    from acceptance_workload.checks.nccl import nccltests

    folder = os.environ.get(nccltests.DIR_ENV) or str(REPO / ".nccl-tests" / "build")
    assert (Path(folder) / "all_reduce_perf").exists(), (
        f"no nccl-tests binaries in {folder}: set {nccltests.DIR_ENV} or run bench/compare_nccl_tests.sh first")
    checks = ChecksSpec.model_validate({
        "preflight": {"enabled": False}, "gpu": {"enabled": False}, "ddp": {"enabled": False},
        "nccl": {"minBytes": "1Mi", "maxBytes": "1Gi", "stepFactor": 4, "crossCheck": True,
                 "thresholds": {"referenceBytes": "256Mi"}},
    })
    config = WorkloadConfig.build(checks=checks, profile="custom", nodes=1, gpus_per_node=gpus, fabric="ethernet",
                                  report_file=str(tmp_path / "r.json"))
    previous = os.environ.get(nccltests.DIR_ENV)
    os.environ[nccltests.DIR_ENV] = folder
    try:
        code = run_processes(config, gpus)
    finally:
        if previous is None:
            os.environ.pop(nccltests.DIR_ENV)
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    cross = [r for r in report.results if r.name.endswith(nccltests.RESULT_SUFFIX)]
    assert len(cross) == 6, [r.message for r in cross]
    assert all(r.passed and r.value is not None and r.value <= 0.1 for r in cross), [r.observed for r in cross]
    assert all("nccl-tests" in (r.observed or "") for r in cross)
    assert code == 0 and report.passed, (report.error, [r.message for r in report.results if not r.passed])
