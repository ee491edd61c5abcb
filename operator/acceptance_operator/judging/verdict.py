"""From the workload's report to the verdict and the summary `kubectl get at` shows.

The operator judges with the report's own functions (Report.verdict(),
tally(), headline(), blamed_nodes()), never with the report's stored `passed`
flag, so a report that claims to pass but lacks a check or carries a failed
result still fails, and status.summary says what the workload's own summary says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from acceptance_operator.resource.api import HistoryEntry, Summary
from acceptance_operator.resource.runs import report_run
from acceptance_operator.workload import CHECK_NAMES, CheckName, CheckResult, Report

_MAX_LISTED = 5


def report_for_generation(raw: Any, generation: int | None, enabled: Iterable[CheckName] = (),
                          run: str | None = None) -> tuple[Report | None, str | None]:
    """The report if it belongs to this generation and run; otherwise None and why it was not used.

    A report from an earlier generation (a previous run of a changed spec), of
    an earlier run of this spec (a rerun, a scheduled run) or one without a
    generation is stale: it says nothing about this run. The
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
    if run is not None and report_run(report.run, report.generation) != run:
        return None, (f"status.report is for run {report_run(report.run, report.generation)}, not {run}: "
                      "it was written by an earlier run and is ignored")
    report.checks_run = [c for c in CHECK_NAMES if c in {*report.checks_run, *enabled}]
    return report, None


def summarize(report: Report) -> Summary:
    """The report's own tally, headline and blamed nodes (report.py is their one home), rounded for kubectl."""
    tally = report.tally()
    head = report.headline()
    return Summary(
        result="Passed" if report.verdict() else "Failed",
        passed=tally.passed,
        failed=tally.failed,
        total=tally.total,
        all_reduce_busbw_gbps=_round(head.all_reduce_busbw_gbps),
        ddp_throughput_per_gpu=_round(head.ddp_throughput_per_gpu),
        ddp_throughput_unit=head.ddp_throughput_unit,
        scaling_efficiency=_round(head.scaling_efficiency, 4),
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


# The headline numbers a baseline compares (higher is better for each): summary field, words, unit (None: the
# summary's DDP unit).
BASELINE_METRICS: tuple[tuple[str, str, str | None], ...] = (
    ("all_reduce_busbw_gbps", "all_reduce busbw", "GB/s"),
    ("ddp_throughput_per_gpu", "DDP throughput per GPU", None),
)


def regressions(summary: Summary, base: HistoryEntry | None, tolerance_percent: float) -> list[str]:
    """Each headline number more than `tolerance_percent` under the baseline run's, naming both values.

    A number this run did not measure is not compared: its check, when enabled, already fails closed.
    """
    if base is None:
        return []
    out = []
    for field, words, unit in BASELINE_METRICS:
        now, then = getattr(summary, field), getattr(base, field)
        if now is None or then is None or then <= 0:
            continue
        drop = (then - now) / then * 100
        if drop > tolerance_percent:
            unit = unit or summary.ddp_throughput_unit or ""
            out.append(f"{words} {now:g} {unit} is {drop:.1f}% under baseline run {base.id}'s {then:g} {unit} "
                       f"(spec.regressionTolerance {tolerance_percent:g}%)".replace("  ", " "))
    return out
