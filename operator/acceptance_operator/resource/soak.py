"""checks.soak on the operator's side: whether a burn-in fits spec.timeoutSeconds, and its progress in status.

The workload's rank 0 writes the soak's progress (evidence.PROGRESS_KEY) into the run's job-wide evidence
ConfigMap at most every 30 s while the load runs; the operator copies it into status.soak, which `kubectl get at`
shows (column Soak; -o wide: Worst) and the Running condition's message repeats. The progress is only ever shown,
never judged: the verdict comes from the report (evidence.STATUS_KEY), whose presence alone says the run's evidence
is complete. status.soak is kept after the verdict (how far the load got, e.g. when a run timed out) and cleared
when the next run starts. Pure: no Kubernetes calls, no import of api (api imports this).
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import Field, ValidationError

from acceptance_operator.workload import PROGRESS_KEY, SoakCheck, Timestamp, WireModel

# What a run needs besides the soak itself within spec.timeoutSeconds: scheduling and a cold pull of the workload
# image (minutes on a new node), the other checks before the soak (a full run measured 31-67 s on 2x H200, more with
# large storage sizes), and writing the evidence of hours of samples. 10 minutes; docs/burn-in.md says the same.
SOAK_START_MARGIN_SECONDS = 600
MAX_WORST = 300  # characters of status.soak.worst: one line


def fit_problem(soak: SoakCheck, timeout_seconds: int) -> str | None:
    """Why an enabled soak does not fit the run's timeout ("checks.soak.durationSeconds: ..."), or None."""
    if not soak.enabled or soak.duration_seconds + SOAK_START_MARGIN_SECONDS <= timeout_seconds:
        return None
    return (f"checks.soak.durationSeconds: {soak.duration_seconds} s of soak and {SOAK_START_MARGIN_SECONDS} s for "
            f"the start and the other checks do not fit spec.timeoutSeconds {timeout_seconds}: set "
            f"spec.timeoutSeconds to at least {soak.duration_seconds + SOAK_START_MARGIN_SECONDS} or shorten the soak")


def must_fit(soak: SoakCheck, timeout_seconds: int) -> None:
    """The spec validator's form of fit_problem (a ValueError the admission message and InvalidSpec show)."""
    problem = fit_problem(soak, timeout_seconds)
    if problem:
        raise ValueError(problem)


# The same rule at admission (CEL; the schema's defaults are applied before it runs, the has() guards are for safety).
# A static message: a messageExpression with the numbers in it exceeds the API server's CEL cost budget.
_D = "(has(self.checks.soak.durationSeconds) ? self.checks.soak.durationSeconds : 3600)"
_T = "(has(self.timeoutSeconds) ? self.timeoutSeconds : 3600)"
FIT_RULE: dict[str, str] = {
    "rule": "!has(self.checks) || !has(self.checks.soak) || !has(self.checks.soak.enabled) || "
            f"!self.checks.soak.enabled || {_D} + {SOAK_START_MARGIN_SECONDS} <= {_T}",
    "message": f"the soak and {SOAK_START_MARGIN_SECONDS} s for the start and the other checks do not fit "
               "spec.timeoutSeconds: set spec.timeoutSeconds to at least durationSeconds + "
               f"{SOAK_START_MARGIN_SECONDS} or shorten the soak",
    "fieldPath": ".checks.soak.durationSeconds",
}


class SoakStatus(WireModel):
    """status.soak: the burn-in's progress as rank 0 last wrote it (shown, never judged)."""

    elapsed_seconds: int = Field(0, ge=0)
    total_seconds: int = Field(0, ge=0)
    worst: str = Field("", max_length=MAX_WORST, description="The worst GPU so far, one line, as the workload sees it.")
    worst_ratio: float | None = Field(None, ge=0, description="The worst GPU's latest minute of TFLOP/s against its "
                                      "own first minutes (how a sweep's parent picks the worst of its nodes).")
    updated: Timestamp | None = Field(None, description="When rank 0 wrote this progress.")
    progress: str = Field("", description="One line for kubectl get: elapsed/total.")


def _span(elapsed: int, total: int, least: int | None = None) -> str:
    """'12/60 min' (seconds under 10 minutes: '20/30 s'); with `least`, the range from it: '12-20/60 min'."""
    def shown(seconds: int) -> int:
        return seconds if total < 600 else seconds // 60
    since = "" if least is None or shown(least) == shown(elapsed) else f"{shown(least)}-"
    return f"{since}{shown(elapsed)}/{shown(total)} {'s' if total < 600 else 'min'}"


def progress_of(data: dict[str, Any] | None, duration_seconds: int) -> SoakStatus | None:
    """status.soak from a job-wide evidence ConfigMap's data; None without a readable progress key.

    Bounded by what the spec asked (`duration_seconds`): a total or elapsed time beyond it is clipped, and an
    unreadable key shows nothing rather than something wrong.
    """
    text = (data or {}).get(PROGRESS_KEY)
    if not text:
        return None
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("check") != "soak":
            return None
        total = min(int(raw["totalSeconds"]), duration_seconds)
        elapsed = max(0, min(int(raw["elapsedSeconds"]), total))
        worst = " ".join(str(raw.get("worst") or "").split())[:MAX_WORST]
        ratio = raw.get("worstRatio")
        ratio = float(ratio) if isinstance(ratio, int | float) and math.isfinite(ratio) and ratio >= 0 else None
        return SoakStatus(elapsed_seconds=elapsed, total_seconds=total, worst=worst, updated=raw.get("updated"),
                          progress=_span(elapsed, total), worst_ratio=ratio)
    except (ValueError, TypeError, KeyError, ValidationError):
        return None


def running_line(status: SoakStatus) -> str:
    """What the Running condition's message adds: 'soak 12/60 min, worst: <line>'."""
    return f"soak {status.progress}" + (f", worst: {status.worst}" if status.worst else "")


def of_sweep(children: list[tuple[SoakStatus, bool]]) -> SoakStatus | None:
    """A sweep's status.soak from its single-node children's (each with whether it still runs): the span of those
    still soaking ("2 nodes soaking, 12-20/240 min"; "3 nodes soaked" once none is), and the worst GPU of all of
    them, the lowest worstRatio (a child without one counts only while no child has one). None before any child
    wrote its progress."""
    if not children:
        return None
    running = [s for s, live in children if live]
    total = max(s.total_seconds for s, _ in children)
    if running:
        low, high = min(s.elapsed_seconds for s in running), max(s.elapsed_seconds for s in running)
        progress = f"{len(running)} node{'s' if len(running) > 1 else ''} soaking, {_span(high, total, low)}"
    else:
        low = min(s.elapsed_seconds for s, _ in children)
        progress = f"{len(children)} node{'s' if len(children) > 1 else ''} soaked"
    rated = [s for s, _ in children if s.worst and s.worst_ratio is not None]
    worst = (min(rated, key=lambda s: s.worst_ratio or 0.0) if rated
             else next((s for s, _ in children if s.worst), None))
    return SoakStatus(elapsed_seconds=low, total_seconds=total, worst=worst.worst if worst else "",
                      worst_ratio=worst.worst_ratio if worst else None,
                      updated=max((s.updated for s, _ in children if s.updated), default=None), progress=progress)
