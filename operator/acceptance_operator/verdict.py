"""From the workload's report to the verdict and the summary `kubectl get at` shows.

The operator judges with the report's own functions (Report.verdict(),
missing_checks()), never with the report's stored `passed` flag, so a report
that claims to pass but lacks a check or carries a failed result still fails.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acceptance_workload.report import CHECK_NAMES, CheckName, CheckResult, Report
from pydantic import ValidationError

from acceptance_operator.api import Summary

# Names of the headline results, as the workload writes them.
ALL_REDUCE_BUSBW = "all_reduce_busbw"
THROUGHPUT_PER_GPU = "throughput_per_gpu"
SCALING_EFFICIENCY = "scaling_efficiency"
_MAX_LISTED = 5


def report_for_generation(raw: Any, generation: int | None,
                          enabled: Iterable[CheckName] = ()) -> tuple[Report | None, str | None]:
    """The report if it belongs to this generation; otherwise None and why it was not used.

    A report from an earlier generation (a previous run of a changed spec) or
    one without a generation is stale: it says nothing about this run. The
    checks the spec enabled are added to the report's own checks_run, so a
    report that leaves an enabled check out fails it as missing (fail closed).
    """
    if not raw:
        return None, None
    try:
        report = Report.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, f"status.report could not be read ({where}: {first['msg']})"
    if report.generation != generation:
        return None, (
            f"status.report is for generation {report.generation}, not {generation}: "
            "it was written by an earlier run and is ignored"
        )
    report.checks_run = [c for c in CHECK_NAMES if c in {*report.checks_run, *enabled}]
    return report, None


def _job_wide(report: Report, check: str, name: str) -> CheckResult | None:
    return next(
        (r for r in report.results if r.check == check and r.name == name and r.node is None and r.value is not None),
        None,
    )


def headline_busbw(report: Report) -> float | None:
    """Job-wide all_reduce busbw: the judged result, else the best row of the job-wide sweep."""
    result = _job_wide(report, "nccl", ALL_REDUCE_BUSBW)
    if result is not None:
        return result.value
    rows = [row for s in report.nccl if s.collective == "all_reduce" and s.scope == "job" for row in s.rows]
    return max((row.busbw_gbps for row in rows), default=None)


def headline_ddp(report: Report) -> tuple[float | None, str | None, float | None]:
    """DDP throughput per GPU, its unit, and scaling efficiency."""
    throughput = _job_wide(report, "ddp", THROUGHPUT_PER_GPU)
    efficiency = _job_wide(report, "ddp", SCALING_EFFICIENCY)
    value = throughput.value if throughput else None
    unit = (throughput.unit or None) if throughput else None
    if value is None and report.ddp and report.ddp.ranks:
        value = sum(r.ddp_throughput for r in report.ddp.ranks) / len(report.ddp.ranks)
    if unit is None and report.ddp:
        unit = report.ddp.unit
    return value, (unit if value is not None else None), (efficiency.value if efficiency else None)


def summarize(report: Report) -> Summary:
    """Counts, headline numbers and the nodes to blame; a missing check counts as failed."""
    missing = report.missing_checks()
    failed = sum(1 for r in report.results if not r.passed) + len(missing)
    throughput, unit, efficiency = headline_ddp(report)
    return Summary(
        result="Passed" if report.verdict() else "Failed",
        passed=sum(1 for r in report.results if r.passed),
        failed=failed,
        total=len(report.results) + len(missing),
        all_reduce_busbw_gbps=_round(headline_busbw(report)),
        ddp_throughput_per_gpu=_round(throughput),
        ddp_throughput_unit=unit,
        scaling_efficiency=_round(efficiency, 4),
        failed_nodes=report.blamed_nodes(),
    )


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _describe(result: CheckResult) -> str:
    where = f" on {result.node}" if result.node else ""
    where += f" GPU {result.gpu}" if result.gpu is not None else ""
    if result.value is None:
        measured = "not measured"
    elif result.threshold is not None and result.comparison != "info":
        op = {"ge": "<", "le": ">", "eq": "!="}[result.comparison]
        measured = f"{result.value:g} {op} {result.threshold:g}{' ' + result.unit if result.unit else ''}"
    else:
        measured = f"{result.value:g}{' ' + result.unit if result.unit else ''}"
    text = f"{result.check}/{result.name}{where}: {measured}"
    return f"{text} ({result.message})" if result.message else text


def verdict_message(report: Report) -> str:
    """One paragraph: what passed, or the first failures with their numbers and nodes."""
    summary = summarize(report)
    if report.verdict():
        text = f"all {summary.total} checks passed"
        if summary.all_reduce_busbw_gbps is not None:
            text += f"; all_reduce busbw {summary.all_reduce_busbw_gbps:g} GB/s"
        if summary.ddp_throughput_per_gpu is not None:
            text += f"; DDP {summary.ddp_throughput_per_gpu:g} {summary.ddp_throughput_unit or ''} per GPU".rstrip()
        return text
    parts: list[str] = []
    if report.error:
        parts.append(f"the workload could not complete: {report.error}")
    if not report.checks_run:
        parts.append("the report lists no checks that ran")
    missing = report.missing_checks()
    if missing:
        parts.append(f"no result for enabled check(s) {', '.join(missing)}")
    failures = [r for r in report.results if not r.passed]
    if failures:
        listed = "; ".join(_describe(r) for r in failures[:_MAX_LISTED])
        more = f" (and {len(failures) - _MAX_LISTED} more)" if len(failures) > _MAX_LISTED else ""
        parts.append(f"{len(failures)} of {summary.total} checks failed: {listed}{more}")
    if summary.failed_nodes:
        parts.append(f"nodes to blame: {', '.join(summary.failed_nodes)}")
    return "; ".join(parts)


def measured_nodes(report: Report) -> dict[str, bool]:
    """Every node the report measured, and whether it passed (a node with any failed result did not)."""
    nodes = {r.node for r in report.results if r.node}
    blamed = set(report.blamed_nodes())
    return {node: node not in blamed for node in sorted(nodes)}
