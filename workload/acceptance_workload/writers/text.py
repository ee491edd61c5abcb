"""The text report: every check's tables in run order (their parts, report/parts.py), the nodes' facts, then
the verdict table at the end, where a terminal leaves it in view."""

from __future__ import annotations

from acceptance_workload.checks.registry import CHECKS
from acceptance_workload.checks.report_model import Report
from acceptance_workload.report.render import nodes_table, verdict_table


def full_text(report: Report) -> str:
    """Each check's tables (per GPU, sweeps, localisation, DDP, FSDP, storage: whatever ran), the nodes' facts,
    then the verdict table (at the end)."""
    parts = [t for c in CHECKS if c.parts.text for t in (c.parts.text(report),) if t]
    parts += [t for t in (nodes_table(report),) if t]
    parts.append(verdict_table(report))
    return "\n\n".join(parts) + "\n"
