"""The registry: every check, in the order a run takes them. Adding a check is its package and one line here.

The run (run.Runner.checks) walks it; each entry is the package's CHECK (checks.contract.Check: the check's hooks).
Its names are the only list of them: the contract's check name (contract/results.CheckName, which validates against
them and is an enum of them in the CRD), the report's order and spec.checks' order are these. A host that calls a
check's stage, watch or `required` walks `enabled(spec.checks)`: a disabled check's hooks are never called, so none
of them asks whether its check is on.
"""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks import ddp, fsdp, gpu, nccl, p2p, preflight, signals, soak, storage
from acceptance_workload.checks.contract import Check
from acceptance_workload.contract.results import declare_checks

CHECKS: tuple[Check, ...] = (
    preflight.CHECK,
    gpu.CHECK,
    p2p.CHECK,
    nccl.CHECK,
    ddp.CHECK,
    fsdp.CHECK,
    storage.CHECK,
    soak.CHECK,
    signals.CHECK,  # watches from the preflight's start (its watch), judged after the last check
)
CHECK_NAMES: tuple[str, ...] = tuple(c.name for c in CHECKS)
declare_checks(CHECK_NAMES)  # the contract's check name validates against these (contract/results.py)


def after(name: str) -> tuple[Check, ...]:
    """The checks a run takes after `name` (what a failed gate skips)."""
    names = [c.name for c in CHECKS]
    return CHECKS[names.index(name) + 1:]


def enabled(checks: Any) -> tuple[Check, ...]:
    """The checks the spec's checks (spec.checks: a ChecksSpec) turn on, in run order: what a run takes, what a report
    names in checksRun and what the operator requires results of."""
    return tuple(c for c in CHECKS if c.enabled_in(checks))
