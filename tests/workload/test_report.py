"""Threshold judgement of DDP numbers, the verdict (fail closed), and the report's round trip through the model."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from acceptance_workload.checks.ddp.ddp import judge_ddp
from acceptance_workload.checks.ddp.rules import MIN_LOSS_DECREASE
from acceptance_workload.checks.ddp.spec import DdpCheck
from acceptance_workload.checks.report_model import Report
from acceptance_workload.contract.results import CheckResult, judge
from acceptance_workload.report.model import DdpDetail, DdpRank, Environment, NcclRow, NcclSweep, Skip
from acceptance_workload.report.render import summary, verdict_table
from acceptance_workload.run import exit_code
from acceptance_workload.writers.text import full_text


def detail(baselines: list[float], ddp: list[float]) -> DdpDetail:
    return DdpDetail(model="gpt", unit="tokens/s", world_size=len(baselines), batch_size=8, ranks=[
        DdpRank(rank=i, node=f"n{i // 2}", gpu=i % 2, baseline_throughput=b, ddp_throughput=d)
        for i, (b, d) in enumerate(zip(baselines, ddp, strict=True))])


def check(**th) -> DdpCheck:
    return DdpCheck.model_validate({"thresholds": th})


def test_ddp_numbers_against_thresholds() -> None:
    d = detail([100.0, 100.0, 100.0, 80.0], [90.0, 90.0, 90.0, 90.0])
    results = {(r.name, r.node, r.gpu): r for r in judge_ddp(
        check(minThroughputPerGpu=85, minScalingEfficiency=0.9, maxStragglerRatio=1.1), d, [5.0, 4.0, 3.0, 2.0])}
    per_gpu = results[("throughput_per_gpu", None, None)]
    assert per_gpu.value == 90.0 and per_gpu.passed
    eff = results[("scaling_efficiency", None, None)]
    assert eff.value == pytest.approx(90 / 95, abs=1e-4) and eff.passed  # 90 / mean(100,100,100,80)
    straggler = results[("straggler_ratio", "n1", 1)]
    assert straggler.value == pytest.approx(1.25) and not straggler.passed  # median 100 / slowest 80
    slow_gpu = results[("gpu_throughput", "n1", 1)]
    assert not slow_gpu.passed and slow_gpu.value == 80.0
    loss = results[("loss_decrease", None, None)]
    assert loss.passed and loss.value == pytest.approx((4.5 - 2.5) / 4.5, abs=1e-4)
    assert d.first_loss == 4.5 and d.last_loss == 2.5


@pytest.mark.parametrize("losses", [[3.0, 3.0, 3.0, 3.0], [2.0, 2.5, 3.0, 3.5], [5.0, float("nan"), 4.0, float("nan")],
                                    []])
def test_a_loss_that_does_not_fall_fails(losses: list[float]) -> None:
    results = {r.name: r for r in judge_ddp(check(), detail([10.0, 10.0], [10.0, 10.0]), losses)}
    assert not results["loss_decrease"].passed
    assert results["loss_decrease"].threshold == MIN_LOSS_DECREASE


def test_judge_fails_a_missing_measurement_whatever_the_threshold() -> None:
    assert not judge(None, None, "info")
    assert not judge(None, 10, "ge")
    assert judge(10, 10, "ge") and not judge(9.99, 10, "ge")
    assert judge(3, 3, "le") and not judge(3.01, 3, "le")
    assert judge(0.0, None, "ge")


def full_report() -> Report:
    return Report(
        mode="gpu", generation=3, started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        finished_at=datetime(2025, 1, 2, 3, 9, 5, tzinfo=timezone.utc), checks_run=["preflight", "nccl", "ddp"],
        results=[
            CheckResult(check="preflight", name="temperature", value=41, unit="C", threshold=85, comparison="le",
                        passed=True, node="gpu-1", gpu=0, message="ok"),
            CheckResult(check="nccl", name="all_reduce_busbw", value=371.2, unit="GB/s", threshold=340,
                        passed=True, message="371.2 GB/s"),
            CheckResult(check="ddp", name="straggler_ratio", value=1.3, threshold=1.1, comparison="le", passed=False,
                        node="gpu-2", gpu=5, message="median GPU / slowest (GPU 5 on node gpu-2) = 1.3"),
        ],
        skipped=[Skip(check="nccl", name="transport", reason="x")],
        environment=Environment(gpu_model="NVIDIA H100 80GB HBM3", gpus_per_node=8, nodes=2, world_size=16,
                                driver_version="550.90.07", cuda_version="12.4", nccl_version="2.21.5",
                                torch_version="2.5.1", hostnames=["gpu-1", "gpu-2"], transports=["P2P", "IB_GDR"]),
        nccl=[NcclSweep(collective="all_reduce", scope="job", ranks=16, dtype="float32", rows=[
            NcclRow(size=1 << 30, count=1 << 28, time_us=5000.0, algbw_gbps=214.75, busbw_gbps=402.6, wrong=0)])],
        ddp=DdpDetail(model="gpt", unit="tokens/s", world_size=16, batch_size=8, first_loss=10.4, last_loss=2.1,
                      ranks=[DdpRank(rank=0, node="gpu-1", gpu=0, baseline_throughput=1.0, ddp_throughput=1.0)]),
    ).finalize()


def test_report_round_trips_through_the_model() -> None:
    report = full_report()
    wire = report.to_wire()
    assert "busbwGBps" in wire["nccl"][0]["rows"][0] and "failedNodes" in wire and "checksRun" in wire
    again = Report.model_validate(wire)
    assert again == report
    assert again.failed_nodes == ["gpu-2"] and not again.passed


def test_verdict_fails_closed() -> None:
    report = full_report()
    report.results = [r.model_copy(update={"passed": True}) for r in report.results]
    assert report.finalize().passed and exit_code(report) == 0
    report.checks_run.append("ddp")
    report.results = [r for r in report.results if r.check != "ddp"]  # an enabled check with no result
    assert not report.finalize().passed and exit_code(report) == 1
    report.results.append(CheckResult(check="ddp", name="x", value=1, passed=True))
    report.error = "rank 3 (node gpu-2, GPU 3) failed"
    assert not report.finalize().passed and exit_code(report) == 2
    assert not Report().finalize().passed  # nothing run: not a pass


def test_tables_name_the_failure_and_the_summary_fits_a_termination_message() -> None:
    report = full_report()
    table = verdict_table(report)
    fail_line = next(line for line in table.splitlines() if line.startswith("FAIL"))
    assert "straggler_ratio" in fail_line and "gpu-2" in fail_line and " 5 " in fail_line and "<= 1.1" in fail_line
    assert "VERDICT: FAILED: 2/3 checks passed; failed nodes: gpu-2" in table
    assert "headline     all_reduce busbw 371.2 GB/s" in table
    text = full_text(report)
    assert "# all_reduce (job, 16 ranks, float32)" in text and "1073741824" in text and "402.60" in text
    short = summary(report)
    assert short.startswith("FAILED: 2/3 checks passed") and "all_reduce busbw 371.2 GB/s" in short
    report.results += [CheckResult(check="preflight", name="temperature", value=99, passed=False, node=f"n{i}",
                                   message="x" * 500) for i in range(40)]
    assert len(summary(report.finalize()).encode()) <= 4000


def test_cpu_smoke_reports_say_so() -> None:
    report = Report(mode="cpu-smoke", checks_run=["nccl"], results=[
        CheckResult(check="nccl", name="all_reduce_correctness", value=0, threshold=0, comparison="le",
                    passed=True)]).finalize()
    assert "CPU SMOKE RUN" in verdict_table(report) and summary(report).startswith("CPU SMOKE RUN PASSED")


def test_ddp_results_judged_by_an_estimated_floor_say_so() -> None:
    d = detail([100.0, 100.0], [95.0, 95.0])
    results = {(r.name, r.gpu): r for r in judge_ddp(check(minThroughputPerGpu=85, minScalingEfficiency=0.9),
                                                    d, [5.0, 4.0], estimated={"ddp.minThroughputPerGpu"})}
    assert results[("throughput_per_gpu", None)].estimated and results[("gpu_throughput", 0)].estimated
    assert "[estimated threshold]" in results[("throughput_per_gpu", None)].message
    assert results[("scaling_efficiency", None)].estimated is None


def test_one_rank_has_no_scaling_efficiency_a_skip_and_the_headline_shows_no_zero_busbw() -> None:
    """DDP on one rank does not scale, and a one-rank all_reduce moves no bytes: neither is a number in the
    headline or the results (a skip says why); a floor the spec sets anyway fails as missing."""
    from acceptance_workload.checks.ddp.ddp import one_rank_skips
    from acceptance_workload.report.model import ONE_RANK_SCALING

    d = detail([100.0], [99.5])
    results = judge_ddp(check(), d, [5.0, 4.0])
    assert "scaling_efficiency" not in {r.name for r in results}
    assert one_rank_skips(d, results) == [Skip(check="ddp", name="scaling_efficiency", reason=ONE_RANK_SCALING)]
    (floor,) = [r for r in judge_ddp(check(minScalingEfficiency=0.9), d, [5.0, 4.0]) if r.name == "scaling_efficiency"]
    assert floor.value is None and not floor.passed and ONE_RANK_SCALING in floor.message
    sweep = NcclSweep(collective="all_reduce", scope="job", ranks=1, dtype="float32", rows=[
        NcclRow(size=1 << 30, count=1 << 28, time_us=9.0, algbw_gbps=0.0, busbw_gbps=0.0, wrong=0)])
    report = Report(checks_run=["nccl", "ddp"], nccl=[sweep], ddp=d, results=results).finalize()
    head = report.headline()
    assert head.all_reduce_busbw_gbps is None and head.scaling_efficiency is None
    assert not any("busbw" in p or "scaling" in p for p in head.parts())
    two = report.model_copy(update={"nccl": [sweep.model_copy(update={"ranks": 2})]})
    assert two.headline().all_reduce_busbw_gbps == 0.0  # two ranks that moved nothing: a measured 0 stays one
