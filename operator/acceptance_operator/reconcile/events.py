"""kopf's entry points: a watch event about a test, its job, pods, evidence ConfigMaps or a node puts the test's
key in the work queue (after a short settle where a burst is likely); deletion drops the test's state.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import json
import logging
from typing import Any

import kopf

from acceptance_operator.building import manifests
from acceptance_operator.building.backends import BACKENDS, BackendSpec
from acceptance_operator.fleet import node_lifecycle, sweep
from acceptance_operator.plumbing import crdcheck
from acceptance_operator.plumbing.calm import describe_error
from acceptance_operator.plumbing.election import Election, LeaseApi
from acceptance_operator.plumbing.kubeapi import separate_client
from acceptance_operator.plumbing.settings import configure_kopf
from acceptance_operator.plumbing.workqueue import start_workers
from acceptance_operator.reconcile import evidence_hooks
from acceptance_operator.reconcile import runtime as rt
from acceptance_operator.reconcile.loop import work
from acceptance_operator.reconcile.runtime import awaits_run, inputs, kube, more_runs, shell
from acceptance_operator.reconcile.status import refresh_metrics
from acceptance_operator.resource.api import GROUP, KIND, PLURAL, VERSION
from acceptance_operator.resource.conditions import is_finished

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")
_metrics_served = False


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _metrics_served
    configure_kopf(settings)
    if rt.SETTINGS.metrics_port and not _metrics_served:
        rt.METRICS.serve(rt.SETTINGS.metrics_port)
        _metrics_served = True
        log.info("serving /metrics on port %d", rt.SETTINGS.metrics_port)
    if not rt.WORKERS:
        warm_up()
        rt.WORKERS.extend(start_workers(rt.QUEUE, work, rt.SETTINGS.workers, "reconcile", gate=rt.GATE))
    if rt.ELECTION is None:
        s = rt.SETTINGS
        rt.ELECTION = Election(LeaseApi(separate_client(), s.lease_namespace, s.lease), s.lease_identity, s.lease,
                               rt.GATE, rt.METRICS, on_lose=rt.forget_work)
        rt.ELECTION.start()


def warm_up() -> None:
    """Load the client's lazily imported API modules and open a connection per worker now, not in the first
    tests' time."""
    try:
        rt.installed_crd_changed(kube().read_crd(crdcheck.CRD_NAME))
        kube().backend_problem("PyTorchJob")
        kube().open_connections(rt.SETTINGS.workers)
    except Exception as e:  # the first reconcile will say what is wrong, in its own rate-limited line
        log.debug("warm-up call failed: %s", describe_error(e))


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    """A clean stop (SIGTERM: a rolling update, a drain): no new reconcile; the lease is given back once the
    reconciles in flight ended, so a standby takes over within its retry period."""
    rt.QUEUE.close()
    if rt.ELECTION is not None:
        await asyncio.to_thread(rt.ELECTION.stop)
    rt.GATE.close()


@kopf.on.probe(id="leadership")
def leadership(**_: Any) -> KubeDict:
    """/healthz (liveness and readiness) says who leads: a standby is healthy and ready, it only waits."""
    return rt.ELECTION.status() if rt.ELECTION is not None else {"leading": False}


@kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions", field="metadata.name",
               value=crdcheck.CRD_NAME)
async def on_crd_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    """The installed AcceptanceTest CRD changed (an upgrade, a downgrade): compare it again."""
    rt.installed_crd_changed(None if type == "DELETED" else dict(body))



@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_test_event(type: str | None, body: kopf.Body, namespace: str, name: str, logger: logging.Logger,
                        **_: Any) -> None:
    """Any change of a test (or the first sight of it): reconcile it, unless its run is finished."""
    key = (namespace, name)
    label = manifests.test_label_value(shell(namespace, name, None))
    sweep_child_changed(type, body)
    if type == "DELETED":
        rt.CHILDREN.forget_test(namespace, label)
        rt.SWEEPS.forget(namespace, label)
        rt.QUEUE.forget(key)
        rt.STATES.drop(key)
        rt.METRICS.forget(namespace, name)
        rt.GONE[key] = copy.deepcopy(dict(body))
        rt.QUEUE.add(key)  # its children: see delete_children
        return
    rt.CHILDREN.know_test(namespace, label, name)
    state = rt.STATES.get(key)
    state.logger, state.context = logger, contextvars.copy_context()
    seen, state.seen = state.seen, fingerprint(body)
    version = body.get("metadata", {}).get("resourceVersion")
    if version == state.own_write:
        log.debug("%s/%s: event %s skipped: the echo of our own status write", namespace, name, version)
        return  # nothing new to look at
    if seen == state.seen:
        log.debug("%s/%s: event %s skipped: nothing a run depends on changed", namespace, name, version)
        return  # only kopf's finalizer or annotations changed
    if is_finished(body) and not body.get("metadata", {}).get("deletionTimestamp") and not more_runs(body):
        log.debug("%s/%s: event %s skipped: the run has its verdict", namespace, name, version)
        refresh_metrics(namespace, name, dict(body.get("status") or {}))  # e.g. after a restart
        node_lifecycle.restore_from_test(dict(body), rt.METRICS)
        rt.QUEUE.forget(key)
        return
    urgent = awaits_run(body)
    state.fresh = copy.deepcopy(dict(body)) if urgent else None
    rt.QUEUE.add(key, urgent=urgent)


def watch_jobs(backend: BackendSpec) -> None:
    """One watch per backend in the table, on its jobs that carry a test's label."""

    async def on_job_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        child_changed(backend.kind, type, body)

    kopf.on.event(backend.group, backend.version, backend.plural, id=f"on_{backend.kind.lower()}_event",
                  labels={manifests.LABEL_TEST: kopf.PRESENT})(on_job_event)


@kopf.on.event("", "v1", "nodes")
async def on_node_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    """Sweeps test the nodes that match: a node joining or cordoned changes what they start next."""
    rt.SWEEPS.node_event(type, dict(body))
    # The last-pass gauge, restored from the node after a restart.
    node_lifecycle.node_seen(type, dict(body), rt.METRICS)
    for key in rt.STATES.keys_where(lambda s: s.sweeping_nodes):
        rt.QUEUE.add_after(key, rt.SWEEP_SETTLE_SECONDS)


def sweep_child_changed(event_type: str | None, body: kopf.Body) -> None:
    """A sweep's child test changed: remember its phase and wake its parent."""
    child = sweep.child_of(body, body.get("status"))
    if child is None:
        return
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    rt.SWEEPS.child_event(event_type, meta.get("namespace", ""), labels[sweep.LABEL_SWEEP],
                       labels.get(sweep.LABEL_SWEEP_RUN, ""), child)
    parent = next((o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == KIND), None)
    if parent:
        rt.QUEUE.add_after((meta.get("namespace", ""), parent), rt.SWEEP_SETTLE_SECONDS)


@kopf.on.event("", "v1", "pods", labels={manifests.LABEL_TEST: kopf.PRESENT})
async def on_pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    child_changed("Pod", type, body)


@kopf.on.event("", "v1", "configmaps",
               labels={manifests.LABEL_TEST: kopf.PRESENT, manifests.LABEL_ROLE: evidence_hooks.EVIDENCE_ROLE})
async def on_evidence_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    """Rank 0 delivers the report into the run's evidence ConfigMaps, the status part last: wake its test."""
    child_changed("ConfigMap", type, body)


def fingerprint(body: kopf.Body) -> str:
    """What a reconcile depends on: the inputs others change (inputs) and the status.

    kopf's own bookkeeping (its finalizer, its last-handled annotation) is left
    out: the events it causes are not worth a reconcile each.
    """
    return json.dumps([*inputs(body), body.get("status")], sort_keys=True, default=str)


def child_changed(kind: str, event_type: str | None, body: kopf.Body) -> None:
    """Remember what the watch says and wake the test it belongs to."""
    obj = dict(body)
    if kind == "Pod":
        rt.CHILDREN.pod_event(event_type, obj)
    elif kind == "ConfigMap":
        rt.CHILDREN.evidence_event(event_type, obj)
    else:
        rt.CHILDREN.job_event(kind, event_type, obj)
    owner = rt.CHILDREN.owner(obj)
    if owner is not None:
        rt.QUEUE.add_after(owner, rt.CHILD_SETTLE_SECONDS)



for _backend in BACKENDS.values():
    watch_jobs(_backend)
