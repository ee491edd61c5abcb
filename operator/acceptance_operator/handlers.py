"""kopf handlers: turn each AcceptanceTest into one job per generation and follow it to a verdict.

The handlers only orchestrate: they read the test, its job, pods and events,
let pure functions decide (backends.build_children, assessment.assess,
conditions.conditions_for, verdict.summarize, node_actions.node_patch) and
write the outcome. Nothing polls: watch events about a test, its child job or
the job's pods (server-side label selector) put the test's key in a work queue
(workqueue.py), and worker threads run the same level-based reconcile for
each key, which reads the test afresh and is safe to repeat: children are
adopted when they exist, the job name carries the generation, and a finished
generation is left alone, so an operator restart neither re-runs a finished
test nor starts a second job for a running one. Jobs and pods are read from
what the watches delivered (children.py); the clock alone matters only at the
deadlines assessment.next_look names, and a slow resync is the safety net.

Works under `gpu-acceptance operator` and under `kopf run -m acceptance_operator.handlers`.
"""

from __future__ import annotations

import contextvars
import copy
import json
import logging
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf
from acceptance_workload.report import CHECK_NAMES, Report
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from acceptance_operator import evidence_hooks, manifests, node_lifecycle, observe, runs, sweep
from acceptance_operator.api import (
    GROUP,
    KIND,
    PLURAL,
    RERUN_ANNOTATION,
    VERSION,
    AcceptanceTest,
    Condition,
    JobRef,
    ObjectMeta,
    RunRef,
    Summary,
    SweepStatus,
    parse_test,
)
from acceptance_operator.assessment import Observation, Timing, assess, next_look, pod_nodes
from acceptance_operator.backends import BACKENDS, BackendSpec, backend_of, build_children
from acceptance_operator.calm import RateLimit, describe_error
from acceptance_operator.children import Children, SweepChildren
from acceptance_operator.conditions import (
    BACKEND_NOT_INSTALLED,
    BACKEND_NOT_RUNNING,
    INVALID_SPEC,
    REPORT_REJECTED,
    TIMEOUT,
    RunState,
    clip_message,
    conditions_for,
    is_finished,
    is_smoke,
)
from acceptance_operator.diagnosis import parse_time
from acceptance_operator.kubeapi import Kube
from acceptance_operator.metrics import OperatorMetrics
from acceptance_operator.policy import policy_problems
from acceptance_operator.rejudge import Rejudged, RunFacts, run_problems
from acceptance_operator.settings import KOPF_WORKERS, OperatorSettings, configure_kopf
from acceptance_operator.teststate import States
from acceptance_operator.verdict import measured_nodes
from acceptance_operator.workqueue import WorkQueue, start_workers

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")

# The runner adjusts these before kopf starts; `kopf run` uses the environment as is.
SETTINGS = OperatorSettings.from_env()
METRICS = OperatorMetrics()
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()
_kube: Kube | None = None
_metrics_served = False
TestKey = tuple[str, str]  # (namespace, name)
CHILDREN = Children()
SWEEPS = SweepChildren()
_sweeping: set[tuple[str, str]] = set()  # sweeps starting single-node tests: a node event may change their plan
# A sweep's child or node change is looked at this much later: a burst of them is one look.
SWEEP_SETTLE_SECONDS = 1.0
# While new tests keep arriving (one within 0.25 s), other work waits for them, at most 1 s (workqueue.py).
QUEUE: WorkQueue[TestKey] = WorkQueue(burst_hold=0.25, burst_hold_max=1.0)
# What the operator keeps about each test (teststate.TestState), dropped when the test is deleted.
STATES = States()
_workers: list[threading.Thread] = []
_errors = RateLimit()
# Deleted tests whose children are still to delete: their last body (its uid says which children are theirs).
_gone: dict[TestKey, KubeDict] = {}
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0)
# While the backend's admission webhook refuses a test's job (its controller is down; TestState.unreachable_since),
# the operator retries this often until the unschedulable grace has passed.
BACKEND_RETRY_SECONDS = 10.0
# A job or pod change is looked at this much later, so the burst a controller writes (job Running, pod created,
# pod Running) is one reconcile and one status write, not three.
CHILD_SETTLE_SECONDS = 0.2
# A deadline is looked at this much after it: Kubernetes timestamps have whole seconds.
DEADLINE_MARGIN = timedelta(seconds=1)


def kube() -> Kube:
    global _kube
    with _locks_guard:
        if _kube is None:
            # One connection per thread that may call at once: our workers and kopf's (the delete handler).
            _kube = Kube(pool_size=SETTINGS.workers + KOPF_WORKERS)
        return _kube


def _lock_for(namespace: str, name: str) -> threading.Lock:
    """One reconcile at a time per test: the timer and a spec update must not race to create jobs."""
    with _locks_guard:
        return _locks.setdefault((namespace, name), threading.Lock())


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def _timestamp(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def _rerun(body: KubeDict) -> str | None:
    return runs.rerun_value(((body.get("metadata") or {}).get("annotations") or {}).get(RERUN_ANNOTATION))


def _more_runs(body: KubeDict) -> bool:
    """A finished test may still start runs: a rerun value it has not run for, or a schedule (its next slot)."""
    current = runs.current_run(body.get("status"), (body.get("metadata") or {}).get("generation") or 1)
    return bool((body.get("spec") or {}).get("schedule")) or current is None or current.rerun != _rerun(body)


# --------------------------------------------------------------------------- kopf entry points


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _metrics_served
    configure_kopf(settings)
    if SETTINGS.metrics_port and not _metrics_served:
        METRICS.serve(SETTINGS.metrics_port)
        _metrics_served = True
        log.info("serving /metrics on port %d", SETTINGS.metrics_port)
    if not _workers:
        _warm_up()
        _workers.extend(start_workers(QUEUE, _work, SETTINGS.workers, "reconcile"))


def _warm_up() -> None:
    """Load the client's lazily imported API modules and open a connection per worker now, not in the first
    tests' time."""
    try:
        kube().backend_problem("PyTorchJob")
        kube().open_connections(SETTINGS.workers)
    except Exception as e:  # the first reconcile will say what is wrong, in its own rate-limited line
        log.debug("warm-up call failed: %s", describe_error(e))


@kopf.on.cleanup()
def cleanup(**_: Any) -> None:
    QUEUE.close()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_test_event(type: str | None, body: kopf.Body, namespace: str, name: str, logger: logging.Logger,
                        **_: Any) -> None:
    """Any change of a test (or the first sight of it): reconcile it, unless its run is finished."""
    key = (namespace, name)
    label = manifests.test_label_value(_shell(namespace, name, None))
    _sweep_child_changed(type, body)
    if type == "DELETED":
        CHILDREN.forget_test(namespace, label)
        SWEEPS.forget(namespace, label)
        _sweeping.discard(key)
        QUEUE.forget(key)
        STATES.drop(key)
        METRICS.forget(namespace, name)
        _gone[key] = copy.deepcopy(dict(body))
        QUEUE.add(key)  # its children: see _delete_children
        return
    CHILDREN.know_test(namespace, label, name)
    state = STATES.get(key)
    state.logger, state.context = logger, contextvars.copy_context()
    seen, state.seen = state.seen, _fingerprint(body)
    version = body.get("metadata", {}).get("resourceVersion")
    if version == state.own_write:
        log.debug("%s/%s: event %s skipped: the echo of our own status write", namespace, name, version)
        return  # nothing new to look at
    if seen == state.seen:
        log.debug("%s/%s: event %s skipped: nothing a run depends on changed", namespace, name, version)
        return  # only kopf's finalizer or annotations changed
    if is_finished(body) and not body.get("metadata", {}).get("deletionTimestamp") and not _more_runs(body):
        log.debug("%s/%s: event %s skipped: the run has its verdict", namespace, name, version)
        _refresh_metrics(namespace, name, dict(body.get("status") or {}))  # e.g. after a restart
        node_lifecycle.restore_from_test(dict(body), METRICS)
        QUEUE.forget(key)
        return
    urgent = _awaits_run(body)
    state.fresh = copy.deepcopy(dict(body)) if urgent else None
    QUEUE.add(key, urgent=urgent)


def _awaits_run(body: kopf.Body) -> bool:
    """A run is due whose job is still to be created (queued first): a new generation, or a rerun asked for
    after the last run ended (a schedule slot comes by the clock, not by an event)."""
    generation = (body.get("metadata") or {}).get("generation") or 1
    current = runs.current_run(body.get("status"), generation)
    return runs.due(current, is_finished(body), generation, _rerun(body), None, None, _now()) is not None


def _watch_jobs(backend: BackendSpec) -> None:
    """One watch per backend in the table, on its jobs that carry a test's label."""

    async def on_job_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        _child_changed(backend.kind, type, body)

    kopf.on.event(backend.group, backend.version, backend.plural, id=f"on_{backend.kind.lower()}_event",
                  labels={manifests.LABEL_TEST: kopf.PRESENT})(on_job_event)


for _backend in BACKENDS.values():
    _watch_jobs(_backend)


@kopf.on.event("", "v1", "nodes")
async def on_node_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    """Sweeps test the nodes that match: a node joining or cordoned changes what they start next."""
    SWEEPS.node_event(type, dict(body))
    node_lifecycle.node_seen(type, dict(body), METRICS)  # the last-pass gauge, restored from the node after a restart
    for key in list(_sweeping):
        QUEUE.add_after(key, SWEEP_SETTLE_SECONDS)


def _sweep_child_changed(event_type: str | None, body: kopf.Body) -> None:
    """A sweep's child test changed: remember its phase and wake its parent."""
    child = sweep.child_of(body, body.get("status"))
    if child is None:
        return
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    SWEEPS.child_event(event_type, meta.get("namespace", ""), labels[sweep.LABEL_SWEEP],
                       labels.get(sweep.LABEL_SWEEP_RUN, ""), child)
    parent = next((o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == KIND), None)
    if parent:
        QUEUE.add_after((meta.get("namespace", ""), parent), SWEEP_SETTLE_SECONDS)


@kopf.on.event("", "v1", "pods", labels={manifests.LABEL_TEST: kopf.PRESENT})
async def on_pod_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    _child_changed("Pod", type, body)


@kopf.on.event("", "v1", "configmaps",
               labels={manifests.LABEL_TEST: kopf.PRESENT, manifests.LABEL_ROLE: evidence_hooks.EVIDENCE_ROLE})
async def on_evidence_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    """Rank 0 delivers the report into the run's evidence ConfigMaps, the status part last: wake its test."""
    _child_changed("ConfigMap", type, body)


def _fingerprint(body: kopf.Body) -> str:
    """What a reconcile depends on: the inputs others change (_inputs) and the status.

    kopf's own bookkeeping (its finalizer, its last-handled annotation) is left
    out: the events it causes are not worth a reconcile each.
    """
    return json.dumps([*_inputs(body), body.get("status")], sort_keys=True, default=str)


def _inputs(obj: KubeDict) -> list[Any]:
    """What others may change under a reconcile: the spec (by generation), deletion, labels, annotations, report."""
    meta = obj.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if "kopf" not in k and "last-handled" not in k}
    return json.loads(json.dumps([meta.get("generation"), meta.get("deletionTimestamp"), meta.get("labels"),
                                  annotations, (obj.get("status") or {}).get("report")], default=str))


def _child_changed(kind: str, event_type: str | None, body: kopf.Body) -> None:
    """Remember what the watch says and wake the test it belongs to."""
    obj = dict(body)
    if kind == "Pod":
        CHILDREN.pod_event(event_type, obj)
    elif kind == "ConfigMap":
        CHILDREN.evidence_event(event_type, obj)
    else:
        CHILDREN.job_event(kind, event_type, obj)
    owner = CHILDREN.owner(obj)
    if owner is not None:
        QUEUE.add_after(owner, CHILD_SETTLE_SECONDS)


def _work(key: TestKey) -> None:
    """One reconcile of a queued test, in the context of its last kopf event (for kopf's event posting)."""
    state = STATES.peek(key)
    logger, context = (state.logger or log, state.context) if state else (log, None)
    if context is None:
        reconcile_safely(key[0], key[1], logger)
    else:
        context.copy().run(reconcile_safely, key[0], key[1], logger)


def _delete_children(k: Kube, body: KubeDict) -> None:
    """Delete what a deleted test owned: its jobs, RBAC, evidence ConfigMaps and a sweep's child tests.

    The operator keeps no finalizer on a test (no request of a burst of creations goes to one, and a test
    never hangs in Terminating once the operator is gone): every child carries an ownerReference to its test,
    so the cluster's garbage collector deletes them too; this makes it at once. Only objects owned by the
    deleted test's uid go: a test created again under the same name keeps its own.
    """
    meta = body.get("metadata") or {}
    namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid")
    if not uid:
        return
    shell = _shell(namespace, name, meta.get("generation"))
    selector = f"{manifests.LABEL_TEST}={manifests.test_label_value(shell)}"
    for backend in BACKENDS.values():
        for job in k.list_jobs(backend.kind, namespace, selector):  # type: ignore[arg-type]
            if manifests.owned_by(job, uid):
                k.delete_job(backend.kind, namespace, job["metadata"]["name"], owner_uid=uid)  # type: ignore[arg-type]
    for obj in manifests.build_rbac(shell):
        _delete_owned(k, obj["kind"], namespace, obj["metadata"]["name"], uid)
    evidence = k.list_configmaps(namespace, f"{selector},{manifests.LABEL_ROLE}={evidence_hooks.EVIDENCE_ROLE}")
    for cm_name in sorted({*(cm["metadata"]["name"] for cm in evidence), *evidence_hooks.names_of(body)}):
        _delete_owned(k, "ConfigMap", namespace, cm_name, uid)
    if (body.get("spec") or {}).get("sweep"):
        for child in k.list_tests(namespace, f"{sweep.LABEL_SWEEP}={manifests.test_label_value(shell)}"):
            if manifests.owned_by(child, uid):
                k.delete_test(namespace, child["metadata"]["name"])


def _delete_owned(k: Kube, kind: str, namespace: str, name: str, uid: str) -> None:
    """Delete a child of the deleted test by name: if that test owns it, or no test does (the workload may
    have patched its evidence ConfigMap's owner away); never one a test of the same name owns now."""
    existing = k.read(kind, namespace, name)
    if existing is not None and manifests.test_owners(existing) <= {uid}:
        k.delete(kind, namespace, name)


def reconcile_safely(namespace: str, name: str, logger: logging.Logger = log) -> None:
    """Reconcile and schedule the next look; an error is counted, told in one rate-limited line, and retried.

    `logger` is kopf's per-object logger, so JSON logs carry the object they are about.
    """
    key = (namespace, name)
    with _lock_for(namespace, name):
        try:
            delay = reconcile(kube(), namespace, name, _now(), logger)
        except Exception as e:  # never a traceback per tick: one line, then a retry
            METRICS.reconcile_error(f"http_{e.status}" if isinstance(e, ApiException) else type(e).__name__)
            state = STATES.get(key)
            state.failures += 1
            retry = RETRY_SECONDS[min(state.failures, len(RETRY_SECONDS)) - 1]
            _tell_error(logger, namespace, name, e, retry)
            QUEUE.add_after(key, retry)
            return
    state = STATES.peek(key)
    failed = state.failures if state else 0
    if state is not None:
        state.failures = 0
    if failed and _errors.allow("recovered") is not None:
        logger.info(f"reconcile {namespace}/{name} works again")  # once a period, not once per test
    if delay is not None:
        QUEUE.add_after(key, min(delay, SETTINGS.resync_seconds))


def _tell_error(logger: logging.Logger, namespace: str, name: str, error: Exception, retry: float) -> None:
    """One line, no traceback, at most once per period for the same failure (an outage fails every test alike)."""
    what = describe_error(error)
    if not isinstance(error, (ApiException, OSError)) and not type(error).__module__.startswith("urllib3"):
        what = f"{what} at {_where(error)}"  # a bug, not the cluster: say where
    held = _errors.allow(what)
    if held is None:
        return
    more = f" ({held} more failures like it held back)" if held else ""
    body = (error.body or "")[:300] if isinstance(error, ApiException) and isinstance(error.body, str) else ""
    logger.warning(f"reconcile {namespace}/{name} failed: {what}{': ' + body if body else ''}; "
                   f"retrying in {retry:g}s{more}")


def _where(error: BaseException) -> str:
    """file:line of the innermost frame: enough to find a bug without a traceback per tick."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f"{tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb else "?"


# --------------------------------------------------------------------------- reconcile


def _shell(namespace: str, name: str, generation: int | None) -> AcceptanceTest:
    """A test with the default spec: enough to name the children when the real spec is invalid or gone."""
    return AcceptanceTest(metadata=ObjectMeta(name=name, namespace=namespace, generation=generation))


def _conditions(status: KubeDict) -> list[Condition]:
    out = []
    for raw in status.get("conditions") or []:
        try:
            out.append(Condition.model_validate(raw))
        except ValidationError:
            continue
    return out


def _effective(test: AcceptanceTest) -> AcceptanceTest:
    """The test as the builders should see it: an unset image is the one the operator is configured with now."""
    return manifests.resolve_image(test, SETTINGS.default_image)


def reconcile(k: Kube, namespace: str, name: str, now: datetime, logger: logging.Logger = log) -> float | None:
    """Bring the test's run one step on; the seconds until the clock alone could change it (None: nothing ahead)."""
    key = (namespace, name)
    if key in _gone:
        _delete_children(k, _gone[key])
        _gone.pop(key, None)
        if STATES.peek(key) is None:  # no test of that name seen since
            with _locks_guard:  # the queue never gives a key to two workers: this lock is not needed any more
                _locks.pop(key, None)
            return None
    state = STATES.peek(key)
    fresh = state.fresh if state else None
    if state is not None:
        state.fresh = None
    obj = fresh or k.get_test(namespace, name)
    if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return
    status = obj.get("status") or {}
    generation = obj["metadata"].get("generation") or 1
    test: AcceptanceTest | None = None
    try:
        test = _effective(parse_test(obj))
        lines = policy_problems(test, SETTINGS)
    except ValidationError as e:
        lines = manifests.validation_messages(e, {"spec": obj.get("spec") or {}})
    schedule = test.spec.schedule if test is not None else None
    current = runs.current_run(status, generation)
    due = runs.due(current, is_finished(obj), generation, _rerun(obj), schedule,
                   parse_time(status.get("startTime")), now)
    run = due or current
    if run is None or (due is None and is_finished(obj)):
        _refresh_metrics(namespace, name, status)
        node_lifecycle.restore_from_test(obj, METRICS)
        return runs.seconds_to_next_slot(schedule, now)
    if lines or test is None:
        shell = runs.with_run(_shell(namespace, name, generation), run)
        _stop_other_runs(k, shell, generation)
        _conclude(k, obj, shell, RunState("Failed", INVALID_SPEC, manifests.problems_text(lines)
                  + " (fix the spec and apply it again)"), now=now, logger=logger)
        return _after_run(obj, shell)

    test = runs.with_run(test, run)
    if test.spec.sweep:
        return _sweep_step(k, obj, test, due is not None, now, logger)
    if due is not None or (status.get("job") or {}).get("name") != manifests.job_name(test):
        retry = _start_run(k, obj, test, now, logger)
        # The status write's echo is our own and wakes nothing; the delivery of the report has its own event (the
        # evidence ConfigMap's watch), as has the job's end.
        return retry if retry is not None else float(test.spec.timeout_seconds)
    return _follow_run(k, obj, test, now, logger)


def _sweep_step(k: Kube, obj: KubeDict, test: AcceptanceTest, starting: bool, now: datetime,
                logger: logging.Logger) -> float | None:
    """One step of a sweep run: start the single-node tests (or the inter-node one) its plan asks for, tell."""
    namespace, name, key = test.metadata.namespace, test.metadata.name, (test.metadata.namespace, test.metadata.name)
    run, parent = runs.run_of(test), manifests.test_label_value(test)
    status = obj.get("status") or {}
    start = now if starting else parse_time(status.get("startTime")) or now
    if starting:
        stopped = _stop_other_sweeps(k, test, parent, run.id)
        SWEEPS.set_leaving(namespace, parent, run.id, stopped)
        kopf.info(obj, reason="RunStarted", message=f"run {run.id} ({_started_by(run)}): sweep over the nodes "
                  "matching placement.nodeSelector" + (f"; deleted {len(stopped)} tests of earlier runs" if stopped
                                                       else ""))
    if not SWEEPS.primed(namespace, parent, run.id):
        listed = k.list_tests(namespace, f"{sweep.LABEL_SWEEP}={parent},{sweep.LABEL_SWEEP_RUN}={run.id}")
        SWEEPS.prime(namespace, parent, run.id, [c for o in listed if (c := sweep.child_of(o, o.get("status")))])
    if not SWEEPS.nodes_primed:
        SWEEPS.prime_nodes(k.list_nodes())
    selector = test.spec.placement.node_selector
    schedulable, cordoned = sweep.matching(SWEEPS.nodes(), selector)
    present = {n["metadata"]["name"] for n in SWEEPS.nodes()}
    children, limit = SWEEPS.children(namespace, parent, run.id), test.spec.max_concurrent
    plan = sweep.plan(children, schedulable, cordoned, limit, present, SWEEPS.busy(namespace, parent, run.id))
    if test.spec.skip_busy_nodes and sweep.plan(children, schedulable, cordoned, limit, present).start:
        # A slot is free: which nodes' GPUs do other pods use now (one LIST)? Those are skipped (spec.skipBusyNodes).
        SWEEPS.set_busy(namespace, parent, run.id,
                        sweep.busy_nodes(k.list_active_pods(), SWEEPS.leaving(namespace, parent, run.id)))
        plan = sweep.plan(children, schedulable, cordoned, limit, present, SWEEPS.busy(namespace, parent, run.id))
    for node in plan.start:
        _create_sweep_child(k, obj, test, parent, [node], node)
    if plan.inter_node:
        _create_sweep_child(k, obj, test, parent, plan.inter_node, sweep.INTER_NODE,
                            sweep.hostnames_of(SWEEPS.nodes()))
    if plan.finished:
        _sweeping.discard(key)
        state, summary = sweep.verdict(SWEEPS.children(namespace, parent, run.id), plan.status, run.id, parent,
                                       selector, plan.skipped)
        _conclude(k, obj, test, state, now=now, summary=summary, sweep_status=plan.status, logger=logger)
        return _after_run(obj, test)
    (_sweeping.add if plan.status.stage == "nodes" else _sweeping.discard)(key)
    _write_status(k, obj, RunState("Running", "Sweeping", plan.status.progress), test, start_time=start,
                  completion_time=None, summary=None, now=now, sweep_status=plan.status)
    METRICS.set_phase(namespace, name, "Running")
    return SETTINGS.resync_seconds


def _create_sweep_child(k: Kube, parent_obj: KubeDict, test: AcceptanceTest, parent: str, nodes: list[str],
                        node: str, hostnames: dict[str, str] | None = None) -> None:
    """Create a child test; one of that name that is not this sweep's (a user's) is told and its node skipped."""
    run_id = runs.run_of(test).id
    obj = sweep.child(test, run_id, parent, nodes, node, hostnames)
    existing, created = k.create(obj)
    taken = not created and not sweep.is_child(existing, parent, run_id)
    child = sweep.Child(obj["metadata"]["name"], node, phase="Failed" if taken and node == sweep.INTER_NODE else None,
                        name_taken=taken)
    SWEEPS.child_event(None, test.metadata.namespace, parent, run_id, child)
    if taken:
        kopf.warn(parent_obj, reason="SweepNameTaken", message=(
            f"a test named {child.name} exists that this sweep did not create: "
            + ("the inter-node stage cannot run" if node == sweep.INTER_NODE else f"node {node} is skipped")
            + "; rename or delete that test, then run the sweep again"))


def _stop_other_sweeps(k: Kube, test: AcceptanceTest, parent: str, run_id: str) -> list[str]:
    """A new sweep run replaces the tests of earlier ones (their numbers stay in status.history); the test label
    values of those deleted (their pods are on their way out: not busy nodes)."""
    deleted = []
    for child in k.list_tests(test.metadata.namespace, f"{sweep.LABEL_SWEEP}={parent}"):
        name = child["metadata"]["name"]
        if (child["metadata"].get("labels") or {}).get(sweep.LABEL_SWEEP_RUN) != run_id and \
                k.delete_test(test.metadata.namespace, name):
            deleted.append(manifests.test_label_value(_shell(test.metadata.namespace, name, None)))
    return deleted


def _after_run(obj: KubeDict, test: AcceptanceTest) -> float | None:
    """After a run ended: look again at once if another may be due (a rerun asked for meanwhile, a schedule)."""
    pending = test.spec.schedule or _rerun(obj) != runs.run_of(test).rerun
    return 0.0 if pending else None


def _selector(test: AcceptanceTest) -> str:
    labels = manifests.test_labels(test)
    return ",".join(f"{key}={labels[key]}" for key in (manifests.LABEL_TEST, manifests.LABEL_GENERATION))


def _stop_other_runs(k: Kube, test: AcceptanceTest, generation: int) -> list[str]:
    """Delete the jobs of earlier generations: a changed spec stops the old run.

    Generation 1 has no earlier run (a deleted test's jobs went with it: the
    finalizer waits for on_delete), so a new test costs no LIST.
    """
    if generation <= 1:
        return []
    selector = f"{manifests.LABEL_TEST}={manifests.test_label_value(test)}"
    stopped = []
    for backend in BACKENDS:
        for job in k.list_jobs(backend, test.metadata.namespace, selector):  # type: ignore[arg-type]
            labels = job["metadata"].get("labels") or {}
            if labels.get(manifests.LABEL_GENERATION) != str(generation):
                k.delete_job(backend, test.metadata.namespace, job["metadata"]["name"])  # type: ignore[arg-type]
                stopped.append(f"{backend} {job['metadata']['name']}")
    return stopped


def _start_run(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime,
               logger: logging.Logger) -> float | None:
    """Create the run's children and record that it started, in two steps when other new tests wait; the seconds
    until the next try when the job could not be created yet (its backend's webhook did not answer).

    Alone, in one step: the children in the builders' order (identity and RBAC
    first, the job last) and the status. While other new tests wait in the
    urgent lane, first only what the pods need (the ServiceAccount, the Job
    backend's headless Service) and the job; the Role, RoleBinding and evidence ConfigMaps (used only when the
    workload reports, minutes later) and the status come in a second step at
    the back of the queue: a burst of creations gets every job first. Every
    create is idempotent (an existing child is adopted), so a restart between
    the steps only redoes them.
    """
    namespace, name = test.metadata.namespace, test.metadata.name
    key, generation, run_id = (namespace, name), manifests.generation_of(test), runs.run_of(test).id
    kept = STATES.get(key)
    begun = kept.begun
    first_step = begun is None or begun[0] != run_id
    if first_step:
        stopped = _stop_other_runs(k, test, generation)
        problem = k.backend_problem(test.spec.backend)
        if problem:
            _conclude(k, obj, test, RunState("Failed", BACKEND_NOT_INSTALLED,
                                             f"{problem}; then delete and re-create the AcceptanceTest, "
                                             "or change its spec (a new generation is a new run)"), now=now,
                      logger=logger)
            return
    try:
        children = build_children(test, init_image=SETTINGS.init_image)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        # The models should make the builders total; if one is not, the run ends once instead of every tick.
        _conclude(k, obj, test, RunState("Failed", INVALID_SPEC, f"spec: cannot build the job from it "
                                         f"({type(e).__name__}: {e}); fix the spec and apply it again"),
                  now=now, logger=logger)
        return
    # What the pods need to start and find each other: their identity, the headless Service (Job backend), the job.
    first = [c for c in children if c["kind"] in ("ServiceAccount", "Service") or c["kind"] in BACKENDS]
    if first_step and QUEUE.has_urgent():
        created = _create_children(k, obj, test, first, now, logger)
        if created is None:
            return _backend_retry(key, now)
        kept.begun = (run_id, *created, stopped)
        METRICS.set_phase(namespace, name, "Pending")  # the job exists: the run is pending, status or not yet
        METRICS.set_headline(namespace, name, None)
        QUEUE.add(key)  # the rest after the jobs of the other new tests
        return
    if first_step:  # one step, in the builders' order (the job last, its status right after it)
        created = _create_children(k, obj, test, children, now, logger)
        if created is None:
            return _backend_retry(key, now)
        start, adopted = created
    else:
        _, start, adopted, stopped = begun  # type: ignore[misc]
        if _create_children(k, obj, test, [c for c in children if c not in first], now, logger,
                            job_created=True) is None:
            return None
        kept.begun = None
    job_name = manifests.job_name(test)
    state = RunState("Pending", "JobCreated", f"{test.spec.backend} {job_name} created; waiting for its pods")
    _write_status(k, obj, state, test, start_time=start, completion_time=None, summary=None, now=now)
    run = runs.run_of(test)
    message = (f"run {run.id} ({_started_by(run)}): {test.spec.backend} {job_name} "
               + ("adopted" if adopted else "created"))
    if stopped:
        message += f"; stopped the previous run ({', '.join(stopped)})"
    kopf.info(obj, reason="RunStarted", message=message)
    METRICS.set_phase(namespace, name, "Pending")
    METRICS.set_headline(namespace, name, None)
    logger.info("%s/%s: %s", namespace, name, message)


def _create_children(k: Kube, obj: KubeDict, test: AcceptanceTest, children: list[KubeDict], now: datetime,
                     logger: logging.Logger, job_created: bool = False) -> tuple[datetime, bool] | None:
    """Create (or adopt) `children` in order: (the run's start, whether its job was adopted); None if it ended."""
    start, adopted = now, False
    for child in children:
        try:
            created_obj, created = _create_own(k, child, test.metadata.uid)
        except ApiException as e:
            down = _webhook_down(e) if child["kind"] in BACKENDS else None
            if down is not None:
                _backend_unreachable(k, obj, test, child, down, now, logger)
                return None
            if e.status not in (400, 422):
                raise
            # The same object would be refused on every retry: end the run with the API server's words.
            _conclude(k, obj, test, RunState("Failed", INVALID_SPEC, (
                f"the API server rejected {child['kind']} {child['metadata']['name']}: {_api_message(e)} "
                "(fix the spec and apply it again)")), now=now, stop_job=job_created, logger=logger)
            return None
        if not created:
            evidence_hooks.renew_adopted(k, child, created_obj)
        if child["kind"] in BACKENDS:
            STATES.get((test.metadata.namespace, test.metadata.name)).unreachable_since = None
        if not created and child["kind"] in BACKENDS:
            # The job exists already (a restart between creating it and recording it): its run started then.
            # (An existing ServiceAccount, Role or RoleBinding is normal: every generation shares them.)
            adopted = True
            start = parse_time(created_obj.get("metadata", {}).get("creationTimestamp")) or now
    return start, adopted


def _create_own(k: Kube, child: KubeDict, uid: str | None, attempts: int = 3) -> tuple[KubeDict, bool]:
    """Create a child, or adopt the existing one unless another test owns it.

    A test deleted and created again under its name before its children were deleted (the operator was
    down) leaves children of the same names owned by the old uid: adopting them would follow the old run,
    and the garbage collector deletes them anyway. They are deleted and created anew.
    """
    kind, namespace, name = child["kind"], child["metadata"]["namespace"], child["metadata"]["name"]
    for attempt in range(attempts):
        obj, created = k.create(child)
        if created or not uid or manifests.test_owners(obj) <= {uid}:
            return obj, created
        if attempt == 0:
            log.info("%s: %s %s belonged to an earlier test of this name; deleted to create this test's",
                     namespace, kind, name)
        k.delete(kind, namespace, name)
        time.sleep(0.2 * (attempt + 1))
    raise RuntimeError(f"{kind} {name} of an earlier test of this name is still being deleted; retrying")


def _webhook_down(e: ApiException) -> str | None:
    """The API server's words when it refused an object because an admission webhook could not be called (the
    webhook's server, the backend's controller, is down: failurePolicy Fail), else None."""
    if e.status != 500:
        return None
    words = _api_message(e)
    return words if "failed calling webhook" in words else None


def _backend_unreachable(k: Kube, obj: KubeDict, test: AcceptanceTest, job: KubeDict, words: str, now: datetime,
                         logger: logging.Logger) -> None:
    """The job was refused because its backend's webhook did not answer: Pending with BackendNotRunning while the
    operator retries (the controller may be restarting), Failed once the unschedulable grace has passed."""
    key = (test.metadata.namespace, test.metadata.name)
    kept = STATES.get(key)
    since = kept.unreachable_since = kept.unreachable_since or now
    grace = SETTINGS.unschedulable_grace_seconds
    text = (f"the API server refused {job['kind']} {job['metadata']['name']}: {words} -> "
            f"{backend_of(job['kind']).controller} serves that admission webhook and is not running or not "
            "reachable: check its Deployment, its webhook Service and its logs")
    if (now - since).total_seconds() < grace:
        state = RunState("Pending", BACKEND_NOT_RUNNING, f"{text}; retrying for up to {grace:g}s", no_job=True)
        _write_status(k, obj, state, test, start_time=None, completion_time=None, summary=None, now=now)
        return
    kept.unreachable_since = None
    waited = int((now - since).total_seconds())
    message = f"{text}; refused for {waited}s; once it runs, run the test again (the rerun annotation)"
    _conclude(k, obj, test, RunState("Failed", BACKEND_NOT_RUNNING, message, no_job=True), now=now, logger=logger)


def _backend_retry(key: TestKey, now: datetime) -> float | None:
    """When to try creating the job again: soon (at the latest when the grace ends) while the backend's webhook
    refuses it; None when there is nothing to retry."""
    state = STATES.peek(key)
    since = state.unreachable_since if state else None
    if since is None:
        return None
    left = SETTINGS.unschedulable_grace_seconds - (now - since).total_seconds()
    return max(1.0, min(BACKEND_RETRY_SECONDS, left))


def _started_by(run: RunRef) -> str:
    if run.trigger == "rerun":
        return f"rerun {run.rerun!r}"
    if run.trigger == "schedule" and run.scheduled_for is not None:
        return f"schedule slot {_timestamp(run.scheduled_for)}"
    return f"generation {run.generation}"


def _api_message(e: ApiException) -> str:
    """The message of the Status object an API error carries (within a condition's share), else its HTTP reason."""
    try:
        return manifests.problems_text([str(json.loads(e.body)["message"])])
    except (TypeError, ValueError, KeyError):
        return f"HTTP {e.status} {e.reason}"


def _follow_run(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime,
                logger: logging.Logger) -> float | None:
    """Judge the run from the watched job and pods; a verdict is only ever drawn from a fresh read."""
    status = obj.get("status") or {}
    start_time = parse_time(status.get("startTime"))
    try:
        observation, delivered = _observe(k, test, status, fresh=False)
        outcome = assess(observation, now, _timing())
        if outcome.state.terminal and (outcome.report is None or outcome.state.reason == REPORT_REJECTED):
            # The job and pods decide, and the watches may lag: confirm with the API server before the run ends.
            # (A report decides with the pods' nodes only: those are read afresh before it is rejected.)
            observation, delivered = _observe(k, test, status, fresh=True, judged=observation.judged)
            outcome = assess(observation, now, _timing())
    except ApiException as e:
        # Never stuck: past the deadline, a run the operator cannot even look at ends as a Timeout.
        if start_time is None or (now - start_time).total_seconds() < test.spec.timeout_seconds:
            raise
        job_text = f"{test.spec.backend} {manifests.job_name(test)}"
        _conclude(k, obj, test, RunState("Failed", TIMEOUT, (
            f"no verdict within spec.timeoutSeconds={test.spec.timeout_seconds}, and the operator cannot read "
            f"{job_text} or its pods (HTTP {e.status} {e.reason}): check the operator's RBAC")),
            now=now, stop_job=True, logger=logger)
        return _after_run(obj, test)
    namespace, name = test.metadata.namespace, test.metadata.name
    if outcome.state.terminal:
        _conclude(k, obj, test, outcome.state, now=now, summary=outcome.summary, report=outcome.report,
                  stop_job=outcome.stop_job, logger=logger, report_part=evidence_hooks.status_part(test, delivered))
        return _after_run(obj, test)
    previous = status.get("phase")
    _write_status(k, obj, outcome.state, test, start_time=parse_time(status.get("startTime")),
                  completion_time=None, summary=None, now=now)
    if previous != outcome.state.phase:
        kopf.info(obj, reason=outcome.state.phase, message=outcome.state.message)
    METRICS.set_phase(namespace, name, outcome.state.phase)
    deadline = next_look(observation, now, _timing())
    return (deadline + DEADLINE_MARGIN - now).total_seconds() if deadline else SETTINGS.resync_seconds


def _timing() -> Timing:
    return Timing(SETTINGS.unschedulable_grace_seconds, SETTINGS.report_grace_seconds, SETTINGS.node_lost_grace_seconds)


def _observe(k: Kube, test: AcceptanceTest, status: KubeDict, *, fresh: bool,
             judged: Rejudged | None = None) -> tuple[Observation, Any]:
    """The run as the watches last showed it (fresh=False), or as the API server has it now (fresh=True), and
    the status part rank 0 delivered (None: not yet).

    A job the watches have not shown yet (just created, or the operator may not
    watch jobs) is read from the API server either way. `judged`: the report as
    an earlier look at the same delivery judged it; only its fit to the run's pods
    is judged again (a large report's evidence is read once per look at most).
    """
    namespace, backend, job_name = test.metadata.namespace, test.spec.backend, manifests.job_name(test)
    job = None if fresh else CHILDREN.job(namespace, backend, job_name)
    if job is None:
        job = k.get_job(backend, namespace, job_name)
    run_id, label = runs.run_of(test).id, manifests.test_label_value(test)
    if fresh:
        pods = [p for p in k.list_pods(namespace, _selector(test)) if manifests.run_of_child(p) == run_id]
    else:
        pods = CHILDREN.pods(namespace, label, run_id)
    pods = CHILDREN.with_gone(namespace, label, run_id, pods)  # a failed pod deleted since: where it failed
    state = STATES.peek((namespace, test.metadata.name))
    logger = state.logger if state and state.logger else log
    events = observe.run_events(k, namespace, job, pods, test.spec.nodes, _now(), _timing().unschedulable_grace_seconds,
                                METRICS, logger)
    bound = CHILDREN.bound_nodes(namespace, manifests.test_label_value(test), runs.run_of(test).id)
    facts = RunFacts(manifests.build_workload_config(test), test.metadata.uid, pod_nodes(pods) | bound)
    delivered = _delivered(k, test, job, status, fresh)
    if judged is not None:
        raw_report, judged = None, Rejudged(judged.report, run_problems(judged.report, facts))
    else:
        raw_report, judged = evidence_hooks.judged_report(k, test, delivered, facts)
    return Observation(
        generation=manifests.generation_of(test),
        job_kind=backend,
        job_name=job_name,
        timeout_seconds=test.spec.timeout_seconds,
        gpus_per_node=test.spec.gpus_per_node,
        gpu_pods=test.spec.nodes,
        start_time=parse_time(status.get("startTime")),
        raw_report=raw_report,
        judged=judged,
        job=job,
        pods=pods,
        events=events,
        enabled_checks=tuple(c for c in CHECK_NAMES if getattr(test.spec.checks, c).enabled),
        run=facts,
        nodes=observe.unready_nodes(k, pods, METRICS, logger),
        run_id=runs.run_of(test).id,
        baseline=runs.baseline(status.get("history") or []) if test.spec.baseline == "lastPassed" else None,
        regression_tolerance=test.spec.regression_tolerance,
    ), delivered


def _delivered(k: Kube, test: AcceptanceTest, job: KubeDict | None, status: KubeDict, fresh: bool) -> Any:
    """The status part rank 0 delivered for this run: from the job-wide evidence ConfigMap (as the watch last
    showed it, or read now when `fresh`); None while it is not there, i.e. while the evidence is not complete.

    A run whose job an earlier operator version created (without manifests.LABEL_DELIVERY) has a workload that
    patches status.report: that report is read from there, through this release only (docs/install.md).
    """
    namespace, name = test.metadata.namespace, manifests.evidence_names(test)[0]
    data = None if fresh else CHILDREN.evidence_data(namespace, name)
    if data is None:  # to be confirmed, or not shown by the watch (yet)
        data = (k.read("ConfigMap", namespace, name) or {}).get("data")
    delivered = evidence_hooks.delivered(data)
    if delivered is None and job is not None and not manifests.delivers_evidence(job):
        delivered = status.get("report")
        told, run_id = STATES.get((namespace, test.metadata.name)).legacy_told, runs.run_of(test).id
        if delivered and run_id not in told:
            told.add(run_id)
            log.info("%s/%s: run %s was started by an earlier operator version (its job has no %s label): its "
                     "report is read from status.report, as that version's workload writes it (supported through "
                     "this release)", namespace, test.metadata.name, run_id, manifests.LABEL_DELIVERY)
    return delivered


def _cleanup(k: Kube, obj: KubeDict, kind: str, name: str, logger: logging.Logger) -> None:
    """Delete a child; a refusal is told (event, log) but does not keep the verdict from being written."""
    namespace = obj["metadata"]["namespace"]
    try:
        k.delete(kind, namespace, name)
    except ApiException as e:
        METRICS.reconcile_error(f"http_{e.status}")
        message = f"could not delete {kind} {name}: HTTP {e.status} {e.reason}"
        logger.warning("%s/%s: %s", namespace, obj["metadata"]["name"], message)
        kopf.warn(obj, reason="CleanupFailed", message=message)


def _conclude(
    k: Kube,
    obj: KubeDict,
    test: AcceptanceTest,
    state: RunState,
    *,
    now: datetime,
    summary: Summary | None = None,
    report: Report | None = None,
    stop_job: bool = False,
    sweep_status: SweepStatus | None = None,
    ended: datetime | None = None,
    act_on_nodes: bool = True,
    logger: logging.Logger = log,
    report_part: KubeDict | None = None,
) -> None:
    """End the run: stop what still runs, drop the workload's write access, record the verdict, tell.

    `ended`: when the run ended, if before now; act_on_nodes=False leaves spec.onFailure alone;
    `report_part`: the run's status part as delivered, copied into status.report with the verdict.
    """
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status = obj.get("status") or {}
    if stop_job:
        _cleanup(k, obj, test.spec.backend, manifests.job_name(test), logger)
    # The workload's identity was only for writing this run's report.
    for child in manifests.build_rbac(test):
        _cleanup(k, obj, child["kind"], child["metadata"]["name"], logger)
    run = runs.run_of(test)
    recorded = runs.current_run(status, run.generation)
    start = parse_time(status.get("startTime")) if recorded is not None and recorded.id == run.id else None
    summary = summary or Summary(result="Failed" if state.phase == "Failed" else "Passed")
    end = ended or now
    entry = runs.history_entry(run, start or end, end, summary, state.reason)
    history = runs.with_entry(status.get("history") or [], entry, test.spec.history_limit)
    _write_status(k, obj, state, test, start_time=start or end, completion_time=end, summary=summary, now=now,
                  history=history, sweep_status=sweep_status, report=report_part)
    kept = STATES.peek((namespace, name))
    if kept is not None:
        kept.begun = kept.unreachable_since = None  # a run that ended between the two steps of its start

    if state.phase == "Succeeded":
        kopf.info(obj, reason=state.reason, message=state.message)
    else:
        kopf.warn(obj, reason=state.reason, message=state.message)
    logger.info("%s/%s: %s %s: %s", namespace, name, state.phase, state.reason, state.message)

    METRICS.set_phase(namespace, name, state.phase)
    METRICS.set_headline(namespace, name, summary)
    METRICS.record_run(state.phase == "Succeeded", (end - start).total_seconds() if start else None)
    if is_smoke(test.spec.profile):
        # A smoke run's verdict is not the hardware's: no node gauge, no node action (spec.onFailure and spec.onPass
        # are ignored; node_lifecycle.after_verdict says the same for itself).
        return
    if report is not None:
        METRICS.set_nodes(measured_nodes(report))
    if act_on_nodes:  # spec.onFailure / spec.onPass and the last-pass gauge (node_lifecycle.py)
        node_lifecycle.after_verdict(k, obj, test, passed=state.phase == "Succeeded", summary=summary, report=report,
                                     now=now, allowed=SETTINGS.node_actions, metrics=METRICS)


def _write_status(
    k: Kube,
    obj: KubeDict,
    state: RunState,
    test: AcceptanceTest,
    *,
    start_time: datetime | None,
    completion_time: datetime | None,
    summary: Summary | None,
    now: datetime,
    history: list[KubeDict] | None = None,
    sweep_status: SweepStatus | None = None,
    report: KubeDict | None = None,
) -> None:
    """Patch the status, in one request, only if a field changes: every field is the operator's.

    `history` replaces status.history (None: kept as it is); `report`, the run's status part as rank 0
    delivered it into the evidence, replaces status.report (None: kept as it is).
    """
    meta = obj["metadata"]
    status = obj.get("status") or {}
    generation = meta.get("generation") or 1
    if not state.before_job and not test.spec.sweep:
        job_name = manifests.job_name(test)
        job: KubeDict | None = JobRef(api_version=backend_of(test.spec.backend).api_version, kind=test.spec.backend,
                                      name=job_name).to_wire()
        job_text = f"{test.spec.backend} {job_name}"
    else:
        job, job_text = None, "the sweep's tests" if test.spec.sweep else "the job"
    state = replace(state, message=clip_message(state.message))
    conditions = conditions_for(state, job_text, _conditions(status), generation, now)
    desired: KubeDict = {
        "phase": state.phase,
        "conditions": [c.to_wire() for c in conditions],
        "observedGeneration": generation,
        "startTime": _timestamp(start_time),
        "completionTime": _timestamp(completion_time),
        "job": job,
        "run": runs.run_of(test).to_wire(),
        "summary": summary.to_wire() if summary is not None else None,
        "history": history if history is not None else status.get("history"),
        "sweep": sweep_status.to_wire() if sweep_status is not None else
        status.get("sweep") if test.spec.sweep else None,
    }
    if report is not None:
        desired["report"] = report
    if all(status.get(key) == value for key, value in desired.items()):
        return
    written = k.patch_test_status(meta["namespace"], meta["name"], desired) or {}
    version = (written.get("metadata") or {}).get("resourceVersion")
    obj["status"] = {**status, **{key: v for key, v in desired.items() if v is not None}}
    # Its echo is skipped only if nothing we read changed meanwhile (kopf may fold another event into our echo's).
    if version and _inputs(written) == _inputs(obj):
        STATES.get((meta["namespace"], meta["name"])).own_write = version



def _refresh_metrics(namespace: str, name: str, status: KubeDict) -> None:
    """After a restart, finished tests still show their phase and numbers."""
    METRICS.set_phase(namespace, name, status["phase"])
    try:
        summary = Summary.model_validate(status["summary"]) if status.get("summary") else None
    except ValidationError:
        summary = None
    METRICS.set_headline(namespace, name, summary)
