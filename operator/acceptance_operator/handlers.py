"""kopf handlers: turn each AcceptanceTest into one job per generation and follow it to a verdict.

The handlers only orchestrate: they read the test, its job, pods and events,
let pure functions decide (manifests.build_children, assessment.assess,
conditions.conditions_for, verdict.summarize, node_actions.node_patch) and
write the outcome. Every entry point (create, resume, spec update, a timer
while a run is in progress) calls the same level-based reconcile, which reads
the test afresh and is safe to repeat: children are adopted when they exist,
the job name carries the generation, and a finished generation is left alone,
so an operator restart neither re-runs a finished test nor starts a second
job for a running one.

Works under `gpu-acceptance operator` and under `kopf run -m acceptance_operator.handlers`.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from typing import Any

import kopf
from acceptance_workload.report import CHECK_NAMES, Report
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from acceptance_operator import manifests
from acceptance_operator.api import (
    DEFAULT_IMAGE,
    GROUP,
    PLURAL,
    VERSION,
    AcceptanceTest,
    Condition,
    JobRef,
    ObjectMeta,
    OnFailure,
    Summary,
)
from acceptance_operator.assessment import Observation, Timing, assess
from acceptance_operator.conditions import (
    BACKEND_NOT_INSTALLED,
    BEFORE_JOB,
    INVALID_SPEC,
    TERMINAL_PHASES,
    TIMEOUT,
    RunState,
    conditions_for,
)
from acceptance_operator.diagnosis import parse_time
from acceptance_operator.kubeapi import BACKENDS, Kube
from acceptance_operator.metrics import OperatorMetrics
from acceptance_operator.node_actions import describe, node_patch
from acceptance_operator.policy import policy_problems
from acceptance_operator.settings import OperatorSettings, configure_kopf
from acceptance_operator.verdict import measured_nodes

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")

# The runner adjusts these before kopf starts; `kopf run` uses the environment as is.
SETTINGS = OperatorSettings.from_env()
METRICS = OperatorMetrics()
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()
_kube: Kube | None = None
BACKENDS_API_VERSION = {"PyTorchJob": manifests.PYTORCHJOB_API_VERSION, "MPIJob": manifests.MPIJOB_API_VERSION}
_metrics_served = False


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube()
    return _kube


def _lock_for(namespace: str, name: str) -> threading.Lock:
    """One reconcile at a time per test: the timer and a spec update must not race to create jobs."""
    with _locks_guard:
        return _locks.setdefault((namespace, name), threading.Lock())


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def _timestamp(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def is_finished(body: KubeDict) -> bool:
    """The current generation has a verdict: nothing left to do until the spec changes."""
    status = body.get("status") or {}
    generation = (body.get("metadata") or {}).get("generation")
    return status.get("observedGeneration") == generation and status.get("phase") in TERMINAL_PHASES


# --------------------------------------------------------------------------- kopf entry points


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    global _metrics_served
    configure_kopf(settings)
    if SETTINGS.metrics_port and not _metrics_served:
        METRICS.serve(SETTINGS.metrics_port)
        _metrics_served = True
        log.info("serving /metrics on port %d", SETTINGS.metrics_port)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_change(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
    reconcile_safely(namespace, name, logger)


def _in_progress(body: KubeDict, **_: Any) -> bool:
    return not is_finished(body)


@kopf.timer(GROUP, VERSION, PLURAL, interval=SETTINGS.reconcile_interval_seconds, when=_in_progress)
def follow(namespace: str, name: str, logger: logging.Logger, **_: Any) -> None:
    reconcile_safely(namespace, name, logger)


@kopf.on.delete(GROUP, VERSION, PLURAL, backoff=5)
def on_delete(namespace: str, name: str, meta: KubeDict, **_: Any) -> None:
    """Delete every child; in a real cluster ownerReferences do it too, but nothing relies on a GC running."""
    with _lock_for(namespace, name):
        k = kube()
        shell = _shell(namespace, name, meta.get("generation"))
        selector = f"{manifests.LABEL_TEST}={manifests.test_label_value(shell)}"
        for backend in BACKENDS:
            for job in k.list_jobs(backend, namespace, selector):  # type: ignore[arg-type]
                k.delete_job(backend, namespace, job["metadata"]["name"])  # type: ignore[arg-type]
        for obj in manifests.build_rbac(shell):
            k.delete(obj["kind"], namespace, obj["metadata"]["name"])
        METRICS.forget(namespace, name)
    with _locks_guard:
        _locks.pop((namespace, name), None)


def reconcile_safely(namespace: str, name: str, logger: logging.Logger = log) -> None:
    """Reconcile; an error is counted and logged, and the next timer tick tries again.

    `logger` is kopf's per-object logger, so JSON logs carry the object they are about.
    """
    with _lock_for(namespace, name):
        try:
            reconcile(kube(), namespace, name, _now(), logger)
        except ApiException as e:
            METRICS.reconcile_error(f"http_{e.status}")
            logger.warning("reconcile %s/%s: API error %s %s: %s", namespace, name, e.status, e.reason,
                        (e.body or "")[:500] if isinstance(e.body, str) else e.body)
        except Exception as e:
            METRICS.reconcile_error(type(e).__name__)
            logger.exception("reconcile %s/%s failed", namespace, name)


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
    """The test as the builders should see it: the chart's workload image replaces the built-in default."""
    if SETTINGS.default_image and test.spec.image == DEFAULT_IMAGE:
        spec = test.spec.model_copy(update={"image": SETTINGS.default_image})
        return test.model_copy(update={"spec": spec})
    return test


def parse_test(obj: KubeDict) -> AcceptanceTest:
    """Validate the stored object with the API models (raises ValidationError naming the field)."""
    meta = obj.get("metadata") or {}
    return AcceptanceTest.model_validate({
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "generation", "labels", "annotations")
                     if k in meta},
        "spec": obj.get("spec") or {},
    })


def reconcile(k: Kube, namespace: str, name: str, now: datetime, logger: logging.Logger = log) -> None:
    obj = k.get_test(namespace, name)
    if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return
    status = obj.get("status") or {}
    generation = obj["metadata"].get("generation") or 1
    if is_finished(obj):
        _refresh_metrics(namespace, name, status)
        return
    try:
        test = _effective(parse_test(obj))
        lines = policy_problems(test, SETTINGS)
    except ValidationError as e:
        lines = manifests.validation_messages(e, {"spec": obj.get("spec") or {}})
    if lines:
        shell = _shell(namespace, name, generation)
        _stop_other_runs(k, shell, generation)
        _conclude(k, obj, shell, RunState("Failed", INVALID_SPEC, manifests.problems_text(lines)
                  + " (fix the spec and apply it again)"), now=now, logger=logger)
        return

    job_name = manifests.job_name(test)
    if status.get("observedGeneration") != generation or (status.get("job") or {}).get("name") != job_name:
        _start_run(k, obj, test, now, logger)
    else:
        _follow_run(k, obj, test, now, logger)


def _selector(test: AcceptanceTest) -> str:
    labels = manifests.test_labels(test)
    return ",".join(f"{key}={labels[key]}" for key in (manifests.LABEL_TEST, manifests.LABEL_GENERATION))


def _stop_other_runs(k: Kube, test: AcceptanceTest, generation: int) -> list[str]:
    """Delete the jobs of earlier generations: a changed spec stops the old run."""
    selector = f"{manifests.LABEL_TEST}={manifests.test_label_value(test)}"
    stopped = []
    for backend in BACKENDS:
        for job in k.list_jobs(backend, test.metadata.namespace, selector):  # type: ignore[arg-type]
            labels = job["metadata"].get("labels") or {}
            if labels.get(manifests.LABEL_GENERATION) != str(generation):
                k.delete_job(backend, test.metadata.namespace, job["metadata"]["name"])  # type: ignore[arg-type]
                stopped.append(f"{backend} {job['metadata']['name']}")
    return stopped


def _start_run(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime, logger: logging.Logger) -> None:
    namespace, name = test.metadata.namespace, test.metadata.name
    generation = manifests.generation_of(test)
    stopped = _stop_other_runs(k, test, generation)
    problem = k.backend_problem(test.spec.backend)
    if problem:
        _conclude(k, obj, test, RunState("Failed", BACKEND_NOT_INSTALLED,
                                         f"{problem}; then delete and re-create the AcceptanceTest, "
                                         "or change its spec (a new generation is a new run)"), now=now,
                  logger=logger)
        return

    try:
        children = manifests.build_children(test, init_image=SETTINGS.init_image)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        # The models should make the builders total; if one is not, the run ends once instead of every tick.
        _conclude(k, obj, test, RunState("Failed", INVALID_SPEC, f"spec: cannot build the job from it "
                                         f"({type(e).__name__}: {e}); fix the spec and apply it again"),
                  now=now, logger=logger)
        return
    start, adopted = now, False
    for child in children:
        try:
            created_obj, created = k.create(child)
        except ApiException as e:
            if e.status not in (400, 422):
                raise
            # The same object would be refused on every retry: end the run with the API server's words.
            _conclude(k, obj, test, RunState("Failed", INVALID_SPEC, (
                f"the API server rejected {child['kind']} {child['metadata']['name']}: {_api_message(e)} "
                "(fix the spec and apply it again)")), now=now, logger=logger)
            return
        if not created and child["kind"] in BACKENDS:
            # The job exists already (a restart between creating it and recording it): its run started then.
            # (An existing ServiceAccount, Role or RoleBinding is normal: every generation shares them.)
            adopted = True
            start = parse_time(created_obj.get("metadata", {}).get("creationTimestamp")) or now
    job_name = manifests.job_name(test)
    state = RunState("Pending", "JobCreated", f"{test.spec.backend} {job_name} created; waiting for its pods")
    _write_status(k, obj, state, test, start_time=start, completion_time=None, summary=None, now=now)
    message = f"generation {generation}: {test.spec.backend} {job_name} " + ("adopted" if adopted else "created")
    if stopped:
        message += f"; stopped the previous run ({', '.join(stopped)})"
    kopf.info(obj, reason="RunStarted", message=message)
    METRICS.set_phase(namespace, name, "Pending")
    METRICS.set_headline(namespace, name, None)
    logger.info("%s/%s: %s", namespace, name, message)


def _api_message(e: ApiException) -> str:
    """The message of the Status object an API error carries (within a condition's share), else its HTTP reason."""
    try:
        return manifests.problems_text([str(json.loads(e.body)["message"])])
    except (TypeError, ValueError, KeyError):
        return f"HTTP {e.status} {e.reason}"


def _follow_run(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime, logger: logging.Logger) -> None:
    namespace, name = test.metadata.namespace, test.metadata.name
    status = obj.get("status") or {}
    backend, job_name = test.spec.backend, manifests.job_name(test)
    start_time = parse_time(status.get("startTime"))
    try:
        job = k.get_job(backend, namespace, job_name)
        pods = k.list_pods(namespace, _selector(test))
    except ApiException as e:
        # Never stuck: past the deadline, a run the operator cannot even look at ends as a Timeout.
        if start_time is None or (now - start_time).total_seconds() < test.spec.timeout_seconds:
            raise
        _conclude(k, obj, test, RunState("Failed", TIMEOUT, (
            f"no verdict within spec.timeoutSeconds={test.spec.timeout_seconds}, and the operator cannot read "
            f"{backend} {job_name} or its pods (HTTP {e.status} {e.reason}): check the operator's RBAC")),
            now=now, stop_job=True, logger=logger)
        return
    events = _scheduling_events(k, namespace, logger) if any(
        not (p.get("spec") or {}).get("nodeName") for p in pods) else []
    observation = Observation(
        generation=manifests.generation_of(test),
        job_kind=backend,
        job_name=job_name,
        timeout_seconds=test.spec.timeout_seconds,
        gpus_per_node=test.spec.gpus_per_node,
        start_time=start_time,
        raw_report=status.get("report"),
        job=job,
        pods=pods,
        events=events,
        enabled_checks=tuple(c for c in CHECK_NAMES if getattr(test.spec.checks, c).enabled),
    )
    timing = Timing(SETTINGS.unschedulable_grace_seconds, SETTINGS.report_grace_seconds)
    outcome = assess(observation, now, timing)
    if outcome.state.terminal:
        if outcome.report is None:
            # The report may have landed after our first read: judge it rather than the job.
            fresh = k.get_test(namespace, name)
            if fresh and (fresh.get("status") or {}).get("report") != status.get("report"):
                return  # the next tick judges the new report
        _conclude(k, obj, test, outcome.state, now=now, summary=outcome.summary, report=outcome.report,
                  stop_job=outcome.stop_job, logger=logger)
        return
    previous = status.get("phase")
    _write_status(k, obj, outcome.state, test, start_time=parse_time(status.get("startTime")),
                  completion_time=None, summary=None, now=now)
    if previous != outcome.state.phase:
        kopf.info(obj, reason=outcome.state.phase, message=outcome.state.message)
    METRICS.set_phase(namespace, name, outcome.state.phase)


def _scheduling_events(k: Kube, namespace: str, logger: logging.Logger) -> list[KubeDict]:
    """FailedScheduling events; without them (no permission) the pods' PodScheduled condition still says why."""
    try:
        return k.scheduling_events(namespace)
    except ApiException as e:
        METRICS.reconcile_error(f"http_{e.status}")
        logger.warning("cannot list events in %s (HTTP %s %s): judging scheduling from the pods alone",
                       namespace, e.status, e.reason)
        return []


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
    logger: logging.Logger = log,
) -> None:
    """End the run: stop what still runs, drop the workload's write access, record the verdict, tell."""
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status = obj.get("status") or {}
    if stop_job:
        _cleanup(k, obj, test.spec.backend, manifests.job_name(test), logger)
    # The workload's identity was only for writing this run's report.
    for child in manifests.build_rbac(test):
        _cleanup(k, obj, child["kind"], child["metadata"]["name"], logger)
    start = parse_time(status.get("startTime")) if status.get("observedGeneration") == meta.get("generation") \
        else None
    summary = summary or Summary(result="Failed" if state.phase == "Failed" else "Passed")
    _write_status(k, obj, state, test, start_time=start or now, completion_time=now, summary=summary, now=now)

    if state.phase == "Succeeded":
        kopf.info(obj, reason=state.reason, message=state.message)
    else:
        kopf.warn(obj, reason=state.reason, message=state.message)
    logger.info("%s/%s: %s %s: %s", namespace, name, state.phase, state.reason, state.message)

    METRICS.set_phase(namespace, name, state.phase)
    METRICS.set_headline(namespace, name, summary)
    METRICS.record_run(state.phase == "Succeeded", (now - start).total_seconds() if start else None)
    if report is not None:
        METRICS.set_nodes(measured_nodes(report))
        if state.phase == "Failed":
            _act_on_nodes(k, obj, test, report)


def _act_on_nodes(k: Kube, obj: KubeDict, test: AcceptanceTest, report: Report) -> None:
    action, nodes = test.spec.on_failure, report.blamed_nodes()
    if action == "none" or not nodes:
        return
    if not SETTINGS.node_actions:
        kopf.warn(obj, reason="NodeActionSkipped", message=(
            f"spec.onFailure={action}, but node actions are off in the operator (chart value "
            f"nodeActions.enabled): nodes {', '.join(nodes)} were not touched"))
        return
    done, failed = [], []
    for node in nodes:
        problem = _mark_node(k, action, node)
        if problem:
            failed.append(f"{node} ({problem})")
        else:
            done.append(node)
    if done:
        kopf.info(obj, reason="NodeActionApplied", message=f"{describe(action)}: {', '.join(done)}")
    if failed:
        kopf.warn(obj, reason="NodeActionFailed", message=f"could not {action}: {', '.join(failed)}")


def _mark_node(k: Kube, action: OnFailure, node: str, attempts: int = 3) -> str | None:
    """Apply the action to one node; None when done, else what went wrong. A taint race (409) is retried."""
    for _ in range(attempts):
        try:
            current = k.get_node(node)
            if current is None:
                return "no such node"
            patch = node_patch(action, current)
            if patch is not None:
                k.patch_node(node, patch)
            return None
        except ApiException as e:
            if e.status != 409:
                return f"HTTP {e.status} {e.reason}"
    return "the node kept changing (HTTP 409)"


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
) -> None:
    """Patch the operator-owned status fields, only if one of them changes (status.report is the workload's)."""
    meta = obj["metadata"]
    status = obj.get("status") or {}
    generation = meta.get("generation") or 1
    if state.reason not in BEFORE_JOB:
        job_name = manifests.job_name(test)
        job: KubeDict | None = JobRef(api_version=BACKENDS_API_VERSION[test.spec.backend], kind=test.spec.backend,
                                      name=job_name).to_wire()
        job_text = f"{test.spec.backend} {job_name}"
    else:
        job, job_text = None, "the job"
    conditions = conditions_for(state, job_text, _conditions(status), generation, now)
    desired: KubeDict = {
        "phase": state.phase,
        "conditions": [c.to_wire() for c in conditions],
        "observedGeneration": generation,
        "startTime": _timestamp(start_time),
        "completionTime": _timestamp(completion_time),
        "job": job,
        "summary": summary.to_wire() if summary is not None else None,
    }
    if all(status.get(key) == value for key, value in desired.items()):
        return
    k.patch_test_status(meta["namespace"], meta["name"], desired)
    obj["status"] = {**status, **{key: v for key, v in desired.items() if v is not None}}



def _refresh_metrics(namespace: str, name: str, status: KubeDict) -> None:
    """After a restart, finished tests still show their phase and numbers."""
    METRICS.set_phase(namespace, name, status["phase"])
    try:
        summary = Summary.model_validate(status["summary"]) if status.get("summary") else None
    except ValidationError:
        summary = None
    METRICS.set_headline(namespace, name, summary)
