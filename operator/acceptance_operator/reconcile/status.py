"""The status write (one PATCH per change, every field the operator's) and the end of a run: verdict, history,
events, metrics and the node actions.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from acceptance_operator.building import manifests
from acceptance_operator.building.backends import backend_of
from acceptance_operator.fleet import node_lifecycle
from acceptance_operator.judging.diagnosis import parse_time
from acceptance_operator.judging.verdict import measured_nodes
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.plumbing.policy import node_action_problems
from acceptance_operator.reconcile import runtime as rt
from acceptance_operator.reconcile.runtime import conditions_of, inputs, timestamp
from acceptance_operator.resource import runs
from acceptance_operator.resource.api import AcceptanceTest, JobRef, Summary, SweepStatus
from acceptance_operator.resource.conditions import RunState, clip_message, conditions_for, is_smoke
from acceptance_operator.resource.soak import SoakStatus
from acceptance_operator.workload import Report

KubeDict = dict[str, Any]
log = logging.getLogger("gpu_acceptance.operator")


def _job_of(test: AcceptanceTest, state: RunState) -> tuple[KubeDict | None, str]:
    """status.job (None before the job, and for a sweep) and how the conditions name it."""
    if state.before_job or test.spec.sweep:
        return None, "the sweep's tests" if test.spec.sweep else "the job"
    job_name = manifests.job_name(test)
    job = JobRef(api_version=backend_of(test.spec.backend).api_version, kind=test.spec.backend, name=job_name)
    return job.to_wire(), f"{test.spec.backend} {job_name}"


def write_status(
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
    soak_status: SoakStatus | None = None,
) -> None:
    """Patch the status, in one request, only if a field changes: every field is the operator's.

    `history` replaces status.history (None: kept as it is); `report`, the run's status part as rank 0
    delivered it into the evidence, replaces status.report (None: kept as it is); `soak_status` replaces
    status.soak (None: kept while the status is this run's, cleared when another run's).
    """
    meta = obj["metadata"]
    status = obj.get("status") or {}
    generation = meta.get("generation") or 1
    job, job_text = _job_of(test, state)
    state = replace(state, message=clip_message(state.message))
    conditions = conditions_for(state, job_text, conditions_of(status), generation, now)
    desired: KubeDict = {
        "phase": state.phase,
        "conditions": [c.to_wire() for c in conditions],
        "observedGeneration": generation,
        "startTime": timestamp(start_time),
        "completionTime": timestamp(completion_time),
        "job": job,
        "run": runs.run_of(test).to_wire(),
        "summary": summary.to_wire() if summary is not None else None,
        "history": history if history is not None else status.get("history"),
        "sweep": sweep_status.to_wire() if sweep_status is not None else
        status.get("sweep") if test.spec.sweep else None,
        # What the run is, decided or given (a sweep's are its children's, each decided on its own node).
        "backend": test.spec.backend if job is not None else None,
        "profile": test.spec.profile if job is not None else None,
    }
    if report is not None:
        desired["report"] = report
    same_run = (status.get("run") or {}).get("id") == desired["run"]["id"]
    desired["soak"] = soak_status.to_wire() if soak_status is not None else status.get("soak") if same_run else None
    if all(status.get(key) == value for key, value in desired.items()):
        return
    written = k.patch_test_status(meta["namespace"], meta["name"], desired) or {}
    version = (written.get("metadata") or {}).get("resourceVersion")
    obj["status"] = {**status, **{key: v for key, v in desired.items() if v is not None}}
    # Its echo is skipped only if nothing we read changed meanwhile (kopf may fold another event into our echo's).
    if version and inputs(written) == inputs(obj):
        rt.STATES.get((meta["namespace"], meta["name"])).own_write = version


def conclude(
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
    soak_status: SoakStatus | None = None,
) -> None:
    """End the run: stop what still runs, drop the workload's write access, record the verdict, tell.

    `ended`: when the run ended, if before now; act_on_nodes=False leaves spec.onFailure alone;
    `report_part`: the delivered status part (into status.report with the verdict); `soak_status`: status.soak.
    """
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    status = obj.get("status") or {}
    stop_run(k, obj, test, stop_job, logger)
    run = runs.run_of(test)
    recorded = runs.current_run(status, run.generation)
    start = parse_time(status.get("startTime")) if recorded is not None and recorded.id == run.id else None
    summary = summary or Summary(result="Failed" if state.phase == "Failed" else "Passed")
    refused = refused_node_actions(test, state, summary) if act_on_nodes else []
    if refused:
        state = replace(state, message=f"{state.message}; {node_lifecycle.not_changed(refused)}")
    end = ended or now
    entry = runs.history_entry(run, start or end, end, summary, state.reason)
    history = runs.with_entry(status.get("history") or [], entry, test.spec.history_limit)
    write_status(k, obj, state, test, start_time=start or end, completion_time=end, summary=summary, now=now,
                  history=history, sweep_status=sweep_status, report=report_part, soak_status=soak_status)
    kept = rt.STATES.peek((namespace, name))
    if kept is not None:
        kept.begun = kept.unreachable_since = None  # a run that ended between the two steps of its start

    if state.phase == "Succeeded":
        kopf.info(obj, reason=state.reason, message=state.message)
    else:
        kopf.warn(obj, reason=state.reason, message=state.message)
    logger.info("%s/%s: %s %s: %s", namespace, name, state.phase, state.reason, state.message)

    rt.METRICS.set_phase(namespace, name, state.phase)
    rt.METRICS.set_headline(namespace, name, summary)
    rt.METRICS.record_run(state.phase == "Succeeded", (end - start).total_seconds() if start else None)
    if is_smoke(test.spec.profile):
        # A smoke run's verdict is not the hardware's: no node gauge, no node action (spec.onFailure and spec.onPass
        # are ignored; node_lifecycle.after_verdict says the same for itself).
        return
    if report is not None:
        rt.METRICS.set_nodes(measured_nodes(report))
    if act_on_nodes:  # spec.onFailure / spec.onPass and the last-pass gauge (node_lifecycle.py)
        node_lifecycle.after_verdict(k, obj, test, passed=state.phase == "Succeeded", summary=summary, report=report,
                                     now=now, allowed=rt.SETTINGS.node_actions, metrics=rt.METRICS,
                                     refused=refused)


def refused_node_actions(test: AcceptanceTest, state: RunState, summary: Summary) -> list[str]:
    """Why this verdict's node actions are refused (policy.node_action_problems), where node actions are on and
    the verdict asks for them; the verdict and an event say it as "nodes not changed: <why>"."""
    passed = state.phase == "Succeeded"
    if not rt.SETTINGS.node_actions or not node_lifecycle.asks_to_change_nodes(test, passed, summary.failed_nodes):
        return []
    return node_action_problems(test, rt.SETTINGS)


def stop_run(k: Kube, obj: KubeDict, test: AcceptanceTest, stop_job: bool, logger: logging.Logger) -> None:
    """Delete the run's job if it still runs (stop_job), and the workload's identity: it was only for writing this
    run's report."""
    if stop_job:
        cleanup_child(k, obj, test.spec.backend, manifests.job_name(test), logger)
    for child in manifests.build_rbac(test):
        cleanup_child(k, obj, child["kind"], child["metadata"]["name"], logger)


def cleanup_child(k: Kube, obj: KubeDict, kind: str, name: str, logger: logging.Logger) -> None:
    """Delete a child; a refusal is told (event, log) but does not keep the verdict from being written."""
    namespace = obj["metadata"]["namespace"]
    try:
        k.delete(kind, namespace, name)
    except ApiException as e:
        rt.METRICS.reconcile_error(f"http_{e.status}")
        message = f"could not delete {kind} {name}: HTTP {e.status} {e.reason}"
        logger.warning("%s/%s: %s", namespace, obj["metadata"]["name"], message)
        kopf.warn(obj, reason="CleanupFailed", message=message)


def refresh_metrics(namespace: str, name: str, status: KubeDict) -> None:
    """After a restart, finished tests still show their phase and numbers."""
    rt.METRICS.set_phase(namespace, name, status["phase"])
    try:
        summary = Summary.model_validate(status["summary"]) if status.get("summary") else None
    except ValidationError:
        summary = None
    rt.METRICS.set_headline(namespace, name, summary)

