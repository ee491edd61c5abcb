"""Which run a test is on, when the next one is due, and what status.history keeps of each.

Pure functions of the operator's record (the current run), the test's
generation, its rerun annotation, its schedule and the clock. A run is due
when the spec changed (a new generation: the old run is stopped, as before),
or, once the current run has finished, when the rerun annotation has a new
value or a schedule slot has come since the current run started. A rerun or a
slot that comes while a run is going waits for it: runs of one test never
overlap, and a new spec is the only thing that cuts a run short.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from acceptance_operator.resource.api import (
    MAX_HISTORY_FAILED_NODES,
    AcceptanceTest,
    AcceptanceTestStatus,
    HistoryEntry,
    RunRef,
    Summary,
    parse_test,
)
from acceptance_operator.resource.schedule import last_slot, next_slot

KubeDict = dict[str, Any]


# The longest rerun annotation value recorded as it is (the chart's ValidatingAdmissionPolicy refuses longer new
# values); a longer one is recorded by its digest: the record and history hold it once per run, and annotations
# have 256 KiB in all.
MAX_RERUN_CHARS = 253


def rerun_value(annotation: str | None) -> str | None:
    """The rerun annotation's value as runs record and compare it: a value too long to record, by its digest."""
    if annotation is None or len(annotation) <= MAX_RERUN_CHARS:
        return annotation
    return "sha256:" + hashlib.sha256(annotation.encode()).hexdigest()


def run_id(generation: int, attempt: int) -> str:
    """g<generation> for a spec's first run (the name runs had before reruns), g<generation>-r<N> after."""
    return f"g{generation}" if attempt <= 1 else f"g{generation}-r{attempt}"


def first_run(generation: int, rerun: str | None) -> RunRef:
    """The run a new spec starts with; a rerun value present at that time is its own (it asks for nothing more)."""
    return RunRef(id=run_id(generation, 1), generation=generation, attempt=1, trigger="spec", rerun=rerun)


def current_run(recorded: Any, generation: int) -> RunRef | None:
    """The run in the operator's record (status.run as it last wrote it); None without one.

    A record from before runs had ids is the first run of its generation.
    """
    if not isinstance(recorded, dict):
        return None
    if isinstance(recorded.get("run"), dict):
        try:
            return RunRef.model_validate(recorded["run"])
        except ValidationError:
            return None
    observed = recorded.get("observedGeneration")
    return RunRef(id=run_id(observed, 1), generation=observed) if isinstance(observed, int) else None


def due(current: RunRef | None, finished: bool, generation: int, rerun: str | None, schedule: str | None,
        started: datetime | None, now: datetime) -> RunRef | None:
    """The run to start now, or None (keep following the current one, or wait).

    `started` is when the current run started: a schedule slot after it asks for a run.
    """
    if current is None or current.generation != generation:
        return first_run(generation, rerun)
    if not finished:
        return None
    following = {"id": run_id(generation, current.attempt + 1), "generation": generation,
                 "attempt": current.attempt + 1, "rerun": rerun}
    if rerun != current.rerun:
        return RunRef(**following, trigger="rerun")
    slot = last_slot(schedule, now) if schedule else None
    if slot is not None and (started is None or slot > started):
        return RunRef(**following, trigger="schedule", scheduled_for=slot)
    return None


def after_preemption(current: RunRef) -> RunRef:
    """The attempt that replaces one whose job Kueue's preemption ended (assessment.assess): the same spec and
    rerun value, the next attempt number, so its job, evidence and Kueue Workload are new."""
    return RunRef(id=run_id(current.generation, current.attempt + 1), generation=current.generation,
                  attempt=current.attempt + 1, trigger="preempted", rerun=current.rerun)


def seconds_to_next_slot(schedule: str | None, now: datetime) -> float | None:
    """When the clock alone starts the next run; None without a schedule."""
    return (next_slot(schedule, now) - now).total_seconds() if schedule else None


def history_entry(run: RunRef, start: datetime | None, end: datetime, summary: Summary,
                  reason: str | None) -> HistoryEntry:
    failed = summary.failed_nodes
    return HistoryEntry(
        id=run.id, trigger=run.trigger, start_time=start, completion_time=end, result=summary.result or "Failed",
        reason=reason, all_reduce_busbw_gbps=summary.all_reduce_busbw_gbps,
        ddp_throughput_per_gpu=summary.ddp_throughput_per_gpu, failed_nodes=failed[:MAX_HISTORY_FAILED_NODES],
        failed_node_count=len(failed),
    )


def with_entry(history: list[KubeDict], entry: HistoryEntry, limit: int) -> list[KubeDict]:
    """The history (wire dicts, oldest first) with `entry` in place of an entry of the same run, last `limit` kept."""
    kept = [h for h in history if isinstance(h, dict) and h.get("id") != entry.id]
    return [*kept, entry.to_wire()][-limit:] if limit else []


def baseline(history: list[KubeDict]) -> HistoryEntry | None:
    """The last passed run (spec.baseline: lastPassed)."""
    for raw in reversed(history):
        try:
            entry = HistoryEntry.model_validate(raw)
        except ValidationError:
            continue
        if entry.result == "Passed":
            return entry
    return None


def run_of(test: AcceptanceTest) -> RunRef:
    """The run a test's children are built for: the one the handler put in (with_run), else its generation's first."""
    if test.status is not None and test.status.run is not None:
        return test.status.run
    return first_run(test.metadata.generation or 1, None)


def with_run(test: AcceptanceTest, run: RunRef) -> AcceptanceTest:
    """The test as the builders should see it for `run` (names, labels and the workload's config follow it)."""
    return test.model_copy(update={"status": AcceptanceTestStatus(run=run)})


def report_run(report_run_id: str | None, generation: int | None) -> str | None:
    """The run a report is for; a report without a run id is for its generation's first run."""
    return report_run_id or (run_id(generation, 1) if generation is not None else None)


def on_current_run(obj: KubeDict) -> AcceptanceTest:
    """A stored test (parse_test) on the run its status names: what `gpu-acceptance report` reads and delivers for."""
    test = parse_test(obj)
    current = current_run(obj.get("status"), test.metadata.generation or 1)
    return with_run(test, current) if current is not None and current.generation == test.metadata.generation \
        else test
