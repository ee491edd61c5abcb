"""Starting a run: stop earlier runs, create (or adopt) the run's children in order, record that it started.

In two steps while other new tests wait (the job first, then the rest), and with a grace while the backend's
admission webhook does not answer.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from acceptance_operator.building import defaults, manifests
from acceptance_operator.building.backends import BACKENDS, CUSTOM_COMPANIONS, backend_of, build_children
from acceptance_operator.judging.diagnosis import parse_time
from acceptance_operator.plumbing import crdcheck
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.reconcile import evidence_hooks
from acceptance_operator.reconcile import runtime as rt
from acceptance_operator.reconcile.runtime import api_message, started_by
from acceptance_operator.reconcile.status import conclude, write_status
from acceptance_operator.resource import runs
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.conditions import (
    BACKEND_NOT_INSTALLED,
    BACKEND_NOT_RUNNING,
    CRD_OUTDATED,
    INVALID_SPEC,
    PROFILE_UNKNOWN,
    RunState,
)

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")


def stop_other_runs(k: Kube, test: AcceptanceTest, generation: int) -> list[str]:
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


def start_run(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime,
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
    kept = rt.STATES.get(key)
    begun = kept.begun
    first_step = begun is None or begun[0] != run_id
    if first_step:
        stopped = stop_other_runs(k, test, generation)
    ready = _startable(k, obj, test, now, logger, first_step)
    if ready is None:
        return None
    test, decided = ready
    children = _built(k, obj, test, now, logger)
    if children is None:
        return None
    # What the pods need to start and find each other: their identity, the job's companions (the Job backend's
    # headless Service, the TrainJob's TrainingRuntime), the job.
    companions = backend_of(test.spec.backend).companions
    first = [c for c in children if c["kind"] in ("ServiceAccount", *companions) or c["kind"] in BACKENDS]
    if first_step and rt.QUEUE.has_urgent():
        created = create_children(k, obj, test, first, now, logger)
        if created is None:
            return backend_retry(key, now)
        kept.begun = (run_id, *created, stopped)
        rt.METRICS.set_phase(namespace, name, "Pending")  # the job exists: the run is pending, status or not yet
        rt.METRICS.set_headline(namespace, name, None)
        rt.QUEUE.add(key)  # the rest after the jobs of the other new tests
        return None
    if first_step:  # one step, in the builders' order (the job last, its status right after it)
        created = create_children(k, obj, test, children, now, logger)
        if created is None:
            return backend_retry(key, now)
        start, adopted = created
    else:
        _, start, adopted, stopped = begun  # type: ignore[misc]
        if create_children(k, obj, test, [c for c in children if c not in first], now, logger,
                            job_created=True) is None:
            return None
        kept.begun = None
    _started(k, obj, test, now, logger, start, adopted, stopped, decided)
    return None


def _startable(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime, logger: logging.Logger,
               first_step: bool) -> tuple[AcceptanceTest, list[str]] | None:
    """The test with its backend and profile decided, and what was decided; None when the run ended before anything
    was built: the installed CRD lacks this operator's fields, the profile cannot be known, or the backend is not
    installed (the first two a run's first step asks; the profile every step, as the test is rebuilt)."""
    if first_step:
        missing = crd_gap(k)
        if missing:
            conclude(k, obj, test, RunState("Failed", CRD_OUTDATED, crdcheck.outdated_message(missing)), now=now,
                     logger=logger)
            return None
    test, decided, refusal = decide_unset(k, obj, test)
    if refusal is not None:
        conclude(k, obj, test, RunState("Failed", PROFILE_UNKNOWN, refusal), now=now, logger=logger)
        return None
    if first_step:
        problem = k.backend_problem(test.spec.backend)
        if problem:
            conclude(k, obj, test, RunState("Failed", BACKEND_NOT_INSTALLED,
                                            f"{problem}; then delete and re-create the AcceptanceTest, "
                                            "or change its spec (a new generation is a new run)"), now=now,
                     logger=logger)
            return None
    return test, decided


def decide_unset(k: Kube, obj: KubeDict, test: AcceptanceTest) -> tuple[AcceptanceTest, list[str], str | None]:
    """The run's backend and profile where the stored spec leaves them unset (building/defaults.py): the test as
    it runs, what was decided (sentences for the DefaultsChosen event), and why the run cannot start (no profile
    fits the nodes' GPUs) or None. Decided again at each run's start: a cluster may gain a backend or new nodes."""
    unset = defaults.unset(obj.get("spec"))
    chosen: dict[str, str] = {}
    said: list[str] = []
    if "backend" in unset:
        backend = defaults.choose_backend(k.backend_problem)
        if backend.value is not None:
            chosen["backend"] = backend.value
        said.append(backend.why)
    if "profile" in unset:
        try:
            nodes = k.list_nodes()
        except ApiException as e:
            if e.status != 403:
                raise
            # Never stuck on a permission (a chart older than the operator): the run ends saying what to change.
            return test, said, ("spec.profile is unset and the operator may not list the nodes to read their "
                                f"{defaults.GPU_PRODUCT_LABEL} label ({api_message(e)}): set spec.profile, or grant "
                                "the operator list on nodes (the chart's ClusterRole does)")
        profile = defaults.choose_profile(test, nodes)
        if profile.value is None:
            return test, said, profile.why
        chosen["profile"] = profile.value
        said.append(profile.why)
    return defaults.with_choices(test, **chosen), said, None


def crd_gap(k: Kube) -> list[str]:
    """What the installed CRD lacks of this operator's schema (read now if not yet known: fail closed)."""
    missing = rt.CRD.missing
    return missing if missing is not None else rt.installed_crd_changed(k.read_crd(crdcheck.CRD_NAME))


def _built(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime,
           logger: logging.Logger) -> list[KubeDict] | None:
    """The run's children as the builders make them; None (the run ended InvalidSpec) if they cannot."""
    try:
        return build_children(test, init_image=rt.SETTINGS.init_image)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        # The models should make the builders total; if one is not, the run ends once instead of every tick.
        conclude(k, obj, test, RunState("Failed", INVALID_SPEC, f"spec: cannot build the job from it "
                                         f"({type(e).__name__}: {e}); fix the spec and apply it again"),
                 now=now, logger=logger)
        return None


def _started(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime, logger: logging.Logger,
             start: datetime, adopted: bool, stopped: list[str], decided: list[str]) -> None:
    """Record that the run started (status Pending, JobCreated, the backend and profile it runs as) and tell (event
    RunStarted, and DefaultsChosen for what the operator decided where the spec is silent; log, metrics)."""
    namespace, name = test.metadata.namespace, test.metadata.name
    if decided:
        said = f"run {runs.run_of(test).id}: " + "; ".join(decided)
        kopf.info(obj, reason="DefaultsChosen", message=said)
        logger.info("%s/%s: %s", namespace, name, said)
    job_name = manifests.job_name(test)
    state = RunState("Pending", "JobCreated", f"{test.spec.backend} {job_name} created; waiting for its pods")
    write_status(k, obj, state, test, start_time=start, completion_time=None, summary=None, now=now)
    run = runs.run_of(test)
    message = (f"run {run.id} ({started_by(run)}): {test.spec.backend} {job_name} "
               + ("adopted" if adopted else "created"))
    if stopped:
        message += f"; stopped the previous run ({', '.join(stopped)})"
    kopf.info(obj, reason="RunStarted", message=message)
    rt.METRICS.set_phase(namespace, name, "Pending")
    rt.METRICS.set_headline(namespace, name, None)
    logger.info("%s/%s: %s", namespace, name, message)


def create_children(k: Kube, obj: KubeDict, test: AcceptanceTest, children: list[KubeDict], now: datetime,
                     logger: logging.Logger, job_created: bool = False) -> tuple[datetime, bool] | None:
    """Create (or adopt) `children` in order: (the run's start, whether its job was adopted); None if it ended."""
    start, adopted = now, False
    for child in children:
        try:
            created_obj, created = create_own(k, child, test.metadata.uid)
        except ApiException as e:
            down = webhook_down(e) if child["kind"] in BACKENDS or child["kind"] in CUSTOM_COMPANIONS else None
            if down is not None:
                backend_unreachable(k, obj, test, child, down, now, logger)
                return None
            if e.status not in (400, 422):
                raise
            # The same object would be refused on every retry: end the run with the API server's words.
            conclude(k, obj, test, RunState("Failed", INVALID_SPEC, (
                f"the API server rejected {child['kind']} {child['metadata']['name']}: {api_message(e)} "
                "(fix the spec and apply it again)")), now=now, stop_job=job_created, logger=logger)
            return None
        if not created:
            evidence_hooks.renew_adopted(k, child, created_obj)
        if child["kind"] in BACKENDS:
            rt.STATES.get((test.metadata.namespace, test.metadata.name)).unreachable_since = None
        if not created and child["kind"] in BACKENDS:
            # The job exists already (a restart between creating it and recording it): its run started then.
            # (An existing ServiceAccount, Role or RoleBinding is normal: every generation shares them.)
            adopted = True
            start = parse_time(created_obj.get("metadata", {}).get("creationTimestamp")) or now
    return start, adopted


def create_own(k: Kube, child: KubeDict, uid: str | None, attempts: int = 3) -> tuple[KubeDict, bool]:
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


def webhook_down(e: ApiException) -> str | None:
    """The API server's words when it refused an object because an admission webhook could not be called (the
    webhook's server, the backend's controller, is down: failurePolicy Fail), else None."""
    if e.status != 500:
        return None
    words = api_message(e)
    return words if "failed calling webhook" in words else None


def backend_unreachable(k: Kube, obj: KubeDict, test: AcceptanceTest, job: KubeDict, words: str, now: datetime,
                         logger: logging.Logger) -> None:
    """The job was refused because its backend's webhook did not answer: Pending with BackendNotRunning while the
    operator retries (the controller may be restarting), Failed once the unschedulable grace has passed."""
    key = (test.metadata.namespace, test.metadata.name)
    kept = rt.STATES.get(key)
    since = kept.unreachable_since = kept.unreachable_since or now
    grace = rt.SETTINGS.unschedulable_grace_seconds
    text = (f"the API server refused {job['kind']} {job['metadata']['name']}: {words} -> "
            f"{backend_of(test.spec.backend).controller} serves that admission webhook and is not running or not "
            "reachable: check its Deployment, its webhook Service and its logs")
    if (now - since).total_seconds() < grace:
        state = RunState("Pending", BACKEND_NOT_RUNNING, f"{text}; retrying for up to {grace:g}s", no_job=True)
        write_status(k, obj, state, test, start_time=None, completion_time=None, summary=None, now=now)
        return
    kept.unreachable_since = None
    waited = int((now - since).total_seconds())
    message = f"{text}; refused for {waited}s; once it runs, run the test again (the rerun annotation)"
    conclude(k, obj, test, RunState("Failed", BACKEND_NOT_RUNNING, message, no_job=True), now=now, logger=logger)


def backend_retry(key: rt.TestKey, now: datetime) -> float | None:
    """When to try creating the job again: soon (at the latest when the grace ends) while the backend's webhook
    refuses it; None when there is nothing to retry."""
    state = rt.STATES.peek(key)
    since = state.unreachable_since if state else None
    if since is None:
        return None
    left = rt.SETTINGS.unschedulable_grace_seconds - (now - since).total_seconds()
    return max(1.0, min(rt.BACKEND_RETRY_SECONDS, left))

