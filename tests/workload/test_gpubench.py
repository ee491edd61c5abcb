"""Judging the per-GPU check: numbers in, results out; a slow GPU is named by node and index, a gap fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from acceptance_workload.checks.gpu.gpubench import host_id, host_turn, judge_gpus, rate, suspects
from acceptance_workload.checks.gpu.parts import gpu_table
from acceptance_workload.checks.gpu.spec import GpuCheck
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.local import cpu_smoke_checks
from acceptance_workload.report.model import GpuDetail, GpuRow

from tests.workload.multiproc import run_with_a_slowed_rank

HEALTHY = {"gemm_tflops": 780.0, "hbm_gbps": 2950.0, "h2d_gbps": 52.0, "d2h_gbps": 51.0}


def rows(node: str, gpus: int, first_rank: int = 0, **overrides: dict) -> list[GpuRow]:
    """`gpus` healthy GPUs on `node`; overrides={"g3": {"gemm_tflops": 546}} changes GPU 3."""
    return [GpuRow(rank=first_rank + g, node=node, gpu=g, **{**HEALTHY, **overrides.get(f"g{g}", {})})
            for g in range(gpus)]


def detail(*parts: list[GpuRow]) -> GpuDetail:
    return GpuDetail(gemm_size=8192, hbm_bytes=1 << 30, host_bytes=256 << 20, windows=7, iters=10,
                     rows=[r for p in parts for r in p])


def h100() -> GpuCheck:
    return WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=2).checks.gpu


def failed(results: list[CheckResult]) -> list[tuple[str, str | None, int | None]]:
    return [(r.name, r.node, r.gpu) for r in results if not r.passed]


def test_healthy_gpus_pass_every_result_two_per_gpu_and_measurement() -> None:
    results, skipped = judge_gpus(h100(), detail(rows("a", 8), rows("b", 8, 8)), cpu=False)
    assert skipped == [] and failed(results) == []
    assert len(results) == 16 * 4 * 2
    gemm = next(r for r in results if r.name == "gemm_tflops" and r.node == "b" and r.gpu == 5)
    assert gemm.value == 780.0 and gemm.threshold == 560 and gemm.comparison == "ge" and gemm.unit == "TFLOP/s"
    ratio = next(r for r in results if r.name == "gemm_tflops_ratio_to_node_median" and r.gpu == 5)
    assert ratio.value == 1.0 and ratio.threshold == 0.9


def test_one_gpu_at_70_percent_of_its_node_fails_by_ratio_naming_node_and_gpu() -> None:
    check = h100().model_copy(update={"thresholds": h100().thresholds.model_copy(update={"min_gemm_tflops": 500})})
    slow = {"g3": {"gemm_tflops": 0.7 * 780}}  # 546: above the absolute floor of 500, so only the ratio catches it
    results, _ = judge_gpus(check, detail(rows("a", 8), rows("b", 8, 8, **slow)), cpu=False)
    assert failed(results) == [("gemm_tflops_ratio_to_node_median", "b", 3)]
    bad = next(r for r in results if not r.passed)
    assert bad.value == pytest.approx(0.7) and "GPU 3 on node b" in bad.message and "0.700 x the node's median" \
        in bad.message


def test_a_gpu_under_the_floor_fails_both_ways_and_the_ratio_uses_its_own_node_only() -> None:
    slow = {"g1": {"hbm_gbps": 2000.0}}
    fast_node = rows("b", 2, 2, g0={"hbm_gbps": 4000.0}, g1={"hbm_gbps": 4000.0})
    results, _ = judge_gpus(h100(), detail(rows("a", 2, **slow), fast_node), cpu=False)
    # node a: median of 2950 and 2000 = 2475; 2000 / 2475 = 0.81 fails, 2950 / 2475 = 1.19 passes;
    # node b's faster GPUs do not make node a's healthy GPU 0 look slow
    assert failed(results) == [("hbm_bandwidth", "a", 1), ("hbm_bandwidth_ratio_to_node_median", "a", 1)]


def test_a_missing_measurement_fails_with_its_error_and_does_not_move_the_median() -> None:
    gap = {"g2": {"h2d_gbps": None, "d2h_gbps": None, "error": "host copy: RuntimeError: CUDA out of memory"}}
    results, _ = judge_gpus(h100(), detail(rows("a", 4, **gap)), cpu=False)
    assert sorted(failed(results)) == [("d2h_bandwidth", "a", 2), ("d2h_bandwidth_ratio_to_node_median", "a", 2),
                                       ("h2d_bandwidth", "a", 2), ("h2d_bandwidth_ratio_to_node_median", "a", 2)]
    h2d = next(r for r in results if r.name == "h2d_bandwidth" and r.gpu == 2)
    assert h2d.value is None and "not measured" in h2d.message and "CUDA out of memory" in h2d.message
    others = [r for r in results if r.name == "h2d_bandwidth_ratio_to_node_median" and r.gpu != 2]
    assert [r.value for r in others] == [1.0, 1.0, 1.0]


def test_without_thresholds_values_are_recorded_but_a_gap_still_fails() -> None:
    results, _ = judge_gpus(GpuCheck(), detail(rows("a", 2, g1={"gemm_tflops": 10.0, "hbm_gbps": None})),
                            cpu=False)
    assert all(r.comparison == "info" for r in results)
    assert failed(results) == [("hbm_bandwidth", "a", 1), ("hbm_bandwidth_ratio_to_node_median", "a", 1)]


def test_without_host_copies_they_are_skipped_never_passed() -> None:
    results, skipped = judge_gpus(GpuCheck(), detail(rows("a", 2)), cpu=True)
    assert [(s.check, s.name) for s in skipped] == [("gpu", "h2d_bandwidth"), ("gpu", "d2h_bandwidth")]
    assert {r.name for r in results} == {"gemm_tflops", "gemm_tflops_ratio_to_node_median", "hbm_bandwidth",
                                         "hbm_bandwidth_ratio_to_node_median"}


def test_estimated_thresholds_are_marked_on_the_results_judged_by_them() -> None:
    spec = ChecksSpec.model_validate({"gpu": {"thresholds": {"minH2dGBps": 45}}})
    config = WorkloadConfig.build(checks=spec, profile="h200-sxm", nodes=1)
    assert "gpu.minH2dGBps" not in config.estimated_thresholds  # the test set it: a choice, not an estimate
    assert {"gpu.minD2hGBps", "gpu.minHostCopyRatioToNodeMedian"} <= set(config.estimated_thresholds)
    assert "gpu.minGemmTflops" not in config.estimated_thresholds  # measured on H200 and H100
    results, _ = judge_gpus(config.checks.gpu, detail(rows("a", 1)), cpu=False,
                            estimated=config.estimated_thresholds)
    by_name = {r.name: r for r in results}
    for measured in ("gemm_tflops", "gemm_tflops_ratio_to_node_median", "h2d_bandwidth"):
        assert by_name[measured].estimated is None and "estimated" not in by_name[measured].message
    assert by_name["d2h_bandwidth"].estimated is True and by_name["d2h_bandwidth"].message.endswith(
        "[estimated threshold]")
    assert by_name["h2d_bandwidth_ratio_to_node_median"].estimated is True
    assert "the only GPU of its node" in by_name["gemm_tflops_ratio_to_node_median"].message


def test_host_copies_have_their_own_looser_ratio_to_the_node_median() -> None:
    """Healthy host copies spread more than GEMM (4x H100: down to 0.93): 0.85 of the median passes them."""
    check = h100()
    assert check.thresholds.min_host_copy_ratio_to_node_median == 0.8
    uneven = {"g2": {"h2d_gbps": 0.85 * 52, "gemm_tflops": 0.85 * 780}, "g5": {"d2h_gbps": 0.5 * 51}}
    results, _ = judge_gpus(check, detail(rows("a", 8, **uneven)), cpu=False)
    assert failed(results) == [("gemm_tflops_ratio_to_node_median", "a", 2),
                               ("d2h_bandwidth", "a", 5), ("d2h_bandwidth_ratio_to_node_median", "a", 5)]
    h2d = next(r for r in results if r.name == "h2d_bandwidth_ratio_to_node_median" and r.gpu == 2)
    assert h2d.passed and h2d.threshold == 0.8


def test_custom_profile_marks_nothing_estimated() -> None:
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="custom", nodes=1)
    assert config.estimated_thresholds == [] and config.checks.gpu.thresholds.model_dump(exclude_none=True) == {}


def test_rate_is_the_median_window_and_a_bad_window_makes_it_missing() -> None:
    # 1 unit of work per op, 10 ops a window: windows of 1 s, 1 s, 2 s (a hiccup), 1 s, 1 s -> 10 per second
    measured = rate(1.0, [1.0, 1.0, 2.0, 1.0, 1.0], 10)
    assert measured.value == 10.0 and measured.spread == pytest.approx(0.5)
    assert rate(1.0, [1.0, 0.0, 1.0], 10).value is None
    # a CPU process on a busy host: most windows slowed, the fastest says what it can do
    assert rate(1.0, [4.0, 5.0, 1.0, 4.0, 6.0], 10, best=True).value == 10.0
    assert rate(1.0, [4.0, 5.0, 1.0, 4.0, 6.0], 10).value == 2.5


def test_a_gpu_slow_once_is_measured_again_and_not_blamed() -> None:
    """A transient: GPU 3 at 0.5x its node's median once, at 1.0x when every GPU measured again."""
    slow = {"g3": {"h2d_gbps": 26.0}}
    first, _ = judge_gpus(h100(), detail(rows("a", 4, **slow)), cpu=False)
    assert failed(first) == [("h2d_bandwidth", "a", 3), ("h2d_bandwidth_ratio_to_node_median", "a", 3)]
    assert suspects(first) == ["h2d_gbps"]
    measured = detail(rows("a", 4, **slow))
    for r in measured.rows:
        r.again = {"h2d_gbps": 52.0 + r.gpu * 0.1}
    results, _ = judge_gpus(h100(), measured, cpu=False)
    assert failed(results) == [("h2d_bandwidth", "a", 3)]  # the absolute floor judges the first value as before
    ratio = next(r for r in results if r.name == "h2d_bandwidth_ratio_to_node_median" and r.gpu == 3)
    assert ratio.passed and ratio.value == round(52.3 / 52.15, 4)
    assert ratio.message == ("GPU 3 on node a: host-to-device copy 26 GB/s = 0.500 x the node's median 52; measured "
                             "again: 52.3 GB/s = 1.003 x the node's median 52.15 (not slow the second time: not "
                             "blamed)")


def test_a_gpu_slow_both_times_is_named_with_both_values() -> None:
    measured = detail(rows("a", 4, g1={"gemm_tflops": 600.0}))
    for r in measured.rows:
        r.again = {"gemm_tflops": 610.0 if r.gpu == 1 else 780.0}
    results, _ = judge_gpus(h100(), measured, cpu=False)
    assert failed(results) == [("gemm_tflops_ratio_to_node_median", "a", 1)]
    ratio = next(r for r in results if not r.passed)
    assert ratio.value == round(610 / 780, 4)  # the better of the two: named only when both are below 0.9
    assert "600.0 TFLOP/s = 0.769 x" in ratio.message and "measured again: 610.0 TFLOP/s = 0.782 x" in ratio.message
    assert ratio.message.endswith("(slow both times)")


def test_a_gpu_not_measured_the_second_time_stays_named() -> None:
    """Fail closed: a re-measurement that failed cannot clear the GPU."""
    measured = detail(rows("a", 4, g2={"hbm_gbps": 2000.0}))
    for r in measured.rows:
        r.again = {"hbm_gbps": None if r.gpu == 2 else 2950.0}
    results, _ = judge_gpus(h100(), measured, cpu=False)
    assert ("hbm_bandwidth_ratio_to_node_median", "a", 2) in failed(results)
    ratio = next(r for r in results if r.name == "hbm_bandwidth_ratio_to_node_median" and r.gpu == 2)
    assert ratio.message.endswith("; measured again: not measured")


def _slowed_run(tmp_path: Path, until: str | None) -> tuple[Report, list[int]]:
    """Three `python -m acceptance_workload` ranks (gloo, CPU) running the gpu check alone; from its start rank 2
    is held stopped 9/10 of the time with SIGSTOP, to the end or until rank 0 prints `until`."""
    checks = cpu_smoke_checks(ChecksSpec()).model_copy(deep=True)
    checks.preflight.enabled = checks.p2p.enabled = checks.nccl.enabled = checks.ddp.enabled = False
    checks.signals.enabled = False
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", gpus_per_node=3, fabric="ethernet", checks=checks,
                            report_file=str(tmp_path / "report.json"))
    codes, _ = run_with_a_slowed_rank({CONFIG_ENV: config.to_env()}, ["node-a"] * 3, victim=2,
                                      slow_from="[gpu-acceptance cpu-smoke] gpu:", slow_until=until)
    return Report.model_validate(json.loads((tmp_path / "report.json").read_text())), codes


def test_a_rank_slowed_from_outside_is_named_by_the_real_run(tmp_path: Path) -> None:
    """Slowed throughout, rank 2 (node-a, GPU 2) is slow when measured again too: it alone is blamed."""
    report, codes = _slowed_run(tmp_path, until=None)
    assert codes == [1, 1, 1]
    assert report.checks_run == ["gpu"] and report.error is None and not report.passed
    assert report.gpu is not None and [(r.node, r.gpu) for r in report.gpu.rows] == [("node-a", g) for g in range(3)]
    assert all(r.gemm_tflops and r.hbm_gbps and r.h2d_gbps is None for r in report.gpu.rows)
    blamed = set(failed(report.results))
    assert blamed and blamed <= {("gemm_tflops_ratio_to_node_median", "node-a", 2),
                                 ("hbm_bandwidth_ratio_to_node_median", "node-a", 2)}, gpu_table(report)
    assert report.failed_nodes == ["node-a"]
    assert {s.name for s in report.skipped} == {"h2d_bandwidth", "d2h_bandwidth"}
    assert all(r.again for r in report.gpu.rows)  # every GPU measured again, the median with it
    for r in report.results:
        if not r.passed:
            assert "; measured again: " in r.message and r.message.endswith("(slow both times)"), r.message


def test_a_rank_slowed_only_the_first_time_is_not_blamed(tmp_path: Path) -> None:
    """The fault ends when rank 0 says every GPU measures again: rank 2 is not slow then, and the run passes."""
    report, codes = _slowed_run(tmp_path, until="every GPU measures that again")
    assert report.gpu is not None and all(r.again for r in report.gpu.rows), gpu_table(report)
    assert codes == [0, 0, 0] and report.passed, gpu_table(report)
    cleared = [r for r in report.results if r.gpu == 2 and "measured again" in r.message]
    assert cleared and all("not slow the second time: not blamed" in r.message for r in cleared)


def test_host_copies_take_turns_per_physical_host_not_per_node() -> None:
    # 2 real nodes of 2 GPUs: each node's GPUs go one after the other, the nodes side by side (2 turns)
    real = ["boot-a", "boot-a", "boot-b", "boot-b"]
    assert [host_turn(real, r) for r in range(4)] == [(0, 2), (1, 2), (0, 2), (1, 2)]
    # 4 simulated nodes of 1 GPU on one machine share its boot id: 4 turns, not 1 (all at once)
    sim = ["boot-a"] * 4
    assert [host_turn(sim, r) for r in range(4)] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    # uneven hosts: as many turns as the fullest host has ranks
    assert host_turn(["x", "y", "y", "y"], 0) == (0, 3)


def test_the_host_id_is_this_kernels_boot_id() -> None:
    boot = Path("/proc/sys/kernel/random/boot_id")
    expected = boot.read_text().strip() if boot.exists() else "node-x"
    assert host_id("node-x") == expected
