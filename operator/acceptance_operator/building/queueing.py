"""Kueue (spec.queueName): the one home of Kueue's names, and where a queued run stands, as pure functions.

A test that names a LocalQueue gets a job that carries Kueue's queue-name label and is created suspended (each
backend's suspend field, backends.py's table). Kueue makes a Workload for the job (owned by it, labelled with the
job's uid), reserves quota for it in its ClusterQueue and, once admitted, unsuspends the job. Until then the run
waits in a queue, possibly for hours: it is Pending with Reason Queued and Kueue's own words, and none of the run's
deadlines counts (assessment.py counts them from the admission). Kueue may also take an admission back (preemption):
the job is suspended again and the run is Queued again.

Deleting the job (a test deleted or run again) deletes its Workload: Kueue's ownerReference lets the garbage
collector do it; the operator only reads Workloads (RBAC: list).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from acceptance_operator.building.jobstate import parse_time

KubeDict = dict[str, Any]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue's constants.QueueLabel
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on each Workload: the uid of the job it admits
WORKLOAD_GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSION = "v1beta1"
WORKLOAD_PLURAL = "workloads"


@dataclass(frozen=True)
class Admission:
    """Whether Kueue lets the run's job run, since when, and Kueue's latest word while it does not."""

    admitted: bool
    since: datetime | None = None  # when the Workload was admitted (None: not admitted, or not known)
    message: str = ""


def enqueue(job: KubeDict, queue_name: str | None, suspend_path: tuple[str, ...]) -> KubeDict:
    """The job labelled for `queue_name` and created suspended at `suspend_path` (its backend's suspend field):
    Kueue unsuspends it on admission. Without a queue name the job is returned as it is."""
    if not queue_name:
        return job
    job.setdefault("metadata", {}).setdefault("labels", {})[QUEUE_LABEL] = queue_name
    where = job
    for key in suspend_path[:-1]:
        where = where.setdefault(key, {})
    where[suspend_path[-1]] = True
    return job


def suspended(job: KubeDict | None, suspend_path: tuple[str, ...]) -> bool:
    """The job's suspend field is true (Kueue has not let it run, or took its admission back)."""
    value: Any = job or {}
    for key in suspend_path:
        value = value.get(key) if isinstance(value, dict) else None
    return value is True


def job_workload(workloads: list[KubeDict], job: KubeDict | None) -> KubeDict | None:
    """The Workload Kueue made for this job: labelled with its uid, or owned by it."""
    uid = ((job or {}).get("metadata") or {}).get("uid")
    if not uid:
        return None
    for workload in workloads:
        meta = workload.get("metadata") or {}
        if (meta.get("labels") or {}).get(JOB_UID_LABEL) == uid or \
                any(o.get("uid") == uid for o in meta.get("ownerReferences") or []):
            return workload
    return None


def _conditions(workload: KubeDict) -> dict[str, KubeDict]:
    return {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}


def admission(job: KubeDict | None, workload: KubeDict | None, suspend_path: tuple[str, ...], queue_name: str,
              workloads_readable: bool = True) -> Admission:
    """Where the queued run stands: admitted (since when) once its Workload is Admitted and its job runs.

    A suspended job is never admitted (Kueue unsuspends it last, and suspends it again on preemption). A job that
    runs without a readable Workload (the operator may not list Workloads) is admitted at an unknown time: its
    deadlines count from the run's start, as without Kueue.
    """
    kind, name = (job or {}).get("kind", "job"), ((job or {}).get("metadata") or {}).get("name", "?")
    if workload is None:
        if not suspended(job, suspend_path):
            return Admission(True)
        if not workloads_readable:
            why = "the operator may not list Kueue Workloads (kueue.x-k8s.io workloads: list in its RBAC)"
        else:
            why = f"Kueue has made no Workload for it yet (is Kueue running, and does it manage {kind}s?)"
        return Admission(False, message=f"{kind} {name} waits in LocalQueue {queue_name}: {why}")
    conditions = _conditions(workload)
    admitted = conditions.get("Admitted") or {}
    if admitted.get("status") == "True" and not suspended(job, suspend_path):
        return Admission(True, parse_time(admitted.get("lastTransitionTime")))
    words = _latest_word(conditions, admitted)
    where = f"ClusterQueue {cq}" if (cq := ((workload.get("status") or {}).get("admission") or {})
                                      .get("clusterQueue")) else f"LocalQueue {queue_name}"
    state = "admitted, about to start" if admitted.get("status") == "True" else "not admitted yet"
    return Admission(False, message=f"{kind} {name} waits in {where} (Workload "
                                    f"{(workload.get('metadata') or {}).get('name', '?')}, {state})"
                                    + (f": {words}" if words else ""))


def _latest_word(conditions: dict[str, KubeDict], admitted: KubeDict) -> str:
    """Kueue's message on why the Workload waits: an eviction's, the quota reservation's, or the admission's."""
    for kind in ("Evicted", "QuotaReserved", "Pending"):
        c = conditions.get(kind) or {}
        if c.get("message") and (kind != "Evicted" or c.get("status") == "True") and \
                (kind != "QuotaReserved" or c.get("status") != "True"):
            return str(c["message"]).strip()
    return str(admitted.get("message") or "").strip()
