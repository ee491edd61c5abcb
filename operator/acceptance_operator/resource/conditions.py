"""Status conditions of an AcceptanceTest, with Kubernetes semantics.

Three condition types tell a run's story: `JobCreated` (the child job exists),
`Running` (its pods are running) and `Succeeded` (the summary: True passed,
False failed, Unknown in progress). Each carries the generation it describes,
and its lastTransitionTime moves only when its status flips, as
metav1.Condition prescribes, so `kubectl describe` shows when things changed,
not when the operator last looked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from acceptance_operator.resource.api import Condition, Phase
from acceptance_operator.workload import CPU_SMOKE

JOB_CREATED = "JobCreated"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
CONDITION_TYPES: tuple[str, ...] = (JOB_CREATED, RUNNING, SUCCEEDED)

ConditionStatus = Literal["True", "False", "Unknown"]

# Reasons of the Succeeded condition when a run ends (docs/troubleshooting.md explains each).
PASSED = "ChecksPassed"
# A cpu-smoke run passed: the operator, backend, pods, image and report delivery work; the hardware was not tested.
SMOKE_PASSED = "SmokePassed"
CHECKS_FAILED = "ChecksFailed"
REPORT_MISSING = "ReportMissing"
# The run's pods ended, and rank 0's termination message says its report could not be delivered (why, and what its
# checks said: unverified, never a verdict).
REPORT_NOT_DELIVERED = "ReportNotDelivered"
REPORT_REJECTED = "ReportRejected"  # a report that does not describe this run (CPU smoke, other nodes, ...)
JOB_FAILED = "JobFailed"
UNSCHEDULABLE = "Unschedulable"
TIMEOUT = "Timeout"
NODE_NOT_READY = "NodeNotReady"  # a node running the run's pods stopped being Ready mid-run
BACKEND_NOT_INSTALLED = "BackendNotInstalled"
# The backend's CRD is there but its controller does not act: the job got no status and no pods, or the controller's
# admission webhook (failurePolicy Fail) did not answer, so the job could not even be created.
BACKEND_NOT_RUNNING = "BackendNotRunning"
INVALID_SPEC = "InvalidSpec"
REGRESSED = "Regressed"  # passed its thresholds, but fell under the baseline run (spec.baseline)
NO_NODES = "NoNodes"  # a sweep found no schedulable node matching placement.nodeSelector
PODS_REFUSED = "PodsRefused"  # the backend's controller could not create the run's pods (its FailedCreate events)
QUEUED = "Queued"  # in progress (Pending): Kueue has not admitted the run's job (spec.queueName)
# A container's image cannot be pulled (ErrImagePull, ImagePullBackOff): at once when the registry refused the login
# (a pull Secret's wrong password), else after the unschedulable grace.
IMAGE_PULL_FAILED = "ImagePullFailed"
# The installed CRD lacks fields this operator knows (crdcheck.py): the spec may have lost some; no run is started.
CRD_OUTDATED = "CRDOutdated"
# No spec.profile, and the nodes the test selects carry a GPU product no profile describes, or products of
# different profiles (building/defaults.py): no run is started.
PROFILE_UNKNOWN = "ProfileUnknown"
FAILURE_REASONS: tuple[str, ...] = (
    CHECKS_FAILED, REGRESSED, REPORT_MISSING, REPORT_NOT_DELIVERED, REPORT_REJECTED, JOB_FAILED, UNSCHEDULABLE,
    TIMEOUT, NODE_NOT_READY, BACKEND_NOT_INSTALLED, BACKEND_NOT_RUNNING, INVALID_SPEC, NO_NODES, PODS_REFUSED,
    IMAGE_PULL_FAILED, CRD_OUTDATED, PROFILE_UNKNOWN,
)
# Failures that happen before any job exists: JobCreated is False with the same reason.
BEFORE_JOB = (BACKEND_NOT_INSTALLED, INVALID_SPEC, CRD_OUTDATED, PROFILE_UNKNOWN)
TERMINAL_PHASES: tuple[Phase, ...] = ("Succeeded", "Failed")


MAX_CONDITION_MESSAGE = 8192  # characters; Kubernetes allows 32 KiB, and a status read by people needs less


def is_finished(obj: dict) -> bool:
    """The operator has concluded the test's current generation: nothing left to do until the spec changes, a
    rerun is asked for or a schedule slot comes. The status is the operator's alone (no other identity the
    operator creates may write it), so its phase is the operator's record."""
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    return status.get("observedGeneration") == generation and status.get("phase") in TERMINAL_PHASES


def clip_message(text: str, limit: int = MAX_CONDITION_MESSAGE) -> str:
    """A condition message within the limit; what is cut says how much."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text) - limit} more characters; `gpu-acceptance report` has the whole report)"
    return text[:limit - len(tail)] + tail


def is_smoke(profile: str) -> bool:
    """Whether a test of this profile is a smoke run (spec.profile: cpu-smoke): its verdict is never a hardware
    verdict, so it never acts on nodes (labels, taints, uncordons) and never counts as a node's pass or failure."""
    return profile == CPU_SMOKE


@dataclass(frozen=True)
class RunState:
    """Where a run stands: the phase and why, in words a user can act on."""

    phase: Phase
    reason: str
    message: str = ""
    no_job: bool = False  # no job could be created for the run (besides the BEFORE_JOB reasons, which imply it)

    @property
    def before_job(self) -> bool:
        """The run has no job: it ended, or waits, before one could be created (JobCreated is False)."""
        return self.no_job or (self.phase == "Failed" and self.reason in BEFORE_JOB)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


def find(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """A new list with `type_` set; its lastTransitionTime is kept unless the status flips."""
    old = find(conditions, type_)
    moved = old is None or old.status != status
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
        last_transition_time=now.replace(microsecond=0) if moved else old.last_transition_time,
    )
    out = [c for c in conditions if c.type != type_]
    out.append(new)
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(out, key=lambda c: order.get(c.type, len(order)))


def conditions_for(
    state: RunState, job_description: str, existing: list[Condition], generation: int | None, now: datetime
) -> list[Condition]:
    """All three conditions, consistent with one another and with the phase.

    `job_description` names the child job (e.g. "PyTorchJob quick-g1") for the
    JobCreated message.
    """
    out = list(existing)
    if state.before_job:
        out = set_condition(out, JOB_CREATED, "False", state.reason, state.message, generation, now)
    else:
        out = set_condition(out, JOB_CREATED, "True", "Created", f"{job_description} created", generation, now)

    if state.phase == "Running":
        out = set_condition(out, RUNNING, "True", state.reason, state.message, generation, now)
    elif state.phase == "Pending":
        out = set_condition(out, RUNNING, "Unknown", state.reason, state.message, generation, now)
    else:
        out = set_condition(out, RUNNING, "False", "Finished", "the run has ended", generation, now)

    if state.phase == "Succeeded":
        out = set_condition(out, SUCCEEDED, "True", state.reason, state.message, generation, now)
    elif state.phase == "Failed":
        out = set_condition(out, SUCCEEDED, "False", state.reason, state.message, generation, now)
    else:
        # Queued shows in the Reason column (the Succeeded condition's): the run waits for Kueue, not for itself.
        reason = QUEUED if state.reason == QUEUED else "InProgress"
        out = set_condition(out, SUCCEEDED, "Unknown", reason, state.message, generation, now)
    return out
