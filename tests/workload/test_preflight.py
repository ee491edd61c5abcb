"""Preflight: limits, /dev/shm and InfiniBand ports (fake sysfs root), GPU judgement, and no GPU at all."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from acceptance_workload.checks import table as rules
from acceptance_workload.checks.preflight.preflight import (
    GpuSnapshot,
    Versions,
    hca_selected,
    ib_checks,
    judge_gpu,
    local_preflight,
    memlock_check,
    shm_check,
    version_checks,
)
from acceptance_workload.checks.preflight.profile import FLOORS
from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.wire import version_tuple

H100 = FLOORS["h100-sxm"]


def fake_port(root: Path, dev: str, port: int, state: str, rate: str, layer: str = "InfiniBand") -> None:
    p = root / "sys" / "class" / "infiniband" / dev / "ports" / str(port)
    p.mkdir(parents=True)
    (p / "state").write_text(state + "\n")
    (p / "rate").write_text(rate + "\n")
    (p / "link_layer").write_text(layer + "\n")


def test_ib_ports_active_and_at_rate_pass_down_or_slow_fail(tmp_path: Path) -> None:
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)")
    fake_port(tmp_path, "mlx5_1", 1, "1: DOWN", "400 Gb/sec (4X NDR)")
    fake_port(tmp_path, "mlx5_2", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)")
    results, skipped = ib_checks(H100, "gpu-7", fabric="infiniband", nodes=2, sys_root=tmp_path)
    assert skipped == []
    by = {(r.name, r.observed.split()[0]): r for r in results}
    assert by[("ib_port_state", "mlx5_0:1")].passed and by[("ib_port_rate", "mlx5_0:1")].passed
    down = by[("ib_port_state", "mlx5_1:1")]
    assert not down.passed and down.node == "gpu-7" and "DOWN" in down.message
    slow = by[("ib_port_rate", "mlx5_2:1")]
    assert not slow.passed and slow.value == 200 and slow.threshold == 400 and "needs >= 400" in slow.message


def test_nccl_ib_hca_selects_the_ports_checked(tmp_path: Path) -> None:
    fake_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "400 Gb/sec (4X NDR)")
    fake_port(tmp_path, "mlx5_bond_0", 1, "1: DOWN", "100 Gb/sec", layer="Ethernet")
    results, _ = ib_checks(H100, "n", fabric="roce", nodes=2, sys_root=tmp_path, hca_filter="^mlx5_bond")
    assert {r.observed.split()[0] for r in results} == {"mlx5_0:1"} and all(r.passed for r in results)
    assert hca_selected("mlx5_10", 1, "mlx5_1") and not hca_selected("mlx5_10", 1, "=mlx5_1")
    assert hca_selected("mlx5_1", 2, "mlx5_1:2") and not hca_selected("mlx5_1", 1, "mlx5_1:2")


def test_no_rdma_device_fails_a_multi_node_test_and_is_skipped_on_one_node(tmp_path: Path) -> None:
    [r], _ = ib_checks(H100, "gpu-3", fabric="infiniband", nodes=4, sys_root=tmp_path)
    assert not r.passed and r.value is None and "no RDMA port" in r.message and "gpu-3" in r.message
    results, [skip] = ib_checks(H100, "gpu-3", fabric="infiniband", nodes=1, sys_root=tmp_path)
    assert results == [] and "single-node" in skip.reason
    results, [skip] = ib_checks(H100, "gpu-3", fabric="ethernet", nodes=4, sys_root=tmp_path)
    assert results == [] and "ethernet" in skip.reason


def test_a_single_node_run_records_its_ports_without_judging_them(tmp_path: Path) -> None:
    fake_port(tmp_path, "mlx5_0", 1, "1: DOWN", "10 Gb/sec (4X SDR)")
    results, _ = ib_checks(H100, "box", fabric="infiniband", nodes=1, sys_root=tmp_path)
    assert results and all(r.passed and r.comparison == "info" for r in results)
    assert all("single node: not judged" in r.message for r in results)


def test_shm_size_against_the_threshold(tmp_path: Path) -> None:
    ok = shm_check(PreflightThresholds(min_shm_bytes=1), "n", tmp_path)
    assert ok.passed and ok.value > 0 and ok.unit == "bytes"
    small = shm_check(PreflightThresholds(min_shm_bytes="4Ti"), "n", tmp_path)
    assert not small.passed and "spec.pod.shmSize" in small.message and small.node == "n"
    missing = shm_check(PreflightThresholds(min_shm_bytes="1Gi"), "n", tmp_path / "nope")
    assert not missing.passed and missing.value is None and "cannot stat" in missing.message


def test_memlock_must_be_unlimited_and_the_message_says_where_to_fix_it() -> None:
    th = PreflightThresholds(require_unlimited_memlock=True)
    inf = resource.RLIM_INFINITY
    assert memlock_check(th, "n", (inf, inf)).passed
    bad = memlock_check(th, "n", (64 << 10, 64 << 10))
    assert not bad.passed and bad.observed.startswith("64Ki")
    assert "init container's ulimit does not reach this container" in bad.message and "LimitMEMLOCK" in bad.message
    info = memlock_check(PreflightThresholds(), "n", (64 << 10, 64 << 10))
    assert info.passed and info.comparison == "info"
    no_rdma = memlock_check(th, "n", (64 << 10, 64 << 10), rdma=False)
    assert no_rdma.passed and "not judged: this run uses no RDMA" in no_rdma.message


def healthy(index: int = 0) -> GpuSnapshot:
    return GpuSnapshot(index=index, name="NVIDIA H100 80GB HBM3", bus_id="00000000:18:00.0", temperature_c=41,
                       ecc_uncorrected=0, pending_remap=False, remap_failure=False, throttle_reasons=0x1,
                       sm_clock_mhz=1980, max_sm_clock_mhz=1980, pcie_gen=5, pcie_width=16, pcie_max_gen=5,
                       pcie_max_width=16, nvlink_active=18, nvlink_total=18)


def test_a_healthy_h100_passes_every_item() -> None:
    results, skipped = judge_gpu(healthy(), H100, "gpu-1", 0)
    assert skipped == [] and all(r.passed for r in results), [r for r in results if not r.passed]
    assert {r.name for r in results} == {"gpu_model", "temperature", "ecc_uncorrected", "pending_row_remaps",
                                         "throttle", "pcie_generation", "pcie_width", "nvlink_active_links"}
    assert all(r.node == "gpu-1" and r.gpu == 0 for r in results)


@pytest.mark.parametrize(("change", "failing"), [
    ({"name": "NVIDIA A100-SXM4-80GB"}, "gpu_model"),
    ({"temperature_c": 91}, "temperature"),
    ({"ecc_uncorrected": 2}, "ecc_uncorrected"),
    ({"pending_remap": True}, "pending_row_remaps"),
    ({"throttle_reasons": 0x40}, "throttle"),
    ({"pcie_gen": 4}, "pcie_generation"),
    ({"pcie_width": 8}, "pcie_width"),
    ({"nvlink_active": 17}, "nvlink_active_links"),
])
def test_each_degraded_item_fails_naming_node_and_gpu(change: dict, failing: str) -> None:
    snap = healthy(3)
    for k, v in change.items():
        setattr(snap, k, v)
    results, _ = judge_gpu(snap, H100, "gpu-9", 3)
    bad = [r for r in results if not r.passed]
    assert [r.name for r in bad] == [failing]
    assert bad[0].node == "gpu-9" and bad[0].gpu == 3 and "GPU 3 (00000000:18:00.0) on node gpu-9" in bad[0].message


def test_unreadable_items_fail_when_judged_and_are_skipped_when_not() -> None:
    snap = healthy()
    snap.ecc_uncorrected = None
    snap.errors["ecc"] = "NVMLError_NotSupported: Not Supported"
    results, skipped = judge_gpu(snap, H100, "n", 0)
    [bad] = [r for r in results if not r.passed]
    assert bad.name == "ecc_uncorrected" and bad.value is None and "Not Supported" in bad.message
    results, skipped = judge_gpu(snap, PreflightThresholds(), "n", 0)
    assert all(r.passed for r in results) and [s.name for s in skipped] == ["ecc_uncorrected gpu 0"]


def test_versions_against_minimums() -> None:
    v = Versions(torch="2.5.1", cuda="12.4", nccl="2.21.5", driver="550.90.07", gpu_model="H100", nvml_gpus=8,
                 cuda_gpus=8)
    results = {r.name: r for r in version_checks(H100, "n", v, 8)}
    assert all(r.passed for r in results.values())
    old = version_checks(H100, "n", Versions(nccl="2.17.1", driver="525.60.13", cuda_gpus=7, nvml_gpus=7), 8)
    failed = {r.name for r in old if not r.passed}
    assert failed == {"gpu_count", "driver_version", "nccl_version"}
    assert version_tuple("535.104.05") == (535, 104, 5) and version_tuple("12.4+cu") == (12, 4)


def test_preflight_without_gpus_fails_closed_with_a_clear_message() -> None:
    config = WorkloadConfig.build(checks=WorkloadConfig().checks, profile="h100-sxm", nodes=1, gpus_per_node=8)
    out = local_preflight(config, "cpu-box", 0, None, None)
    failed = {r.name: r for r in out.failures()}
    count = failed["gpu_count"]
    assert count.value == 0 and count.threshold == 8
    assert "CUDA sees 0" in count.message and "the test expects 8 per node" in count.message
    assert "NVML failed" in count.message and "NVIDIA driver is not visible in this container" in count.message
    assert "gpu_health" in failed and "could not be inspected through NVML" in failed["gpu_health"].message
    assert out.failed_nodes() == ["cpu-box"]


def test_a_floor_the_gpu_cannot_report_says_which_threshold_and_zero_turns_it_into_a_skip() -> None:
    """Seen on a 1x H100 VM (docs/benchmarks.md, 2026-12-06): NVML has no NVLink for a GPU passed through alone.
    The failure names the spec field to set; set to 0 the reading is not needed, and the run is looser than its
    profile (so it never admits a node). A read that failed for another cause gets no such hint."""
    snap = healthy()
    snap.nvlink_active = snap.nvlink_total = None
    snap.errors["nvlink"] = "NVMLError_NotSupported: Not Supported"
    [bad] = [r for r in judge_gpu(snap, H100, "vm", 0)[0] if not r.passed]
    assert bad.name == "nvlink_active_links" and bad.value is None
    assert "spec.checks.preflight.thresholds.minNvlinkActiveLinks needs it" in bad.message
    assert "set it to 0" in bad.message
    off = H100.model_copy(update={"min_nvlink_active_links": 0})
    results, skipped = judge_gpu(snap, off, "vm", 0)
    assert all(r.passed for r in results) and [s.name for s in skipped] == ["nvlink_active_links gpu 0"]
    assert [k for k, _, _ in rules.loosened("preflight", off, H100)] == ["preflight.minNvlinkActiveLinks"]
    snap.errors["nvlink"] = "NVMLError_GpuIsLost: GPU is lost"
    [lost] = [r for r in judge_gpu(snap, H100, "vm", 0)[0] if not r.passed]
    assert "GPU is lost" in lost.message and "thresholds" not in lost.message
