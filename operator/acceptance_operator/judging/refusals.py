"""Why the API server refused a run's pods, and whether waiting can change it; pure, over the controller's events.

A backend's controller that cannot create a pod says so in a Warning event
(FailedCreate; the training-operator's FailedCreatePod) and retries with the same
pod. Some refusals pass by themselves: a quota other pods still use, a webhook
that did not answer, a ServiceAccount not cached yet. Others are the same
answer on every retry, because they judge the pod the spec builds against rules
of the namespace that waiting does not change: Pod Security admission, a
LimitRange, a quota that demands limits, an invalid pod, a
ValidatingAdmissionPolicy. Those end the run at the first refusal
(diagnosis.pods_refused), quoting it and saying what to change; the others wait
out the unschedulable grace, quoted in the Pending message meanwhile.

A webhook's denial ("admission webhook ... denied the request") is judged one
that may pass: a webhook may answer from state that changes (and its message
is quoted while the run waits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

KubeDict = dict[str, Any]

# The reasons a controller's event has when it could not create a pod (or a JobSet's / MPIJob's Job): Kubernetes'
# controllers say FailedCreate, Kubeflow's training-operator FailedCreatePod.
CREATE_FAILED = ("FailedCreate", "FailedCreatePod")
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"
MAX_QUOTED = 600  # characters of the API server's words kept in a message

_POD_SECURITY = re.compile(r'violates PodSecurity "([^"]+)"')


@dataclass(frozen=True)
class Refusal:
    """The latest refusal of the run's pods: the API server's words, who was refused, how often, and, when waiting
    cannot change it, what to change (`fix`; None: it may pass)."""

    words: str
    kind: str
    name: str
    attempts: int
    fix: str | None


def _pod_security_fix(words: str, namespace: str) -> str | None:
    match = _POD_SECURITY.search(words)
    if match is None:
        return None
    return (f"namespace {namespace} enforces Pod Security \"{match.group(1)}\", and a GPU test's pods need "
            "privileged: the ulimit init container is privileged, multi-node RDMA adds IPC_LOCK. Label the namespace "
            f"(kubectl label namespace {namespace} {POD_SECURITY_LABEL}=privileged --overwrite) or run the test in a "
            "namespace made for tests that allows privileged pods (a single-node test without hostNetwork fits "
            "baseline with spec.pod.ulimitInit: false)")


# (pattern, what to change): refusals of the pod as built, which every retry repeats.
_PERMANENT = (
    (re.compile(r"must specify (limits|requests)\.", re.I),
     "a ResourceQuota of the namespace requires every container to set it: set spec.resources.cpu and "
     "spec.resources.memory (requests = limits), or run the test in a namespace without that quota"),
    (re.compile(r"(maximum|minimum) \S+ usage per (Container|Pod) is|limit to request ratio per", re.I),
     "a LimitRange of the namespace bounds the pods' resources: fit spec.resources (and spec.pod.shmSize) to it, "
     "or run the test in a namespace without that LimitRange"),
    (re.compile(r"ValidatingAdmissionPolicy '[^']*' with binding '[^']*' denied request", re.I),
     "an admission policy of the namespace refuses the pods the spec builds: change the spec as it says, or run "
     "the test in a namespace the policy does not bind"),
    (re.compile(r"\bis invalid: ", re.I),
     "Kubernetes does not accept the pods the spec builds: fix the field it names (spec.placement, spec.pod or "
     "spec.resources)"),
)


def permanent_fix(words: str, namespace: str) -> str | None:
    """What to change when `words` (a FailedCreate event's message) is a refusal that every retry repeats; None
    when waiting may change it (an exhausted quota, a webhook that did not answer, a ServiceAccount not seen yet)."""
    fix = _pod_security_fix(words, namespace)
    if fix is not None:
        return fix
    return next((what for pattern, what in _PERMANENT if pattern.search(words)), None)


def _timestamp(event: KubeDict) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or \
        ((event.get("metadata") or {}).get("creationTimestamp") or "")


def latest(job: KubeDict, events: list[KubeDict]) -> Refusal | None:
    """The latest FailedCreate event of the job (or of the Jobs a JobSet, TrainJob or MPIJob makes: `<job>-...`), or
    None when there is none."""
    meta = job.get("metadata") or {}
    name, namespace = meta.get("name", "?"), meta.get("namespace", "?")
    mine = [e for e in events if e.get("reason") in CREATE_FAILED
            and ((n := (e.get("involvedObject") or {}).get("name", "")) == name or n.startswith(f"{name}-"))]
    if not mine:
        return None
    event = max(mine, key=_timestamp)
    words = (event.get("message") or "").strip()[:MAX_QUOTED]
    about = event.get("involvedObject") or {}
    return Refusal(words, about.get("kind", "?"), about.get("name", "?"),
                   sum(int(e.get("count") or 1) for e in mine), permanent_fix(words, namespace))
