"""What a check adds to the reports people read: its text table, its parts of the HTML page, its JUnit output.

A check's package makes one ReportParts and hands it to its CHECK (checks.contract.Check) beside its stage; the
writers (writers/: text, HTML, JUnit) walk the registry and put each check's parts where the layout below says,
in run order. The writers keep what no one check owns: the verdict, the failures, the nodes' heatmap and facts,
the passed results, what was not measured. Every function takes the report and returns "" (or None) when the
check has nothing to show, so a check that did not run adds nothing.

The HTML page, top to bottom: the verdict; every check's `html_plots`; the nodes' heatmap; every check's
`html_sections`; the passed results; the nodes' facts; what was not measured; every check's `html_tables`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acceptance_workload.report.model import ReportBase

# (matplotlib's pyplot, the report, the page's problems) -> HTML; each drawing inside goes through html_base.part.
HtmlPart = Callable[[Any, ReportBase, "list[str] | None"], str]


@dataclass(frozen=True)
class ReportParts:
    """One check's parts of the reports. None: the check has no such part."""

    text: Callable[[ReportBase], str] | None = None  # its table(s) in the text report, before the verdict table
    html_plots: HtmlPart | None = None  # its plots, high on the page (before the nodes' heatmap)
    html_sections: HtmlPart | None = None  # its section after the heatmap
    html_tables: HtmlPart | None = None  # its raw tables, at the page's end
    junit_out: Callable[[ReportBase], str | None] | None = None  # more of its JUnit suite's system-out
    junit_per_gpu: bool = False  # one JUnit testcase per GPU holding all of its judgements, not one per result


NO_PARTS = ReportParts()
