"""What the watches have told us about the tests' child jobs and their pods, kept in memory.

Why: reading a run's job and pods from the API server on every look costs a
GET and a LIST per test; kept up to date by watch events (server-side label
selector gpu-acceptance.io/test, so nothing else is seen), they cost nothing
to read. A cache can lag the API server by a moment, so the handlers confirm
with a fresh read before a cached view may end a run, and read the API server
when the cache has no job yet (just created, or the watch is not allowed).

Only what the verdict needs is kept: a job's metadata and status (its spec
holds the pod templates), a pod's metadata, spec.nodeName and status.
"""

from __future__ import annotations

import threading
from typing import Any

from acceptance_operator.building.manifests import LABEL_TEST, run_of_child
from acceptance_operator.fleet.sweep import Child
from acceptance_operator.judging.diagnosis import LOST, container_failure, never_ran
from acceptance_operator.workload import PROGRESS_KEY, STATUS_KEY

KubeDict = dict[str, Any]
TestKey = tuple[str, str]  # (namespace, AcceptanceTest name)
BOUND_RUNS = 4  # runs per test whose pods' nodes are remembered
MAX_GONE_PODS = 1024


def _meta(obj: KubeDict) -> KubeDict:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in ("name", "namespace", "uid", "labels", "creationTimestamp", "deletionTimestamp",
                                 "ownerReferences", "resourceVersion") if k in meta}


def slim_job(job: KubeDict) -> KubeDict:
    return {"apiVersion": job.get("apiVersion"), "kind": job.get("kind"), "metadata": _meta(job),
            "status": job.get("status") or {}}


def slim_pod(pod: KubeDict) -> KubeDict:
    spec = pod.get("spec") or {}
    return {"metadata": _meta(pod), "spec": {k: spec[k] for k in ("nodeName",) if k in spec},
            "status": pod.get("status") or {}}


STATUS_LISTS = ("initContainerStatuses", "containerStatuses")


def pod_id(pod: KubeDict) -> str:
    """A pod's uid (its name where none is given): a job's controller may create a pod again under the name of one
    it deleted (diagnosis.never_ran), and the two must not be taken for one."""
    meta = pod.get("metadata") or {}
    return meta.get("uid") or meta.get("name", "")


def keep_ends(before: KubeDict | None, after: KubeDict) -> KubeDict:
    """`after`, with each container's end as `before` (the same pod) had it where `after` only says the kubelet
    lost it.

    Why: the kubelet reports a container it no longer finds when its pod is deleted as LOST (137, "could not be
    located"); an end seen before that is the true one, with the workload's own code and termination message, and
    a verdict drawn from the lost one would blame a SIGKILL nobody sent. Only the same pod's ends are kept: the pod
    a controller created again under the same name (diagnosis.never_ran) has ends of its own."""
    if not before or pod_id(before) != pod_id(after):
        return after
    status = dict(after.get("status") or {})
    for key in STATUS_LISTS:
        known = {s.get("name"): s for s in (before.get("status") or {}).get(key) or []
                 if _ended(s) and _ended(s).get("reason") != LOST}
        if known and status.get(key):
            status[key] = [known.get(s.get("name"), s) if (_ended(s) or {}).get("reason") == LOST else s
                           for s in status[key]]
    return {**after, "status": status}


def _ended(container_status: KubeDict) -> KubeDict | None:
    return (container_status.get("state") or {}).get("terminated")


def lost(pod: KubeDict) -> bool:
    """Whether the kubelet says it lost a container of the pod (keep_ends had no earlier end to put back)."""
    return any((_ended(s) or {}).get("reason") == LOST
               for key in STATUS_LISTS for s in (pod.get("status") or {}).get(key) or [])


class Children:
    """Jobs by (namespace, kind, name); pods by (namespace, test label, run id); test label -> test name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str, str], KubeDict] = {}
        self._pods: dict[tuple[str, str, str], dict[str, KubeDict]] = {}
        self._names: dict[tuple[str, str], str] = {}  # (namespace, label value) -> test name
        self._bound: dict[tuple[str, str], dict[str, set[str]]] = {}  # (namespace, label) -> run -> nodes
        # The last state of pods deleted after a container failed (a pod deleted mid-run, a job's controller removing
        # its failed pods), by pod_id, so the verdict still says which pod failed on which node; at most
        # MAX_GONE_PODS, oldest dropped first, and a forgotten test's with it.
        self._gone: dict[tuple[str, str, str], dict[str, KubeDict]] = {}
        # Evidence ConfigMaps as the watch showed them: (namespace, name) -> (test label, the status part rank 0
        # delivered into it, "" while there is none). Only the status part is kept: the evidence is read when judged.
        self._evidence: dict[tuple[str, str], tuple[str, str]] = {}
        # Their soak progress (PROGRESS_KEY) with the run their labels name: (namespace, name) -> (run id, text).
        self._progress: dict[tuple[str, str], tuple[str, str]] = {}

    # the tests ------------------------------------------------------------------
    def know_test(self, namespace: str, label: str, name: str) -> None:
        """Children carry the test's label value (a shortened name for long names): remember whose it is."""
        with self._lock:
            self._names[(namespace, label)] = name

    def forget_test(self, namespace: str, label: str) -> None:
        with self._lock:
            self._names.pop((namespace, label), None)
            self._bound.pop((namespace, label), None)
            for key in [k for k in self._gone if k[:2] == (namespace, label)]:
                del self._gone[key]
            for cm in [k for k, (owner, _) in self._evidence.items() if k[0] == namespace and owner == label]:
                del self._evidence[cm]
                self._progress.pop(cm, None)

    def owner(self, obj: KubeDict) -> TestKey | None:
        """The test a labelled child belongs to, if that test is known."""
        meta = obj.get("metadata") or {}
        label = (meta.get("labels") or {}).get(LABEL_TEST)
        namespace = meta.get("namespace")
        if not label or not namespace:
            return None
        with self._lock:
            name = self._names.get((namespace, label))
        return (namespace, name) if name else None

    # evidence ------------------------------------------------------------------
    def evidence_event(self, event_type: str | None, cm: KubeDict) -> None:
        meta = cm.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        with self._lock:
            if event_type == "DELETED":
                self._evidence.pop(key, None)
                self._progress.pop(key, None)
            else:
                label = (meta.get("labels") or {}).get(LABEL_TEST, "")
                data = cm.get("data") or {}
                self._evidence[key] = (label, str(data.get(STATUS_KEY) or ""))
                self._progress[key] = (run_of_child(cm), str(data.get(PROGRESS_KEY) or ""))

    def evidence_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """The ConfigMap's status part as the watch last showed it ({} without one); None if the watch has not
        shown that ConfigMap (read it)."""
        with self._lock:
            seen = self._evidence.get((namespace, name))
        if seen is None:
            return None
        return {STATUS_KEY: seen[1]} if seen[1] else {}

    def evidence_progress(self, namespace: str, name: str) -> tuple[str, str] | None:
        """(the run the ConfigMap's labels name, its soak progress text, "" without one) as the watch last showed
        it; None if the watch has not shown that ConfigMap (read it)."""
        with self._lock:
            return self._progress.get((namespace, name))

    # jobs and pods ---------------------------------------------------------------
    def job_event(self, kind: str, event_type: str | None, job: KubeDict) -> None:
        meta = job.get("metadata") or {}
        key = (meta.get("namespace", ""), kind, meta.get("name", ""))
        with self._lock:
            if event_type == "DELETED":
                self._jobs.pop(key, None)
            else:
                self._jobs[key] = slim_job(job)

    def pod_event(self, event_type: str | None, pod: KubeDict) -> None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        key = (meta.get("namespace", ""), labels.get(LABEL_TEST, ""), run_of_child(pod))
        with self._lock:
            if event_type == "DELETED":
                pods = self._pods.get(key, {})
                last = keep_ends(pods.pop(meta.get("name", ""), None), slim_pod(pod))
                if not pods:
                    self._pods.pop(key, None)
                if container_failure(last) and (pod.get("spec") or {}).get("nodeName") and not never_ran(last):
                    self._remember_gone(key, pod_id(last), last)
            else:
                pods = self._pods.setdefault(key, {})
                pods[meta.get("name", "")] = keep_ends(pods.get(meta.get("name", "")), slim_pod(pod))
                node = (pod.get("spec") or {}).get("nodeName")
                if node:
                    self._remember_bound(key, node)

    def _remember_bound(self, key: tuple[str, str, str], node: str) -> None:
        """A pod of the run is bound to `node`: remembered after the pod is gone (a report may name it). Per test,
        the latest BOUND_RUNS runs are kept."""
        runs = self._bound.setdefault(key[:2], {})
        runs.setdefault(key[2], set()).add(node)
        runs[key[2]] = runs.pop(key[2])  # the latest run last
        while len(runs) > BOUND_RUNS:
            runs.pop(next(iter(runs)))

    def bound_nodes(self, namespace: str, label: str, run: str) -> frozenset[str]:
        """The nodes the run's pods are or were bound to, as the watch showed them."""
        with self._lock:
            return frozenset(self._bound.get((namespace, label), {}).get(run, ()))

    def job(self, namespace: str, kind: str, name: str) -> KubeDict | None:
        with self._lock:
            return self._jobs.get((namespace, kind, name))

    def pods(self, namespace: str, label: str, run: str) -> list[KubeDict]:
        """The pods of one run (runs.run_id) of one test."""
        with self._lock:
            return list(self._pods.get((namespace, label, run), {}).values())

    def with_gone(self, namespace: str, label: str, run: str, pods: list[KubeDict]) -> list[KubeDict]:
        """`pods` (the run's, as read: each container's end as the watch saw it where the read says the kubelet
        lost it, keep_ends) and the last state of its pods deleted after a container failed."""
        ids = {pod_id(p) for p in pods}
        seen = self._seen(namespace, label, run)
        with self._lock:
            gone = [p for uid, p in self._gone.get((namespace, label, run), {}).items() if uid not in ids]
        return [*(keep_ends(seen.get(pod_id(p)), p) for p in pods), *gone]

    def _seen(self, namespace: str, label: str, run: str) -> dict[str, KubeDict]:
        """The run's pods the watch showed, live or gone, by pod_id."""
        key = (namespace, label, run)
        with self._lock:
            return {**{pod_id(p): p for p in self._pods.get(key, {}).values()}, **self._gone.get(key, {})}

    def behind(self, namespace: str, label: str, run: str, pods: list[KubeDict]) -> list[str]:
        """The pods of `pods` (a fresh read, with_gone's) whose containers the kubelet says it lost, at a version the
        watch has not delivered yet: an end the kubelet reported before may still be on its way through the watch
        (keep_ends puts it back once it comes), or the watch has not shown the pod at all (one created again under a
        failed pod's name, diagnosis.never_ran, whose deletion the watch brings within a second)."""
        seen = self._seen(namespace, label, run)
        out = []
        for p in pods:
            meta = p.get("metadata") or {}
            known = (seen.get(pod_id(p)) or {}).get("metadata") or {}
            if lost(p) and known.get("resourceVersion") != meta.get("resourceVersion"):
                out.append(meta.get("name", ""))
        return out

    def _remember_gone(self, key: tuple[str, str, str], uid: str, pod: KubeDict) -> None:
        self._gone.setdefault(key, {})[uid] = pod
        while sum(len(p) for p in self._gone.values()) > MAX_GONE_PODS:
            oldest = next(iter(self._gone))
            self._gone[oldest].pop(next(iter(self._gone[oldest])))
            if not self._gone[oldest]:
                del self._gone[oldest]

    def sizes(self) -> tuple[int, int]:
        """(jobs, pods) held, for the benchmark and the log."""
        with self._lock:
            return len(self._jobs), sum(len(p) for p in self._pods.values())


class SweepChildren:
    """A sweep's child tests per (namespace, parent label, run id), and the nodes, as the watches showed them.

    A parent whose children were never listed (the operator just started, its watch may still be delivering
    them) is `primed` from one LIST first, so a restart never starts more than maxConcurrent at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str, str], dict[str, Child]] = {}
        self._primed: set[tuple[str, str, str]] = set()
        self._busy: dict[tuple[str, str, str], dict[str, str]] = {}  # per run: node -> why its GPUs are busy
        self._leaving: dict[tuple[str, str, str], frozenset[str]] = {}  # per run: earlier runs' children's labels
        self._nodes: dict[str, KubeDict] = {}
        self.nodes_primed = False

    def child_event(self, event_type: str | None, namespace: str, parent: str, run: str, child: Child) -> None:
        with self._lock:
            known = self._runs.setdefault((namespace, parent, run), {})
            if event_type == "DELETED":
                known.pop(child.name, None)
            else:
                known[child.name] = child

    def prime(self, namespace: str, parent: str, run: str, children: list[Child]) -> None:
        with self._lock:
            known = self._runs.setdefault((namespace, parent, run), {})
            for c in children:
                known.setdefault(c.name, c)
            self._primed.add((namespace, parent, run))

    def primed(self, namespace: str, parent: str, run: str) -> bool:
        with self._lock:
            return (namespace, parent, run) in self._primed

    def children(self, namespace: str, parent: str, run: str) -> list[Child]:
        with self._lock:
            return list(self._runs.get((namespace, parent, run), {}).values())

    def forget(self, namespace: str, parent: str) -> None:
        with self._lock:
            for key in [k for k in {*self._runs, *self._busy, *self._leaving} if k[:2] == (namespace, parent)]:
                self._runs.pop(key, None)
                self._busy.pop(key, None)
                self._leaving.pop(key, None)
                self._primed.discard(key)

    def busy(self, namespace: str, parent: str, run: str) -> dict[str, str]:
        """The busy nodes as the run's last look at the pods found them (spec.skipBusyNodes)."""
        with self._lock:
            return dict(self._busy.get((namespace, parent, run), {}))

    def set_busy(self, namespace: str, parent: str, run: str, busy: dict[str, str]) -> None:
        with self._lock:
            self._busy[(namespace, parent, run)] = dict(busy)

    def leaving(self, namespace: str, parent: str, run: str) -> frozenset[str]:
        """Test label values of the earlier runs' children this run deleted: their pods are not "other pods"."""
        with self._lock:
            return self._leaving.get((namespace, parent, run), frozenset())

    def set_leaving(self, namespace: str, parent: str, run: str, labels: list[str]) -> None:
        with self._lock:
            self._leaving[(namespace, parent, run)] = frozenset(labels)

    def node_event(self, event_type: str | None, node: KubeDict) -> None:
        meta = node.get("metadata") or {}
        slim = {"metadata": {"name": meta.get("name", ""), "labels": meta.get("labels") or {}},
                "spec": {"unschedulable": bool((node.get("spec") or {}).get("unschedulable"))}}
        with self._lock:
            if event_type == "DELETED":
                self._nodes.pop(slim["metadata"]["name"], None)
            else:
                self._nodes[slim["metadata"]["name"]] = slim

    def prime_nodes(self, nodes: list[KubeDict]) -> None:
        for node in nodes:
            self.node_event(None, node)
        self.nodes_primed = True

    def nodes(self) -> list[KubeDict]:
        with self._lock:
            return list(self._nodes.values())
