"""checks.soak's part of the reports: per GPU, its plots over the burn-in (html_soak.py); in JUnit, one testcase
per GPU holding all of its minute-by-minute judgements."""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks.soak.html_soak import soak_section
from acceptance_workload.report.html_base import part
from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.parts import ReportParts


def section(_plt: Any, report: ReportBase, problems: list[str] | None) -> str:
    return part(problems, "the soak section", lambda: soak_section(report))


PARTS = ReportParts(html_sections=section, junit_per_gpu=True)
