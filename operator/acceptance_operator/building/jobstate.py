"""Where a child job stands, read from its status: one reader per family of job APIs.

Each backend's controller reports progress in its own words: Kubeflow's
training-operator and mpi-operator set Created/Running/Succeeded/Failed
conditions, Kubernetes' Job controller sets Complete/Failed (and counts active
pods), the JobSet controller sets Completed/Failed, Kubeflow Trainer v2 sets
Complete/Failed on a TrainJob. The readers here turn each
into one JobState, so the assessment judges every backend alike. Pure functions
over the plain dicts the API returns; the backend table (backends.py) says which
reader a kind uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

KubeDict = dict[str, Any]

# Kubeflow job condition types (training-operator v1 and mpi-operator v2beta1 share them), most decisive first.
KUBEFLOW_CONDITION_ORDER = ("Failed", "Succeeded", "Restarting", "Running", "Created")
# batch/v1 Job conditions -> our states. FailureTarget / SuccessCriteriaMet come first (Kubernetes 1.31+) while
# the pods still terminate; the verdict does not need to wait for them.
BATCH_JOB_CONDITIONS = (("Failed", "Failed"), ("FailureTarget", "Failed"), ("Complete", "Succeeded"),
                        ("SuccessCriteriaMet", "Succeeded"))
# jobset.x-k8s.io JobSet conditions -> our states.
JOBSET_CONDITIONS = (("Failed", "Failed"), ("Completed", "Succeeded"))
# trainer.kubeflow.org TrainJob conditions (Kubeflow Trainer v2) -> our states.
TRAINJOB_CONDITIONS = (("Failed", "Failed"), ("Complete", "Succeeded"))


def parse_time(value: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, 'Z' suffix) as an aware datetime."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class JobState:
    """The job's current state, from the most decisive condition whose status is True."""

    state: str | None  # Failed, Succeeded, Restarting, Running, Created; None before the controller saw it
    reason: str = ""
    message: str = ""
    since: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("Failed", "Succeeded")

    @property
    def deadline_exceeded(self) -> bool:
        """The controller ended the job at its activeDeadlineSeconds (= spec.timeoutSeconds)."""
        text = f"{self.reason} {self.message}".lower()
        return self.state == "Failed" and ("deadline" in text)


def _true_conditions(job: KubeDict | None) -> dict[str, KubeDict]:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return {c.get("type"): c for c in conditions if c.get("status") == "True"}


def _from_condition(state: str, c: KubeDict) -> JobState:
    return JobState(state, c.get("reason", ""), c.get("message", ""), parse_time(c.get("lastTransitionTime")))


def kubeflow_state(job: KubeDict | None) -> JobState:
    """PyTorchJob / MPIJob: the conditions name our states directly."""
    true = _true_conditions(job)
    for kind in KUBEFLOW_CONDITION_ORDER:
        if kind in true:
            return _from_condition(kind, true[kind])
    return JobState(None)


def _terminal(true: dict[str, KubeDict], table: tuple[tuple[str, str], ...]) -> JobState | None:
    for condition, state in table:
        if condition in true:
            return _from_condition(state, true[condition])
    return None


def batch_job_state(job: KubeDict | None) -> JobState:
    """batch/v1 Job: Complete/Failed when ended; Running while a pod is active; Created once the controller
    started it (status.startTime); None before the Job controller has seen it (no status at all)."""
    true = _true_conditions(job)
    ended = _terminal(true, BATCH_JOB_CONDITIONS)
    if ended is not None:
        return ended
    status = (job or {}).get("status") or {}
    if status.get("active") or status.get("ready"):
        return JobState("Running", since=parse_time(status.get("startTime")))
    if "Suspended" in true:
        return _from_condition("Created", true["Suspended"])
    if status.get("startTime"):
        return JobState("Created", since=parse_time(status["startTime"]))
    return JobState(None)


def jobset_state(jobset: KubeDict | None) -> JobState:
    """JobSet: Completed/Failed when ended; Running while a child Job has active pods; Created once the JobSet
    controller reported on its replicated jobs; None before it has seen the JobSet."""
    true = _true_conditions(jobset)
    ended = _terminal(true, JOBSET_CONDITIONS)
    if ended is not None:
        return ended
    replicated = ((jobset or {}).get("status") or {}).get("replicatedJobsStatus") or []
    if any(r.get("active") or r.get("ready") for r in replicated):
        return JobState("Running")
    if replicated or true:
        return JobState("Created")
    return JobState(None)


def trainjob_state(trainjob: KubeDict | None) -> JobState:
    """Kubeflow Trainer v2 TrainJob: Complete/Failed when ended (Failed Reason DeadlineExceeded at
    activeDeadlineSeconds); Running while a child Job has active or ready pods; Created once the Trainer reported
    on its JobSet's Jobs or set a condition (Suspended while Kueue holds it); None before the Trainer saw it."""
    true = _true_conditions(trainjob)
    ended = _terminal(true, TRAINJOB_CONDITIONS)
    if ended is not None:
        return ended
    jobs = ((trainjob or {}).get("status") or {}).get("jobsStatus") or []
    if any(j.get("active") or j.get("ready") for j in jobs):
        return JobState("Running")
    if "Suspended" in true:
        return _from_condition("Created", true["Suspended"])
    if jobs or ((trainjob or {}).get("status") or {}).get("conditions"):
        return JobState("Created")
    return JobState(None)
