"""checks.signals' required results: every node's `watched` (its ranks watched from the preflight to the end). The
signals themselves are per GPU and port where the machine offers them, else skips with their reason, so none of
them is required by name; a node whose watch is missing fails."""

from __future__ import annotations

from acceptance_workload.checks.signals.rules import WATCHED
from acceptance_workload.contract.required import Due, Required


def required(due: Due) -> list[Required]:
    return [Required("signals", WATCHED, n, "every node's watch of its GPUs and ports") for n in sorted(due.nodes)]
