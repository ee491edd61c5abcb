"""The operator's verdict and summary come from the report's results, fail closed."""

from __future__ import annotations

import pytest
from acceptance_operator.judging.verdict import (
    measured_nodes,
    report_for_generation,
    summarize,
    verdict_message,
)
from acceptance_workload.checks.report_model import Report
from acceptance_workload.report.model import DdpDetail, DdpRank, NcclRow, NcclSweep

from tests.unit.operator_samples import good_report, result


def test_passing_report_summary():
    s = summarize(good_report())
    assert s.result == "Passed"
    assert (s.passed, s.failed, s.total) == (6, 0, 6)
    assert s.all_reduce_busbw_gbps == pytest.approx(371.46)  # the job-wide result, not node-a's
    assert s.ddp_throughput_per_gpu == pytest.approx(41234.57)
    assert s.ddp_throughput_unit == "tokens/s"
    assert s.scaling_efficiency == pytest.approx(0.9346)
    assert s.failed_nodes == []
    assert summarize(good_report()).to_wire()["allReduceBusbwGBps"] == pytest.approx(371.46)


def test_failed_result_fails_and_blames_its_node():
    report = good_report()
    report.results[1] = result("preflight", "gpu_count", 7, 8, passed=False, node="node-b", comparison="eq")
    s = summarize(report)
    assert s.result == "Failed"
    assert (s.passed, s.failed, s.total) == (5, 1, 6)
    assert s.failed_nodes == ["node-b"]
    message = verdict_message(report)
    assert "1 of 6 checks failed" in message
    assert "preflight/gpu_count on node-b: 7 != 8" in message
    assert "nodes to blame: node-b" in message


def test_stored_passed_flag_is_not_trusted():
    """A report that says passed but carries a failed result is judged on its results."""
    report = good_report()
    report.results.append(result("nccl", "all_gather_busbw", 10, 100, passed=False, unit="GB/s"))
    report.passed = True
    assert summarize(report).result == "Failed"


def test_missing_check_counts_as_failed():
    report = good_report()
    report.results = [r for r in report.results if r.check != "ddp"]
    s = summarize(report)
    assert s.result == "Failed"
    assert (s.passed, s.failed, s.total) == (4, 1, 5)
    assert "no result for enabled check(s) ddp" in verdict_message(report)


def test_error_fails_and_is_quoted():
    report = good_report()
    report.error = "rank 3 on node-b did not join all_reduce within 300s"
    assert summarize(report).result == "Failed"
    assert "rank 3 on node-b" in verdict_message(report)


def test_report_with_no_checks_fails():
    report = Report(generation=1, checks_run=[], results=[])
    assert summarize(report).result == "Failed"
    assert "no checks" in verdict_message(report)


def test_unmeasured_value_is_described():
    report = good_report()
    report.results.append(result("preflight", "nvlink_active_links", None, 18, passed=False, node="node-a", gpu=3))
    assert "preflight/nvlink_active_links on node-a GPU 3: not measured" in verdict_message(report)


def test_passing_message_has_the_numbers():
    message = verdict_message(good_report())
    assert message.startswith("all 6 checks passed")
    assert "all_reduce busbw 371.46 GB/s" in message
    assert "tokens/s per GPU" in message


def test_busbw_falls_back_to_the_job_wide_sweep():
    report = Report(generation=1, checks_run=["nccl"], nccl=[
        NcclSweep(collective="all_reduce", scope="node", node="a", ranks=8, dtype="float32",
                  rows=[NcclRow(size=1 << 30, count=1, time_us=1, algbw_gbps=1, busbw_gbps=999, wrong=0)]),
        NcclSweep(collective="all_reduce", scope="job", ranks=16, dtype="float32",
                  rows=[NcclRow(size=1 << 20, count=1, time_us=1, algbw_gbps=1, busbw_gbps=100, wrong=0),
                        NcclRow(size=1 << 30, count=1, time_us=1, algbw_gbps=1, busbw_gbps=350, wrong=0)]),
    ])
    assert report.headline().all_reduce_busbw_gbps == 350
    assert summarize(report).all_reduce_busbw_gbps == 350
    assert Report(generation=1).headline().all_reduce_busbw_gbps is None


def test_ddp_throughput_falls_back_to_rank_mean():
    report = Report(generation=1, checks_run=["ddp"], ddp=DdpDetail(
        model="gpt", unit="tokens/s", world_size=2, batch_size=8,
        ranks=[DdpRank(rank=0, node="a", gpu=0, baseline_throughput=10, ddp_throughput=9),
               DdpRank(rank=1, node="a", gpu=1, baseline_throughput=10, ddp_throughput=7)]))
    s = summarize(report)
    assert (s.ddp_throughput_per_gpu, s.ddp_throughput_unit) == (8, "tokens/s")


def test_report_for_generation():
    wire = good_report(generation=2).to_wire()
    report, problem = report_for_generation(wire, 2)
    assert report is not None and problem is None
    stale, problem = report_for_generation(wire, 3)
    assert stale is None and "generation 2, not 3" in problem
    unlabeled = dict(wire)
    unlabeled.pop("generation")
    assert report_for_generation(unlabeled, 1)[0] is None
    assert report_for_generation(None, 1) == (None, None)
    broken, problem = report_for_generation({"results": [{"check": "nope"}]}, 1)
    assert broken is None and problem.startswith("status.report could not be read (results.0.")


def test_measured_nodes():
    report = good_report()
    report.results.append(result("nccl", "node_all_reduce_busbw", 100, 300, passed=False, node="node-b"))
    assert measured_nodes(report) == {"node-a": True, "node-b": False}


def test_a_check_the_spec_enabled_but_the_report_left_out_is_missing():
    """The report's own checks_run is not trusted: the spec's enabled checks are added to it."""
    report = good_report()
    report.results = [r for r in report.results if r.check != "ddp"]
    report.checks_run = [c for c in report.checks_run if c != "ddp"]
    raw = report.to_wire()
    trusting, _ = report_for_generation(raw, report.generation)
    assert trusting is not None and trusting.verdict()  # on its own word the report passes
    judged, problem = report_for_generation(raw, report.generation, ("preflight", "nccl", "ddp"))
    assert problem is None and judged is not None
    assert judged.missing_checks() == ["ddp"] and not judged.verdict()
    assert summarize(judged).result == "Failed"
