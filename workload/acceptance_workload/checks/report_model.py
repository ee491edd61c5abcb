"""Report: the report model of the registry's checks, what a run writes and every reader parses.

report/model.ReportBase holds what every report holds; each check declares its detail fields in its package
(checks.contract.Check.details: report.gpu, report.nccl, ...), and this module walks the registry for them, in run
order, as configuration/checks.py does for the spec: a new check's details are new fields here with no line here.
`Report.DETAILS` lists them for the evidence (report/evidence.py), which splits and joins each as its Detail says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import create_model

from acceptance_workload.checks.registry import CHECKS
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
