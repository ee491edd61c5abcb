"""Why a child job failed or cannot start, from the job, its pods and their events.

Pure functions over the plain dicts the API returns, so every failure message
can be unit-tested from a recorded pod status. Messages name the pod, the node,
the container, the exit code and the Kubernetes reason (OOMKilled,
ImagePullBackOff, Error), and end with what to do.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from acceptance_operator.building.backends import controller_of, job_state
from acceptance_operator.building.jobstate import parse_time
from acceptance_operator.building.manifests import LABEL_ROLE, ROLE_LAUNCHER
from acceptance_operator.judging import refusals
from acceptance_operator.resource.conditions import (
    BACKEND_NOT_RUNNING,
    IMAGE_PULL_FAILED,
    JOB_FAILED,
    NODE_NOT_READY,
    PODS_REFUSED,
    REPORT_NOT_DELIVERED,
    UNSCHEDULABLE,
)
from acceptance_operator.workload import delivery, exit_code_signal, signal_name

KubeDict = dict[str, Any]

# Where a test pod's pull Secrets come from (manifests.resolve_image): every container of the pod, the ulimit init
# container's operator image included, pulls with them; the chart's imagePullSecrets are the operator pod's alone.
PULL_SECRETS = ("the pull Secrets in the test's namespace (spec.pod.imagePullSecrets, else the chart's "
                "workloadImagePullSecrets)")
# Container waiting reasons that do not go away by waiting.
STUCK_WAITING = {
    "ImagePullBackOff": f"the image cannot be pulled: check spec.image, the registry and {PULL_SECRETS}",
    "ErrImagePull": f"the image cannot be pulled: check spec.image, the registry and {PULL_SECRETS}",
    "InvalidImageName": "spec.image is not a valid image reference",
    "CreateContainerConfigError": "the container cannot be configured: a referenced Secret/ConfigMap or "
    "volume is missing",
    "CreateContainerError": "the container runtime cannot create the container",
    "CrashLoopBackOff": "the container keeps crashing: read its logs",
    "RunContainerError": "the container runtime cannot start the container",
}
# Waiting reasons of a pull that failed: the run ends ImagePullFailed (IMAGE_PULL_FAILED), not JobFailed.
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff")
# How a container runtime quotes a registry that refused the pull's login (containerd: "unexpected status from HEAD
# request to https://...: 401 Unauthorized"; token registries: "failed to authorize", "authorization failed",
# "pull access denied"). Waiting cannot fix that: the kubelet retries with the same Secret.
_LOGIN_REFUSED = re.compile(
    r"401 Unauthorized|403 Forbidden|\bunauthorized\b|authentication required|failed to authorize|"
    r"authorization failed|access denied", re.IGNORECASE)
LOGIN_REFUSED_HINT = ("the registry refused the login: the Secret named in spec.pod.imagePullSecrets (else in the "
                      "chart's workloadImagePullSecrets, for every container of the test's pods) has a wrong user or "
                      "password for that registry, is missing from the test's namespace, or lacks pull access to the "
                      "repository")
# The scheduler's "N node(s) had untolerated taint {key: value}" (one per taint key).
_UNTOLERATED = re.compile(r"(\d+) node\(s\) had untolerated taint \{([^:}]+)")
# Taints the node lifecycle controller puts on a node that stopped being Ready: no toleration is the answer.
NOT_READY_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9](?:[A-Za-z0-9./_-]*[A-Za-z0-9])?)")
# What a controller, the kubelet or a person sends to stop a pod: a container ended by one was stopped, not killed.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How far a node's clock (a container's finishedAt) may be behind the API server's (a deletionTimestamp).
DELETION_CLOCK_SKEW = timedelta(seconds=2)
# The kubelet's end for a container it could not find when its pod was deleted (exit 137, "The container could not
# be located when the pod was terminated"): what a container deleted before it started is said to have ended with;
# one the kubelet had seen running says so ("... The container used to be Running").
LOST = "ContainerStatusUnknown"
LOST_RUNNING = "used to be Running"


@dataclass(frozen=True)
class Finding:
    """A diagnosed problem: one of the documented failure reasons and a message to act on."""

    reason: str
    message: str


def _name(pod: KubeDict) -> str:
    return (pod.get("metadata") or {}).get("name", "?")


def _node(pod: KubeDict) -> str | None:
    return (pod.get("spec") or {}).get("nodeName")


def _where(pod: KubeDict) -> str:
    node = _node(pod)
    return f"pod {_name(pod)} on node {node}" if node else f"pod {_name(pod)} (not scheduled)"


def _statuses(pod: KubeDict) -> list[tuple[str, KubeDict]]:
    status = pod.get("status") or {}
    return [("init container", s) for s in status.get("initContainerStatuses") or []] + [
        ("container", s) for s in status.get("containerStatuses") or []
    ]


def _sorted(pods: list[KubeDict]) -> list[KubeDict]:
    return sorted(pods, key=_name)


def pod_phases(pods: list[KubeDict]) -> str:
    """'2 Running, 1 Pending' (or 'no pods')."""
    if not pods:
        return "no pods"
    counts = Counter((p.get("status") or {}).get("phase") or "Pending" for p in pods)
    return ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items()))


def _terminated(status: KubeDict) -> KubeDict | None:
    return (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")


def _signal(term: KubeDict) -> int | None:
    """The signal that ended a container: its exit code is 128 + N (137: SIGKILL, 139: SIGSEGV)."""
    code = term.get("exitCode")
    return exit_code_signal(code) if isinstance(code, int) else None


def container_failure(pod: KubeDict) -> str | None:
    """What ended a pod's container with an error, e.g. 'container pytorch exited with code 137 (OOMKilled), killed
    by SIGKILL (signal 9)'."""
    for what, s in _statuses(pod):
        term = _terminated(s)
        if term and (term.get("exitCode", 0) != 0 or term.get("reason") == "OOMKilled"):
            reason = term.get("reason") or "Error"
            text = f"{what} {s.get('name', '?')} exited with code {term.get('exitCode', '?')} ({reason})"
            sig = _signal(term)
            if sig is not None:
                text += f", killed by {signal_name(sig)} (signal {sig})"
            if reason == "OOMKilled":
                text += ": it ran out of memory; raise spec.resources.memory or lower the checks' sizes/batch"
            elif term.get("message"):
                text += f": {term['message'].strip()[:300]}"
            return text
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        reason = status.get("reason") or "Failed"
        return f"the pod failed ({reason}){': ' + status['message'] if status.get('message') else ''}"
    return None


def _ran(status: KubeDict) -> bool:
    """Whether a container ran, or ended in a way its kubelet saw (anything but a LOST end of one never running)."""
    for state in (status.get("state") or {}, status.get("lastState") or {}):
        end = state.get("terminated") or {}
        if "running" in state or (end and (end.get("reason") != LOST or LOST_RUNNING in (end.get("message") or ""))):
            return True
    return False


def never_ran(pod: KubeDict) -> bool:
    """A pod deleted before any of its containers ran: its containers' ends (LOST, 137) say nothing of a node.

    Why: training-operator v1, failing a PyTorchJob past its backoffLimit, deletes its pods whatever the
    cleanPodPolicy (kubeflow/trainer#3419), then, its cache still showing the job unfinished and the pod missing,
    creates the pod again under the same name and deletes that one too, before the kubelet started it (seen on the
    real node in 3 of 5 runs under load). The pod that ran, whose end tells the story, was deleted first."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return not any(_ran(s) for _, s in _statuses(pod))


def _launcher(pod: KubeDict) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE) == ROLE_LAUNCHER


def failed_pod(pods: list[KubeDict]) -> Finding | None:
    """The first pod whose container ended with an error (the earliest end: the others often fail because it
    did, or are stopped by the job's controller after it); a GPU pod before an MPIJob's launcher, whose mpirun
    fails because a rank did."""
    def order(p: KubeDict) -> tuple[bool, bool, datetime, str]:
        end = _finished_at(p)
        return _launcher(p), end is None, end or datetime.min.replace(tzinfo=timezone.utc), _name(p)

    for pod in sorted((p for p in pods if not never_ran(p)), key=order):
        failure = container_failure(pod)
        if failure:
            return Finding(JOB_FAILED, f"{_where(pod)}: {failure}")
    return None


def report_not_delivered(pods: list[KubeDict]) -> Finding | None:
    """A pod whose container's termination message (or the log tail Kubernetes kept instead) says its report was
    not delivered (delivery.not_delivered): its error, and what its checks said, quoted as unverified."""
    for pod in sorted(pods, key=_launcher):  # rank 0's own pod first; an MPIJob's launcher may carry its log
        for what, s in _statuses(pod):
            found = delivery.parse((_terminated(s) or {}).get("message"))
            if found is None:
                continue
            said = (f" The pod's own summary of its checks, UNVERIFIED (the operator has no report to judge, and "
                    f"never passes a run on it): {'; '.join(found.checks_said.splitlines())}"
                    if found.checks_said else "")
            return Finding(REPORT_NOT_DELIVERED, (
                f"the run's report was not delivered: {_where(pod)}, {what} {s.get('name', '?')}: {found.error} -> "
                "the test pods must reach the API server (and each other): a NetworkPolicy denying egress, or a "
                "pod network without a route to it, stops them; see docs/troubleshooting.md#reportnotdelivered, "
                f"then run the test again (the rerun annotation).{said}"))
    return None


def killed_on_node(pod: KubeDict) -> bool:
    """Its container was OOMKilled, or killed by a signal nobody sends to stop a pod (SIGKILL, SIGSEGV, SIGBUS...):
    it died on its node.

    A deletion sends SIGTERM when it is asked for (which may make a process abort as it stops) and SIGKILL once
    its grace period is over, at the pod's deletionTimestamp. A controller may also delete a pod that had
    already died while its status still said Running (mpi-operator's cleanPodPolicy Running, racing the
    kubelet's report of an MPI worker killed on its node). So a deleted pod is blamed only for a SIGKILL or an
    OOM kill before its grace ended, or another signal before the deletion was asked for, by more than the
    clocks of node and API server may differ; an end the status does not time is not blamed."""
    meta = pod.get("metadata") or {}
    deadline = parse_time(meta.get("deletionTimestamp"))
    asked = deadline - timedelta(seconds=meta.get("deletionGracePeriodSeconds") or 0) if deadline else None
    for _, s in _statuses(pod):
        term = _terminated(s) or {}
        sig, oom = _signal(term), term.get("reason") == "OOMKilled"
        if not (oom or (sig is not None and sig not in STOP_SIGNALS)):
            continue
        if deadline is None or asked is None:
            return True
        ended = parse_time(term.get("finishedAt"))
        before = deadline if oom or sig == signal.SIGKILL else asked
        if ended is not None and ended < before - DELETION_CLOCK_SKEW:
            return True
    return False


def culprit_nodes(pods: list[KubeDict], gpu_pods: int = 0) -> list[str]:
    """The nodes a failed job without a report can be blamed on: where the failure was local.

    Pods killed on their node (killed_on_node: the OOM killer, a signal), even
    when alone; else pods that failed while others did not; or, when every pod failed (one
    rank's death takes the others down with it), the one that failed strictly
    first. A single pod, or pods that all failed at the same moment, point at
    something common to all (image, command, spec): nobody is blamed then.
    Only the GPU pods are judged: an MPIJob's launcher (mpirun, no GPU, on any
    node) fails because a rank died, not because of its node; nor is a pod
    deleted before it ran (never_ran). `gpu_pods` is how
    many the run has (spec.nodes): a backend's controller deletes the pods still
    running when the job fails (cleanPodPolicy Running), so the healthy ones may
    be gone; 0 counts the pods given, a name once.
    """
    pods = [p for p in pods if not _launcher(p) and not never_ran(p)]
    killed = sorted({n for p in pods if killed_on_node(p) and (n := _node(p))})
    if killed:
        return killed
    failed = [(_finished_at(p), n, _name(p)) for p in pods if container_failure(p) and (n := _node(p))]
    total = max(gpu_pods, len({_name(p) for p in pods}))  # a pod its controller created again counts once
    if not failed or total < 2:
        return []
    if len({name for _, _, name in failed}) < total:
        return sorted({n for _, n, _ in failed})
    if any(t is None for t, _, _ in failed):
        return []
    failed.sort()
    first, second = failed[0][0], failed[1][0]
    return [failed[0][1]] if first < second else []


def _finished_at(pod: KubeDict) -> datetime | None:
    """When the pod's first container to end with an error ended."""
    ends = []
    for _, s in _statuses(pod):
        term = (s.get("state") or {}).get("terminated") or (s.get("lastState") or {}).get("terminated") or {}
        if term.get("exitCode", 0) != 0 or term.get("reason") == "OOMKilled":
            ends.append(parse_time(term.get("finishedAt")))
    known = [t for t in ends if t is not None]
    return min(known) if known else None


def login_refused(pods: list[KubeDict]) -> Finding | None:
    """A container whose image pull the registry refused for its credentials (ErrImagePull quoting 401, ...): a
    verdict now, with the runtime's words; no grace, as waiting cannot change the Secret's password."""
    for pod in _sorted(pods):
        for what, s in _statuses(pod):
            waiting = (s.get("state") or {}).get("waiting") or {}
            message = (waiting.get("message") or "").strip()
            if waiting.get("reason") in IMAGE_PULL_REASONS and _LOGIN_REFUSED.search(message):
                image = f" (image {s['image']})" if s.get("image") else ""
                text = f"{_where(pod)}: {what} {s.get('name', '?')} is {waiting['reason']}{image}: {message[:400]}"
                return Finding(IMAGE_PULL_FAILED, f"{text} -> {LOGIN_REFUSED_HINT}")
    return None


def stuck_pod(pods: list[KubeDict]) -> tuple[Finding, datetime | None] | None:
    """A pod whose container cannot start (ImagePullBackOff, ...) and since when its pod exists."""
    for pod in _sorted(pods):
        for what, s in _statuses(pod):
            waiting = (s.get("state") or {}).get("waiting") or {}
            hint = STUCK_WAITING.get(waiting.get("reason", ""))
            if hint:
                detail = (waiting.get("message") or "").strip()[:300]
                image = f" (image {s['image']})" if s.get("image") else ""
                text = f"{_where(pod)}: {what} {s.get('name', '?')} is {waiting['reason']}{image}"
                text += f": {detail}" if detail else ""
                since = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
                reason = IMAGE_PULL_FAILED if waiting["reason"] in IMAGE_PULL_REASONS else JOB_FAILED
                return Finding(reason, f"{text}; {hint}"), since
    return None


def missing_resources(message: str) -> list[str]:
    """Resources the scheduler found insufficient, e.g. ['nvidia.com/gpu'] from 'Insufficient nvidia.com/gpu'."""
    return sorted(set(_INSUFFICIENT.findall(message)))


def scheduling_hint(message: str, gpus_per_node: int) -> str:
    """What to do about a FailedScheduling message, in the user's terms."""
    hints: list[str] = []
    for resource in missing_resources(message):
        if resource == "nvidia.com/gpu":
            hints.append(
                f"no node has {gpus_per_node} free nvidia.com/gpu: free GPUs, lower spec.gpusPerNode, "
                "or check the NVIDIA device plugin"
            )
        elif resource in ("cpu", "memory"):
            hints.append(f"no node has the requested {resource} free: lower spec.resources.{resource}")
        else:
            hints.append(f"no node has the requested {resource}: check spec.resources.extra and its device plugin")
    text = message.lower()
    if "anti-affinity" in text:
        hints.append("one pod per node: spec.nodes must not exceed the eligible nodes")
    if "node affinity/selector" in text or "node selector" in text:
        hints.append("check spec.placement.nodeSelector and affinity against the nodes' labels")
    taints = _UNTOLERATED.findall(message)
    lost = sum(int(n) for n, key in taints if key.strip() in NOT_READY_TAINTS)
    if lost:
        hints.append(f"{lost} node(s) are not Ready (their kubelet stopped reporting, or the node is down): check "
                     "`kubectl get nodes`, or lower spec.nodes to the Ready nodes")
    if any(key.strip() not in NOT_READY_TAINTS for _, key in taints) or ("untolerated taint" in text and not taints):
        hints.append("add the nodes' taints to spec.placement.tolerations")
    if "unschedulable" in text and "node(s) were unschedulable" in text:
        hints.append("some nodes are cordoned")
    return "; ".join(hints)


def _pending_since(pod: KubeDict) -> datetime | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return parse_time(c.get("lastTransitionTime")) or parse_time(pod["metadata"].get("creationTimestamp"))
    return parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


def unscheduled_since(pods: list[KubeDict]) -> list[datetime]:
    """Since when each pod that waits for a node has been waiting (the start of its unschedulable grace)."""
    out = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase", "Pending") == "Pending" and not _node(pod):
            since = _pending_since(pod)
            if since is not None:
                out.append(since)
    return out


def _scheduling_message(pod: KubeDict, events: list[KubeDict]) -> str | None:
    """The scheduler's latest word on why this pod does not fit, from its events or its PodScheduled condition."""
    name = _name(pod)
    mine = [
        e for e in events
        if e.get("reason") == "FailedScheduling" and (e.get("involvedObject") or {}).get("name") == name
    ]
    if mine:
        latest = max(mine, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return (latest.get("message") or "").strip()
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return (c.get("message") or "").strip()
    return None


def unschedulable(
    pods: list[KubeDict], events: list[KubeDict], now: datetime, grace_seconds: float, gpus_per_node: int
) -> Finding | None:
    """A pod left Pending beyond the grace period with the scheduler saying why it does not fit."""
    for pod in _sorted(pods):
        status = pod.get("status") or {}
        if status.get("phase", "Pending") != "Pending" or _node(pod):
            continue
        since = _pending_since(pod)
        if since is None or (now - since).total_seconds() < grace_seconds:
            continue
        message = _scheduling_message(pod, events)
        if message is None:
            continue
        hint = scheduling_hint(message, gpus_per_node)
        waited = int((now - since).total_seconds())
        text = f"pod {_name(pod)} has been Pending for {waited}s: {message}"
        return Finding(UNSCHEDULABLE, f"{text}{' -> ' + hint if hint else ''}")
    return None


def _live(pod: KubeDict) -> bool:
    """Bound to a node and not ended: a process the run still waits for."""
    return bool(_node(pod)) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _ready(obj: KubeDict) -> KubeDict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)


def nodes_to_check(pods: list[KubeDict]) -> list[str]:
    """The nodes worth reading: those of Running pods that are not Ready. Kubernetes' node lifecycle controller
    marks every pod on a node that stopped reporting not Ready, so a healthy run costs no node reads, nor does
    the image pull of a large run (Pending pods are not Ready either)."""
    return sorted({n for p in pods if (p.get("status") or {}).get("phase") == "Running" and (n := _node(p))
                   and ((_ready(p) or {}).get("status") or "False") != "True"})


def not_ready_since(node: KubeDict) -> datetime | None:
    """When the node's Ready condition last left True (None: Ready, or no time recorded)."""
    ready = _ready(node) or {}
    if ready.get("status") == "True":
        return None
    return parse_time(ready.get("lastTransitionTime"))


def node_lost(node: KubeDict, now: datetime, grace_seconds: float) -> bool:
    """Not Ready for at least the grace: evidence that outlives an API server outage. During an outage nobody can
    post a node's status, so right after it the node lifecycle controller marks every node whose heartbeat it
    missed Unknown, and the kubelets' next heartbeats make them Ready again within seconds."""
    if (_ready(node) or {}).get("status") == "True":
        return False
    since = not_ready_since(node)
    return since is None or (now - since).total_seconds() >= grace_seconds


def lost_nodes(pods: list[KubeDict], nodes: dict[str, KubeDict], now: datetime,
               grace_seconds: float) -> tuple[Finding, list[str]] | None:
    """Nodes that stopped being Ready, for at least the grace (node_lost), while a pod of the run was live on
    them, and what to do.

    `nodes` holds the Node objects read (nodes_to_check); a node not read, or gone, is not judged here (a
    deleted node's pods are failed by Kubernetes, which the job's own failure then reports).
    """
    lost: dict[str, list[str]] = {}
    for pod in _sorted(pods):
        node = nodes.get(_node(pod) or "")
        if _live(pod) and node is not None and node_lost(node, now, grace_seconds):
            lost.setdefault(_node(pod) or "?", []).append(_name(pod))
    if not lost:
        return None
    parts = []
    for name, pod_names in sorted(lost.items()):
        ready = _ready(nodes[name]) or {}
        why = f"Ready={ready.get('status', 'unknown')}"
        why += f", {ready['reason']}" if ready.get("reason") else ""
        why += f": {ready['message'].strip()[:200]}" if ready.get("message") else ""
        parts.append(f"node {name} is not Ready ({why}) while pod {', '.join(pod_names)} ran on it")
    text = "; ".join(parts)
    hint = ("its kubelet stopped reporting or the node is down: check `kubectl describe node`, then run the test "
            "again (the rerun annotation); the other ranks cannot finish without it")
    return Finding(NODE_NOT_READY, f"{text} -> {hint}"), sorted(lost)


def job_failure(job: KubeDict | None, pods: list[KubeDict]) -> Finding:
    """Why a job that its controller marked Failed failed: the failed pod if any, else the job's own condition."""
    state = job_state(job)
    # The pod the job's controller names as the cause (a Job's pod failure policy does), else the earliest failure.
    named = [p for p in pods if not _launcher(p) and _name(p) != "?" and _name(p) in (state.message or "")]
    from_pods = failed_pod(named) or failed_pod(pods)
    kind, name = (job or {}).get("kind", "job"), ((job or {}).get("metadata") or {}).get("name", "?")
    if from_pods:
        return Finding(JOB_FAILED, f"{kind} {name} failed: {from_pods.message}")
    detail = state.message or state.reason or "no reason given"
    return Finding(
        JOB_FAILED, f"{kind} {name} failed: {detail} (its pods are gone; `kubectl get events` may tell more)"
    )


def _created(job: KubeDict, not_before: datetime | None) -> datetime | None:
    """When the job was created, or `not_before` if later (Kueue's admission: a queued job was not yet to run)."""
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    return max(created, not_before) if created is not None and not_before is not None else created or not_before


def unstarted_since(job: KubeDict | None, pods: list[KubeDict], *,
                    not_before: datetime | None = None) -> datetime | None:
    """When the job was created (or admitted by Kueue, `not_before`), while its controller has not acted on it: no
    status of its own and no pods."""
    if job is None or pods or job_state(job).state is not None:
        return None
    return _created(job, not_before)


def backend_not_running(job: KubeDict | None, pods: list[KubeDict], now: datetime,
                        grace_seconds: float, *, not_before: datetime | None = None) -> Finding | None:
    """A job its controller has not touched for the grace period: the controller is not running (or not here)."""
    since = unstarted_since(job, pods, not_before=not_before)
    if since is None or (now - since).total_seconds() < grace_seconds:
        return None
    meta = (job or {}).get("metadata") or {}
    kind = (job or {}).get("kind", "job")
    waited = int((now - since).total_seconds())
    return Finding(BACKEND_NOT_RUNNING, (
        f"{kind} {meta.get('name', '?')} has no status and no pods {waited}s after it was created: "
        f"{controller_of(kind)} is not running, or does not watch namespace {meta.get('namespace', '?')} -> check "
        "its Deployment and its logs, then run the test again (the rerun annotation)"))


def missing_pods_since(job: KubeDict | None, pods: list[KubeDict], expected: int, *,
                       not_before: datetime | None = None) -> datetime | None:
    """When the job was created (or admitted by Kueue, `not_before`), while it has fewer GPU pods than the run
    needs and has not ended."""
    if job is None or job_state(job).finished or len([p for p in pods if not _launcher(p)]) >= max(expected, 1):
        return None
    return _created(job, not_before)


def refusal(job: KubeDict | None, pods: list[KubeDict], events: list[KubeDict], expected: int, *,
            not_before: datetime | None = None) -> refusals.Refusal | None:
    """The latest refusal of the run's pods while the job lacks some (refusals.latest), or None."""
    if job is None or missing_pods_since(job, pods, expected, not_before=not_before) is None:
        return None
    return refusals.latest(job, events)


def pods_refused(job: KubeDict | None, pods: list[KubeDict], events: list[KubeDict], expected: int, now: datetime,
                 grace_seconds: float, *, not_before: datetime | None = None) -> Finding | None:
    """The API server refused the run's pods, and the controller's FailedCreate events say why: at the first
    refusal that every retry repeats (Pod Security, a LimitRange, an invalid pod: refusals.permanent_fix), else
    once the pods have been missing for the grace period (a quota, a webhook). Not BackendNotRunning: the
    controller runs, and its own words are the cause."""
    since = missing_pods_since(job, pods, expected, not_before=not_before)
    last = refusal(job, pods, events, expected, not_before=not_before)
    if since is None or last is None:
        return None
    kind, name = (job or {}).get("kind", "job"), ((job or {}).get("metadata") or {}).get("name", "?")
    head = (f"the API server refused the pods of {kind} {name} ({last.attempts} attempt(s), the latest by "
            f"{last.kind} {last.name}): {last.words} -> ")
    if last.fix is not None:
        return Finding(PODS_REFUSED, f"{head}{last.fix}; waiting cannot change this refusal. Then run the test "
                                     "again (the rerun annotation) or apply it again")
    if (now - since).total_seconds() < grace_seconds:
        return None
    return Finding(PODS_REFUSED, (
        f"{head}refused for {int((now - since).total_seconds())}s: the pods built from the spec are not "
        "accepted (fix spec.placement, spec.pod or spec.resources), or a ResourceQuota or admission policy of the "
        "namespace refuses them; then apply the spec again or run the test again (the rerun annotation)"))


def progress(job: KubeDict | None, pods: list[KubeDict]) -> str:
    """A one-line account of where the job is, for in-progress and Timeout messages."""
    state = job_state(job)
    kind, name = (job or {}).get("kind", "job"), ((job or {}).get("metadata") or {}).get("name", "?")
    if state.state is None:
        job_text = f"{kind} {name} has no status yet (is {controller_of(kind)} running?)"
    else:
        job_text = f"{kind} {name} is {state.state}"
    return f"{job_text}; pods: {pod_phases(pods)}"


def any_running(pods: list[KubeDict]) -> bool:
    return any((p.get("status") or {}).get("phase") == "Running" for p in pods)
