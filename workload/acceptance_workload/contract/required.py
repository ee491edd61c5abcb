"""What a report must hold: the judged results each enabled check must produce, which the operator's re-judging
fails where a report leaves them out (a report that drops a judged result fails as if the result had failed).

Each check says what it requires (its CHECK's `required`, checks/<name>/required.py); the operator walks the
registry (judging/rejudge.required_results) and names no check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acceptance_workload.contract.config import RunConfig


@dataclass(frozen=True)
class Required:
    """A result the spec requires: missing from the report, it counts as failed."""

    check: str
    name: str
    node: str | None = None
    why: str = ""
    gpu: int | None = None


@dataclass(frozen=True)
class Due:
    """What decides which results are required: the operator's config, the run's nodes, and the (re-judged,
    job-wide) report when one is read (a checks.report_model.Report; None: none is, and nothing that only a report's own
    results make due, such as nccl's localisation, is asked for)."""

    config: RunConfig
    nodes: list[str]
    report: Any = None

    @property
    def cpu(self) -> bool:
        """A CPU smoke run: no GPU count, no host copies, no MIG mode (the workload skips them, saying so)."""
        return self.config.mode == "cpu-smoke"
