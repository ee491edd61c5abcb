"""What a report means has one home (report.py): every consumer says the same verdict, counts, numbers and nodes.

The consumers: the workload's termination message (render.summary), its
verdict table (what rank 0 and `gpu-acceptance local` print), its exit code,
and the operator's status.summary and verdict message.
"""

from __future__ import annotations

import re

import pytest
from acceptance_operator.judging.verdict import report_for_generation, summarize, verdict_message
from acceptance_workload.checks.report_model import Report
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import NcclRow, NcclSweep
from acceptance_workload.report.render import summary, verdict_table
from acceptance_workload.run import EXIT_PASSED, exit_code

from tests.unit.operator_samples import good_report, result


def _missing_ddp() -> Report:
    """The issue's case: nccl and ddp enabled, only nccl's one result came back."""
    return Report(generation=1, checks_run=["nccl", "ddp"], results=[
        result("nccl", "all_reduce_busbw", 370.0, 360, unit="GB/s")]).finalize()


def _failed_node() -> Report:
    report = good_report()
    report.results[1] = result("preflight", "gpu_count", 7, 8, passed=False, node="node-b", comparison="eq")
    return report.finalize()


def _frozen_rank() -> Report:
    """A hang with a culprit: the rank_responding result names node-b; the error says the run did not complete."""
    report = good_report()
    report.results = [r for r in report.results if r.check != "ddp"]
    report.results.append(CheckResult(check="ddp", name="rank_responding", value=0, threshold=1, passed=False,
                                      node="node-b", gpu=1, observed="stopped",
                                      message="rank 9 on node node-b, GPU 1, stopped responding"))
    report.error = "'ddp step 3' did not complete within 10s: rank 9 on node node-b, GPU 1, stopped responding"
    return report.finalize()


def _sweep_only() -> Report:
    """No judged busbw result: the headline falls back to the best row of the job-wide all_reduce sweep."""
    return Report(generation=1, checks_run=["nccl"], results=[
        CheckResult(check="nccl", name="all_reduce_correctness", value=0, threshold=0, comparison="le", passed=True)],
        nccl=[NcclSweep(collective="all_reduce", scope="job", ranks=2, dtype="float32", rows=[
            NcclRow(size=1 << 20, count=1, time_us=1, algbw_gbps=1, busbw_gbps=123.456, wrong=0),
            NcclRow(size=1 << 30, count=1, time_us=1, algbw_gbps=1, busbw_gbps=99.0, wrong=0)])]).finalize()


REPORTS = {"passing": good_report, "missing check": _missing_ddp, "failed node": _failed_node,
           "frozen rank": _frozen_rank, "sweep only": _sweep_only}


@pytest.mark.parametrize("make", REPORTS.values(), ids=REPORTS.keys())
def test_every_consumer_says_the_same(make) -> None:
    report = make()
    s = summarize(report)
    word = "PASSED" if s.result == "Passed" else "FAILED"
    counts = f"{word}: {s.passed}/{s.total} checks passed"
    assert s.passed + s.failed == s.total
    log = summary(report)
    assert log.splitlines()[0] == counts  # the termination message
    assert f"VERDICT: {counts}" in verdict_table(report)  # what rank 0 and `gpu-acceptance local` print
    assert (exit_code(report) == EXIT_PASSED) == (s.result == "Passed") == report.passed
    busbw = re.search(r"all_reduce busbw ([0-9.]+) GB/s", log)
    if s.all_reduce_busbw_gbps is None:
        assert busbw is None
    else:
        assert busbw is not None and float(busbw.group(1)) == pytest.approx(s.all_reduce_busbw_gbps, abs=0.05)
        assert busbw.group(0) in verdict_table(report)
    nodes = re.search(r"^failed nodes: (.*)$", log, re.M)
    assert (nodes.group(1).split(", ") if nodes else []) == s.failed_nodes == report.failed_nodes
    if s.result == "Passed":
        assert verdict_message(report).startswith(f"all {s.total} checks passed")
    else:
        assert f" of {s.total} checks failed" in verdict_message(report) or report.missing_checks()


def test_a_missing_check_is_one_failure_everywhere() -> None:
    report = _missing_ddp()
    s = summarize(report)
    assert (s.result, s.passed, s.failed, s.total) == ("Failed", 1, 1, 2)
    assert summary(report).startswith("FAILED: 1/2 checks passed\n")  # was "FAILED: 1/1 checks passed"
    assert "missing: no result at all from ddp" in summary(report)
    assert "no result for enabled check(s) ddp" in verdict_message(report)


def test_the_operator_re_judges_with_the_same_functions() -> None:
    """A report that left an enabled check out of checks_run: the operator's view (spec's checks added) fails it."""
    report = Report(generation=1, checks_run=["nccl"], results=[
        result("nccl", "all_reduce_busbw", 370.0, 360, unit="GB/s")]).finalize()
    assert summary(report).startswith("PASSED: 1/1")
    judged, _ = report_for_generation(report.to_wire(), 1, ("nccl", "ddp"))
    assert judged is not None
    assert summary(judged.finalize()).startswith("FAILED: 1/2")
    assert (summarize(judged).passed, summarize(judged).total) == (1, 2)


def test_a_frozen_rank_puts_its_node_in_failed_nodes() -> None:
    report = _frozen_rank()
    assert summarize(report).failed_nodes == ["node-b"]
    assert "rank 9 on node node-b, GPU 1, stopped responding" in verdict_message(report)
    assert "error: 'ddp step 3' did not complete" in summary(report)
