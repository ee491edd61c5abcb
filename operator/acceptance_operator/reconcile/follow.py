"""Following a run: observe its job, pods, events and the report rank 0 delivered, and let assessment.assess
judge; a verdict is only ever drawn from a fresh read.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from acceptance_operator.building import manifests, queueing
from acceptance_operator.building.backends import backend_of, job_state
from acceptance_operator.judging.assessment import Observation, assess, next_look, pod_nodes
from acceptance_operator.judging.diagnosis import parse_time
from acceptance_operator.judging.rejudge import Rejudged, RunFacts, run_problems
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.reconcile import evidence_hooks, observe
from acceptance_operator.reconcile import runtime as rt
from acceptance_operator.reconcile.runtime import after_run, run_selector, timing
from acceptance_operator.reconcile.start import start_run
from acceptance_operator.reconcile.status import conclude, write_status
from acceptance_operator.resource import runs, soak
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.conditions import REPORT_REJECTED, TIMEOUT, RunState
from acceptance_operator.workload import CHECK_NAMES, evidence

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")


def follow_run(k: Kube, obj: KubeDict, test: AcceptanceTest, now: datetime,
                logger: logging.Logger) -> float | None:
    """Judge the run from the watched job and pods; a verdict is only ever drawn from a fresh read."""
    status = obj.get("status") or {}
    start_time = parse_time(status.get("startTime"))
    try:
        observation, delivered = observe_run(k, test, status, fresh=False)
        outcome = assess(observation, now, timing())
        if outcome.state.terminal and (outcome.report is None or outcome.state.reason == REPORT_REJECTED):
            # The job and pods decide, and the watches may lag: confirm with the API server before the run ends.
            # (A report decides with the pods' nodes only: those are read afresh before it is rejected.)
            observation, delivered = observe_run(k, test, status, fresh=True, judged=observation.judged)
            outcome = assess(observation, now, timing())
            if outcome.state.terminal and outcome.report is None and watch_behind(test, observation, now, logger):
                return rt.WATCH_CATCH_UP_SECONDS
    except ApiException as e:
        # Never stuck: past the deadline, a run the operator cannot even look at ends as a Timeout (not one that
        # names a Kueue queue: it may have waited there for longer, and its deadline counts from its admission).
        if start_time is None or test.spec.queue_name or \
                (now - start_time).total_seconds() < test.spec.timeout_seconds:
            raise
        job_text = f"{test.spec.backend} {manifests.job_name(test)}"
        conclude(k, obj, test, RunState("Failed", TIMEOUT, (
            f"no verdict within spec.timeoutSeconds={test.spec.timeout_seconds}, and the operator cannot read "
            f"{job_text} or its pods (HTTP {e.status} {e.reason}): check the operator's RBAC")),
            now=now, stop_job=True, logger=logger)
        return after_run(obj, test)
    namespace, name = test.metadata.namespace, test.metadata.name
    if outcome.requeue:
        return requeue(k, obj, test, outcome.state, now, logger)
    progress = soak_progress(k, test)
    if outcome.state.terminal:
        conclude(k, obj, test, outcome.state, now=now, summary=outcome.summary, report=outcome.report,
                  stop_job=outcome.stop_job, logger=logger, report_part=evidence_hooks.status_part(test, delivered),
                  soak_status=progress)
        return after_run(obj, test)
    previous = status.get("phase")
    state = outcome.state
    if progress is not None and state.phase == "Running":
        state = replace(state, message=f"{state.message}; {soak.running_line(progress)}")
    write_status(k, obj, state, test, start_time=parse_time(status.get("startTime")),
                  completion_time=None, summary=None, now=now, soak_status=progress)
    if previous != outcome.state.phase:
        kopf.info(obj, reason=outcome.state.phase, message=outcome.state.message)
    rt.METRICS.set_phase(namespace, name, outcome.state.phase)
    deadline = next_look(observation, now, timing())
    return (deadline + rt.DEADLINE_MARGIN - now).total_seconds() if deadline else rt.SETTINGS.resync_seconds


def watch_behind(test: AcceptanceTest, observation: Observation, now: datetime, logger: logging.Logger) -> bool:
    """Whether the fresh read is ahead of the watch on a pod whose containers the kubelet says it lost
    (children.behind: an end reported before may still be coming through the watch, which children.keep_ends then
    puts back, or the pod is one the watch has not shown yet); the verdict waits for the watch, at most
    WATCH_CATCH_UP_LIMIT past the pod's deletion, and after that is drawn from what is known."""
    behind = rt.CHILDREN.behind(test.metadata.namespace, manifests.test_label_value(test), runs.run_of(test).id,
                                observation.pods)
    deleted = [parse_time((p.get("metadata") or {}).get("deletionTimestamp")) for p in observation.pods
               if (p.get("metadata") or {}).get("name") in behind]
    waiting = [d for d in deleted if d is not None and (now - d).total_seconds() < rt.WATCH_CATCH_UP_LIMIT]
    if waiting:
        logger.info(f"{test.metadata.namespace}/{test.metadata.name}: the API server says the kubelet lost the "
                    f"containers of {', '.join(behind)}; waiting for the watch to bring how they ended")
    return bool(waiting)


def requeue(k: Kube, obj: KubeDict, test: AcceptanceTest, state: RunState, now: datetime,
            logger: logging.Logger) -> float | None:
    """Kueue's preemption ended the run's job (assessment.assess: it ended while suspended): tell it and go on as
    the next attempt, whose new job queues in spec.queueName again. The ended job is left as it is (its pods are
    gone, its Workload finished and gave its quota back; the job's TTL or the test's deletion removes it): until the
    new attempt is recorded, the next look finds it again and does the same, never a verdict."""
    following = runs.after_preemption(runs.run_of(test))
    kopf.info(obj, reason="Preempted", message=f"{state.message}: {following.id}")
    logger.info(f"{test.metadata.namespace}/{test.metadata.name}: {state.message}: {following.id}")
    retry = start_run(k, obj, runs.with_run(test, following), now, logger)
    return retry if retry is not None else rt.SETTINGS.resync_seconds


def observe_run(k: Kube, test: AcceptanceTest, status: KubeDict, *, fresh: bool,
             judged: Rejudged | None = None) -> tuple[Observation, Any]:
    """The run as the watches last showed it (fresh=False), or as the API server has it now (fresh=True), and
    the status part rank 0 delivered (None: not yet).

    A job the watches have not shown yet (just created, or the operator may not
    watch jobs) is read from the API server either way. `judged`: the report as
    an earlier look at the same delivery judged it; only its fit to the run's pods
    is judged again (a large report's evidence is read once per look at most).
    """
    namespace, backend, job_name = test.metadata.namespace, test.spec.backend, manifests.job_name(test)
    job = None if fresh else rt.CHILDREN.job(namespace, backend, job_name)
    if job is None:
        job = k.get_job(backend, namespace, job_name)
    run_id, label = runs.run_of(test).id, manifests.test_label_value(test)
    if fresh:
        pods = [p for p in k.list_pods(namespace, run_selector(test)) if manifests.run_of_child(p) == run_id]
    else:
        pods = rt.CHILDREN.pods(namespace, label, run_id)
    pods = rt.CHILDREN.with_gone(namespace, label, run_id, pods)  # a failed pod deleted since: where it failed
    state = rt.STATES.peek((namespace, test.metadata.name))
    logger = state.logger if state and state.logger else log
    events = observe.run_events(k, namespace, job, pods, test.spec.nodes, rt.METRICS, logger)
    bound = rt.CHILDREN.bound_nodes(namespace, manifests.test_label_value(test), runs.run_of(test).id)
    facts = RunFacts(manifests.build_workload_config(test), test.metadata.uid, pod_nodes(pods) | bound)
    delivered = delivered_part(k, test, job, status, fresh)
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
        nodes=observe.unready_nodes(k, pods, rt.METRICS, logger),
        run_id=runs.run_of(test).id,
        baseline=runs.baseline(status.get("history") or []) if test.spec.baseline == "lastPassed" else None,
        regression_tolerance=test.spec.regression_tolerance,
        admission=admission_of(k, test, job),
        suspended_by_queue=bool(test.spec.queue_name) and queueing.suspended(job, backend_of(backend).suspend),
    ), delivered


def admission_of(k: Kube, test: AcceptanceTest, job: KubeDict | None) -> queueing.Admission | None:
    """Kueue's admission of the run's job (spec.queueName), read from its Workload; None without a queue, and once
    the job has ended (its end decides, whatever became of the Workload)."""
    if not test.spec.queue_name or job is None or job_state(job).finished:
        return None
    suspend = backend_of(test.spec.backend).suspend
    uid = (job.get("metadata") or {}).get("uid")
    workloads = k.list_workloads(test.metadata.namespace, uid) if uid else []
    return queueing.admission(job, queueing.job_workload(workloads or [], job), suspend, test.spec.queue_name,
                              workloads_readable=workloads is not None)


def delivered_part(k: Kube, test: AcceptanceTest, job: KubeDict | None, status: KubeDict, fresh: bool) -> Any:
    """The status part rank 0 delivered for this run: from the job-wide evidence ConfigMap (as the watch last
    showed it, or read now when `fresh`); None while it is not there, i.e. while the evidence is not complete.

    A run whose job an earlier operator version created (without manifests.LABEL_DELIVERY) has a workload that
    patches status.report: that report is read from there, through this release only (docs/install.md).
    """
    namespace, name = test.metadata.namespace, manifests.evidence_names(test)[0]
    data = None if fresh else rt.CHILDREN.evidence_data(namespace, name)
    if data is None:  # to be confirmed, or not shown by the watch (yet)
        data = (k.read("ConfigMap", namespace, name) or {}).get("data")
    delivered = evidence_hooks.delivered(data)
    if delivered is None and job is not None and not manifests.delivers_evidence(job):
        delivered = status.get("report")
        told, run_id = rt.STATES.get((namespace, test.metadata.name)).legacy_told, runs.run_of(test).id
        if delivered and run_id not in told:
            told.add(run_id)
            log.info("%s/%s: run %s was started by an earlier operator version (its job has no %s label): its "
                     "report is read from status.report, as that version's workload writes it (supported through "
                     "this release)", namespace, test.metadata.name, run_id, manifests.LABEL_DELIVERY)
    return delivered


def soak_progress(k: Kube, test: AcceptanceTest) -> soak.SoakStatus | None:
    """The soak's progress rank 0 last wrote into this run's job-wide evidence ConfigMap (soak.py); None without
    checks.soak, before the first write, or when the ConfigMap's labels name another run (not renewed yet)."""
    if not test.spec.checks.soak.enabled:
        return None
    namespace, name = test.metadata.namespace, manifests.evidence_names(test)[0]
    seen = rt.CHILDREN.evidence_progress(namespace, name)
    if seen is None:  # not shown by the watch (yet)
        cm = k.read("ConfigMap", namespace, name) or {}
        seen = (manifests.run_of_child(cm), (cm.get("data") or {}).get(evidence.PROGRESS_KEY) or "")
    run, text = seen
    if run != runs.run_of(test).id:
        return None
    return soak.progress_of({evidence.PROGRESS_KEY: text}, test.spec.checks.soak.duration_seconds)
