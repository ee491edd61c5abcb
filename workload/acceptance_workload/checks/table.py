"""The whole rule table: every check's rows (checks/<name>/rules.py), walked from the registry.

What a check judges it judges by its own table (its package's RULES); this module answers for any check by name,
for those that judge results of every check: the operator's re-judging and its admission policy, the result index
of docs/checks.md, the host-load sentences on timing failures. The functions take the check's name first and
otherwise read as the Table's (contract/rules.py).
"""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks.registry import CHECKS
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.rules import CULPRITS, STAGE_ERROR, Rule, Run, Table, UnknownResult
from acceptance_workload.contract.wire import WireModel

TABLES: dict[str, Table] = {c.name: c.rules for c in CHECKS}
THRESHOLD_MODELS: dict[str, type[WireModel]] = {name: t.model for name, t in TABLES.items()}
CULPRIT_CHECKS: tuple[str, ...] = tuple(TABLES)  # every check a rank can be blamed in: all of them
_LIVENESS = (*CULPRITS, STAGE_ERROR)
# Each check's own rows in run order, then the liveness rows every check has (grouped by result, as docs list them).
RULES: dict[tuple[str, str], Rule] = {
    **{(t.check, r.name): r for t in TABLES.values() for r in t.rows.values() if r.name not in _LIVENESS},
    **{(check, name): TABLES[check].rows[name] for name in CULPRITS for check in TABLES},
    **{(check, STAGE_ERROR): TABLES[check].rows[STAGE_ERROR] for check in TABLES},
}


def table(check: str) -> Table:
    """The table of one check; UnknownResult for a check the registry does not list."""
    found = TABLES.get(check)
    if found is None:
        raise UnknownResult(f"no check {check!r} in acceptance_workload.checks.registry")
    return found


def find(check: str, name: str) -> Rule | None:
    """The row of a result; None for a check or name the table does not know (the operator fails it)."""
    found = TABLES.get(check)
    return None if found is None else found.find(name)


def expected(check: str, name: str, thresholds: Any, run: Run | None = None) -> str | None:
    return table(check).expected(name, thresholds, run)


def loosened(check: str, thresholds: Any, profile: Any, run: Run | None = None) -> list[tuple[str, Any, Any]]:
    return table(check).loosened(thresholds, profile, run)


def result(check: str, name: str, value: float | None, thresholds: Any, **fields: Any) -> CheckResult:
    return table(check).result(name, value, thresholds, **fields)
