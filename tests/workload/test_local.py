"""`gpu-acceptance local`: the CPU smoke run end to end, manifests, and what it refuses."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from acceptance_operator.manifest_file import manifest_spec
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.contract.wire import parse_bytes
from acceptance_workload.local import (
    ManifestError,
    build_config,
    cpu_smoke_checks,
    may_end,
    quick_checks,
    read_manifest,
)

from tests.checks import ON_BY_DEFAULT


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "OMPI_", "PMI_"))}
    return subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "local", *args], cwd=cwd,
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=240)


def without_modules(tmp_path: Path, *names: str) -> dict[str, str]:
    """An environment in which importing `names` fails (the GPU machine has neither yaml nor kubernetes)."""
    blocked = tmp_path / "blocked"
    for name in names:
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    return {"PYTHONPATH": os.pathsep.join([str(blocked), os.environ.get("PYTHONPATH", "")])}


def test_cpu_smoke_run_writes_the_report_object(cpu_smoke_run) -> None:
    """End to end, with the Kubernetes client and pyyaml unimportable: a local run needs neither (conftest.py)."""
    proc, tmp_path = cpu_smoke_run.proc, cpu_smoke_run.dir
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    assert report.mode == "cpu-smoke" and report.passed and report.error is None
    assert report.checks_run == list(ON_BY_DEFAULT) and report.missing_checks() == []
    assert report.environment.world_size == 2
    # the per-GPU check on CPU: both processes measured, judged only against their median; host copies skipped
    assert report.gpu is not None and [r.gpu for r in report.gpu.rows] == [0, 1]
    assert all(r.gemm_tflops and r.hbm_gbps and r.h2d_gbps is None for r in report.gpu.rows)
    gpu_results = [r for r in report.results if r.check == "gpu"]
    assert {r.threshold for r in gpu_results if r.name.endswith("_ratio_to_node_median")} == {0.5}
    assert all(r.threshold is None for r in gpu_results if not r.name.endswith("_ratio_to_node_median"))
    assert {s.name for s in report.skipped if s.check == "gpu"} == {"h2d_bandwidth", "d2h_bandwidth"}
    assert {s.collective for s in report.nccl} == {"all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                                  "broadcast", "sendrecv"}
    assert max(r.size for s in report.nccl for r in s.rows) == 1 << 20
    # no GPU thresholds: busbw is recorded, not judged; correctness and the loss are
    assert all(r.threshold is None for r in report.results if r.name.endswith("_busbw"))
    judged = {r.name for r in report.results if r.comparison != "info"}
    assert {"all_reduce_correctness", "loss_decrease"} <= judged
    assert report.ddp is not None and report.ddp.last_loss < report.ddp.first_loss
    # labelled as a smoke run wherever a person looks
    assert "CPU SMOKE RUN" in proc.stderr and "VERDICT: PASSED (CPU smoke run)" in proc.stdout
    assert "[gpu-acceptance cpu-smoke] nccl done" in proc.stderr  # progress while it runs
    assert "[gpu-acceptance cpu-smoke] gpu: float32 matmul median" in proc.stderr
    assert "# gpu: GEMM 512^3" in proc.stdout
    assert json.loads((tmp_path / "r.json").read_text()) == report.to_wire()


def test_cpu_run_with_gpus_sets_the_number_of_gloo_processes(tmp_path: Path) -> None:
    manifest = tmp_path / "t.yaml"
    manifest.write_text("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: t}\n"
                        "spec:\n  checks:\n    preflight: {enabled: false}\n"
                        "    ddp: {enabled: false}\n    nccl: {collectives: [all_reduce]}\n")
    proc = cli("--cpu", "--gpus", "3", "-f", str(manifest), "--json", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    assert report.environment.world_size == 3 and report.nccl[0].ranks == 3


def test_simulated_nodes_are_named_sim_node_k_and_measured_per_node(tmp_path: Path) -> None:
    manifest = tmp_path / "t.yaml"
    manifest.write_text("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: t}\n"
                        "spec:\n  checks:\n    ddp: {enabled: false}\n"
                        "    nccl: {collectives: [all_reduce, sendrecv]}\n")
    proc = cli("--cpu", "--gpus", "4", "--simulate-nodes", "2", "-f", str(manifest), "--json", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    env = report.environment
    assert (env.nodes, env.gpus_per_node, env.world_size) == (2, 2, 4)
    assert env.hostnames == ["sim-node-0", "sim-node-1"]
    preflight_nodes = {r.node for r in report.results if r.check == "preflight" and r.node}
    assert preflight_nodes == {"sim-node-0", "sim-node-1"}
    assert "2 simulated nodes" in proc.stderr


def test_each_simulated_node_sees_its_own_gpus_from_zero_and_its_own_nccl_host() -> None:
    from acceptance_workload.configuration.workload import WorkloadConfig
    from acceptance_workload.local import child_env

    config = WorkloadConfig.build(checks=ChecksSpec(), profile="custom", nodes=2, gpus_per_node=2, fabric="ethernet")
    envs = [child_env(config, rank, 4, 1234) for rank in range(4)]
    assert [e["NODE_NAME"] for e in envs] == ["sim-node-0", "sim-node-0", "sim-node-1", "sim-node-1"]
    assert [e["NCCL_HOSTID"] for e in envs] == [e["NODE_NAME"] for e in envs]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "0,1", "2,3", "2,3"]


def test_simulated_nodes_must_split_the_processes_evenly() -> None:
    with pytest.raises(ManifestError, match="do not split into 3"):
        build_config(_args(cpu=True, simulate_nodes=3), 4)


def test_the_manifests_gpus_per_node_is_what_the_preflight_expects(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "spec:\n  gpusPerNode: 4\n  profile: h100-sxm")
    manifest = read_manifest(path, manifest_spec)
    assert manifest["gpus_per_node"] == 4
    # two GPUs visible, four expected: two processes run and the preflight is told four
    config = build_config(_args(file=path), 2, manifest["gpus_per_node"], manifest)
    assert config.gpus_per_node == 4
    bad = _manifest(tmp_path, "spec:\n  gpusPerNode: two")
    with pytest.raises(ManifestError, match=r"spec\.gpusPerNode"):
        read_manifest(bad, manifest_spec)


def test_without_gpus_a_gpu_run_is_refused_with_a_pointer_to_cpu(tmp_path: Path) -> None:
    proc = cli("--quick", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2
    assert "no CUDA GPU is visible" in proc.stderr and "gpu-acceptance local --cpu" in proc.stderr


def test_an_invalid_manifest_is_refused_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: x}\n"
                   "spec:\n  checks:\n    nccl:\n      minBytes: -5\n      itres: 3\n")
    proc = cli("--cpu", "-f", str(bad), cwd=tmp_path)
    assert proc.returncode == 2
    assert "spec.checks.nccl.minBytes" in proc.stderr and "spec.checks.nccl.itres" in proc.stderr
    with pytest.raises(ManifestError, match=r"spec\.profile: Input should be 'h100-sxm'"):
        read_manifest(_manifest(tmp_path, "spec: {profile: h900}"), manifest_spec)


def _manifest(tmp_path: Path, spec: str) -> str:
    path = tmp_path / "m.yaml"
    path.write_text(f"apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {{name: x}}\n{spec}\n")
    return str(path)


def _args(**kw) -> argparse.Namespace:
    base = {"cpu": False, "json": None, "file": None, "profile": None, "gpus": None, "quick": False,
            "simulate_nodes": None}
    base.update(kw)
    return argparse.Namespace(**base)


def test_a_manifest_sets_checks_and_profile_with_profile_defaults_underneath(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "spec:\n  profile: h200-sxm\n  checks:\n    nccl:\n      collectives: [all_reduce]\n"
                               "      thresholds: {allReduceBusbwGBps: 300}\n    ddp: {model: resnet50}")
    config = build_config(_args(file=path), 8, manifest=read_manifest(path, manifest_spec))
    assert config.profile == "h200-sxm" and config.gpus_per_node == 8 and config.nodes == 1
    th = config.checks.nccl.thresholds
    assert th.all_reduce_busbw_gbps == 300 and th.node_all_reduce_busbw_gbps == 340  # spec wins, profile fills
    assert config.checks.ddp.model == "resnet50"
    assert config.checks.preflight.thresholds.gpu_model == "H200"
    quick = build_config(_args(file=path, quick=True), 8, manifest=read_manifest(path, manifest_spec))
    assert parse_bytes(quick.checks.nccl.max_bytes) == 1 << 30
    assert quick.checks.ddp.steps == 12 and quick.checks.ddp.windows == 4
    # quick: fewer, shorter windows, the same sizes, so the profile's per-GPU floors still apply
    assert quick.checks.gpu.windows < config.checks.gpu.windows and quick.checks.gpu.iters < config.checks.gpu.iters
    assert quick.checks.gpu.thresholds == config.checks.gpu.thresholds and quick.checks.gpu.thresholds.min_gemm_tflops


def test_cpu_smoke_checks_drop_every_threshold_but_the_relative_ones() -> None:
    from acceptance_workload.configuration.checks import ChecksSpec
    from acceptance_workload.configuration.profiles import resolve_checks

    resolved = resolve_checks(ChecksSpec(), "h100-sxm", 2)
    smoke = cpu_smoke_checks(resolved)
    # relative to the median of the other nodes' pairs: the localisation stage judges CPU runs too
    # and the latency ceiling, loose on shared CPU cores (gloo), so the latency results are judged in the smoke run
    assert smoke.nccl.thresholds.model_dump(exclude_none=True) == {
        "inter_node_ratio_to_median": 0.35, "all_reduce_latency_us": 200_000.0,
        "node_all_reduce_latency_us": 200_000.0}
    assert smoke.nccl.localize == "onFailure"
    assert cpu_smoke_checks(ChecksSpec.model_validate({"nccl": {"localize": "never"}})).nccl.localize == "never"
    assert smoke.ddp.thresholds.model_dump(exclude_none=True) == {}
    # CPU binding: each gloo rank within its share of the pod's CPUs (binding.py)
    assert smoke.preflight.thresholds.model_dump(exclude_none=True) == {"require_numa_local_cpus": True}
    assert smoke.gpu.thresholds.model_dump(exclude_none=True) == {"min_ratio_to_node_median": 0.5}
    assert smoke.gpu.gemm_size < 1024 and smoke.gpu.gemm_warmup_seconds == 0
    assert parse_bytes(smoke.nccl.max_bytes) == 1 << 20 and smoke.nccl.sizes()[-1] == 1 << 20
    quick = quick_checks(resolved).nccl.sizes()
    assert quick[-1] == 1 << 30 and quick[0] == 16 and len(quick) == 14  # the 1 GiB reference size is measured


def test_without_a_profile_the_gpus_own_profile_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    config = build_config(_args(), 2)
    assert config.profile == "h200-sxm" and config.checks.preflight.thresholds.gpu_model == "H200"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA L40S")
    unknown = build_config(_args(), 2)
    assert unknown.profile == "custom" and unknown.checks.nccl.thresholds.all_reduce_busbw_gbps is None
    assert build_config(_args(profile="a100-sxm"), 2).profile == "a100-sxm"  # an explicit profile wins


def test_a_manifest_without_a_profile_is_judged_by_the_gpus_own(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Found on 2x H200: a manifest that only set a timeout judged the GPUs against H100 and failed gpu_model.
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    path = _manifest(tmp_path, "spec:\n  checks:\n    nccl: {collectiveTimeoutSeconds: 20}")
    assert read_manifest(path, manifest_spec)["profile"] is None
    config = build_config(_args(file=path), 2, manifest=read_manifest(path, manifest_spec))
    assert config.profile == "h200-sxm" and config.checks.nccl.collective_timeout_seconds == 20


def _settles(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_stopped_rank_is_not_waited_for_at_teardown() -> None:
    """After rank 0 ends, the launcher waits KILL_GRACE_SECONDS for ranks that may still end, not for a stopped one."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert may_end(proc)
        os.kill(proc.pid, signal.SIGSTOP)
        assert _settles(lambda: not may_end(proc))  # a signal is delivered soon, not at once
        os.kill(proc.pid, signal.SIGCONT)
        assert _settles(lambda: may_end(proc))
    finally:
        proc.kill()
        proc.wait()
    assert not may_end(proc)
