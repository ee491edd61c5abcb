"""Report: the report model of the registry's checks, what a run writes and every reader parses.

report/model.ReportBase holds what every report holds; each check declares its detail fields in its package
(checks.contract.Check.details: report.gpu, report.nccl, ...), and this module walks the registry for them, in run
order, as configuration/checks.py does for the spec: a new check's details are new fields here with no line here.
`Report.DETAILS` lists them for the evidence (report/evidence.py), which splits and joins each as its Detail says;
`parts` and `assemble` read the evidence as this Report (the evidence, below the checks, is handed the model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from pydantic import create_model

from acceptance_workload.checks.registry import CHECKS
from acceptance_workload.report import evidence
from acceptance_workload.report.model import ReportBase

if TYPE_CHECKING:
    from acceptance_workload.checks.contract import Check


def report_model(checks: Iterable[Check]) -> type[ReportBase]:
    """ReportBase with these checks' detail fields, in their order (a name two checks declare is refused)."""
    details = [d for c in checks for d in c.details]
    names = [d.name for d in details]
    clash = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(ReportBase.model_fields)))
    if clash:
        raise ValueError(f"report fields declared twice: {', '.join(clash)}")
    model = create_model("Report", __base__=ReportBase, __module__=__name__,
                         **{d.name: d.field() for d in details})  # type: ignore[call-overload]
    model.DETAILS = tuple(details)
    return model


Report = report_model(CHECKS)


def parts(status: evidence.StatusReport, read: Callable[[str], str | None]) -> Iterator[ReportBase]:
    """The evidence's shards as partial Reports of the registry's checks, one at a time (evidence.parts)."""
    return evidence.parts(status, read, Report)


def assemble(status: evidence.StatusReport, shards: dict[str, str | None]) -> ReportBase:
    """The full Report of the registry's checks from its status part and evidence shards (evidence.assemble)."""
    return evidence.assemble(status, shards, Report)
