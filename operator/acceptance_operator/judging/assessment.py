"""Where a run stands, decided from everything observed at one moment.

A pure function of the test's report, its child job, the job's pods and their
scheduling events, the clock and the operator's settings, so every path a run
can take (passed, failed checks, job failed, report missing or not delivered, unschedulable,
image pull stuck, node lost, no controller, timeout) is unit-tested without a cluster. The handlers read
the inputs and apply the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from acceptance_operator.building.jobstate import JobState
from acceptance_operator.building.queueing import Admission
from acceptance_operator.judging import diagnosis
from acceptance_operator.judging.rejudge import Rejudged, RunFacts, rejudge
from acceptance_operator.judging.verdict import regressions, report_for_generation, summarize, verdict_message
from acceptance_operator.resource.api import HistoryEntry, Summary
from acceptance_operator.resource.conditions import (
    CHECKS_FAILED,
    JOB_FAILED,
    PASSED,
    QUEUED,
    REGRESSED,
    REPORT_MISSING,
    REPORT_REJECTED,
    SMOKE_PASSED,
    TIMEOUT,
    RunState,
)
from acceptance_operator.workload import CheckName, Report

KubeDict = dict[str, Any]
REFUSAL_FIRST_LOOK_SECONDS = 5.0  # refusal_look
SMOKE_NOTE = "CPU smoke run (spec.profile cpu-smoke: gloo on CPU, no GPU), not a hardware verdict"


@dataclass(frozen=True)
class Timing:
    """The operator's patience, from its settings (their defaults live in settings.OperatorSettings alone)."""

    # How long pods may wait to be scheduled or started, and a job for its controller to act on it at all.
    unschedulable_grace_seconds: float
    report_grace_seconds: float
    # How long a node must stay not Ready before it is judged lost (an API server outage leaves every node Unknown
    # for a moment after it).
    node_lost_grace_seconds: float


@dataclass(frozen=True)
class Assessment:
    state: RunState
    summary: Summary | None = None
    report: Report | None = None
    stop_job: bool = False  # the run ended while the job still holds (or waits for) GPUs
    requeue: bool = False  # Kueue's preemption ended the job: the run goes on as a new attempt, queued again


@dataclass(frozen=True)
class Observation:
    """What the handler read for one run of one generation."""

    generation: int
    job_kind: str
    job_name: str
    timeout_seconds: int
    gpus_per_node: int
    start_time: datetime | None
    raw_report: Any
    job: KubeDict | None
    pods: list[KubeDict]
    events: list[KubeDict]
    enabled_checks: tuple[CheckName, ...] = ()
    run: RunFacts | None = None  # what the report is judged against; without it no report can pass
    # The Node objects of diagnosis.nodes_to_check(pods) that could be read (none while every pod is Ready).
    nodes: dict[str, KubeDict] = field(default_factory=dict)
    run_id: str | None = None  # status.run.id: a report of another run of this generation is stale
    baseline: HistoryEntry | None = None  # spec.baseline's run, if any
    regression_tolerance: float = 5.0  # percent
    # This run's report, already judged as its evidence was read (evidence_hooks.judged_report): judged as is,
    # raw_report then has nothing. None: raw_report, a whole report (or none), is judged here.
    judged: Rejudged | None = None
    gpu_pods: int = 0  # how many GPU pods the run has (spec.nodes); 0: as many as `pods` holds
    admission: Admission | None = None  # Kueue's admission of the job (spec.queueName); None: no queue
    # The job names a Kueue queue and its suspend field is true (queueing.suspended): Kueue has not let it run, or
    # took its admission back.
    suspended_by_queue: bool = False


def queued(obs: Observation) -> bool:
    """Kueue has not let the run's job run (yet, or again): the run waits, and no deadline counts."""
    return obs.admission is not None and not obs.admission.admitted


def admitted_at(obs: Observation) -> datetime | None:
    """When Kueue admitted the run's job (None: no queue, or the time is not known)."""
    return obs.admission.since if obs.admission is not None else None


def clock_start(obs: Observation) -> datetime | None:
    """Where spec.timeoutSeconds counts from: the run's start, or Kueue's admission of its job if later."""
    admitted = admitted_at(obs)
    if obs.start_time is None or admitted is None:
        return obs.start_time
    return max(obs.start_time, admitted)


def pod_nodes(pods: list[KubeDict]) -> frozenset[str]:
    """The nodes the pods are bound to (a pod not scheduled ran nothing)."""
    return frozenset(n for p in pods if (n := (p.get("spec") or {}).get("nodeName")))


def _failed(reason: str, message: str, *, stop_job: bool = False, failed_nodes: list[str] | None = None) -> Assessment:
    summary = Summary(result="Failed", failed_nodes=failed_nodes or [])
    return Assessment(RunState("Failed", reason, message), summary, stop_job=stop_job)


def _ended_at_deadline(state: JobState, obs: Observation) -> bool:
    """The job ended no earlier than spec.timeoutSeconds after the run started: its activeDeadlineSeconds (the
    same number, counted from the job's own later start) ended it, whatever its controller's words (a JobSet says
    only that its Job failed; the Job's DeadlineExceeded stays on the Job)."""
    start = clock_start(obs)
    if state.since is None or start is None:
        return False
    return (state.since - start).total_seconds() >= obs.timeout_seconds


def _verdict(report: Report, obs: Observation) -> Assessment:
    """The operator's verdict on a report of this generation: judged again, and checked against the run."""
    if obs.run is None:
        return _failed(REPORT_REJECTED, "the operator has no record of the run to judge the report against")
    return _judged_verdict(rejudge(report, RunFacts(obs.run.config, obs.run.uid,
                                                    pod_nodes(obs.pods) | (obs.run.pod_nodes or frozenset()))), obs)


def _judged_verdict(judged: Rejudged, obs: Observation) -> Assessment:
    """The verdict on a report the operator has judged (rejudge): rejected if it does not fit the run, else its
    results, then the baseline."""
    report = judged.report
    summary = summarize(report)
    if judged.problems:
        # Nothing in a report that does not describe this run is trusted: not its numbers' nodes, not its blame.
        message = "status.report does not describe this run: " + "; ".join(judged.problems)
        return Assessment(RunState("Failed", REPORT_REJECTED, message),
                          summary.model_copy(update={"result": "Failed", "failed_nodes": []}))
    passed = report.verdict()
    if report.mode == "cpu-smoke":  # judged against a cpu-smoke run (rejudge): the plumbing, not the hardware
        message = f"{SMOKE_NOTE}: {verdict_message(report)}"
        return Assessment(RunState("Succeeded" if passed else "Failed", SMOKE_PASSED if passed else CHECKS_FAILED,
                                   message), summary, report)
    regressed = regressions(summary, obs.baseline, obs.regression_tolerance) if passed else []
    if regressed:
        message = f"{verdict_message(report)}; but regressed: {'; '.join(regressed)}"
        return Assessment(RunState("Failed", REGRESSED, message), summary.model_copy(update={"result": "Failed"}),
                          report)
    run_state = RunState("Succeeded" if passed else "Failed", PASSED if passed else CHECKS_FAILED,
                         verdict_message(report))
    return Assessment(run_state, summary, report)


def assess(obs: Observation, now: datetime, timing: Timing) -> Assessment:
    """The run's state; terminal outcomes say why, in-progress ones say what is awaited."""
    if obs.judged is not None:
        return _judged_verdict(obs.judged, obs)
    report, report_problem = report_for_generation(obs.raw_report, obs.generation, obs.enabled_checks, obs.run_id)
    job = obs.job
    state = diagnosis.job_state(job)
    if report is not None:
        # A job still running after its report is exiting: it ends by itself and keeps its logs until the TTL.
        return _verdict(report, obs)

    job_text = f"{obs.job_kind} {obs.job_name}"
    if job is None:
        return _failed(JOB_FAILED, f"{job_text} was deleted before the run finished (no report was written)")

    if state.finished and obs.suspended_by_queue:
        # Ended while suspended: Kueue took its admission back (preemption) and the job's controller counted the
        # pods it then stopped as failures (a Job's pod failure policy fails it on their SIGTERM exit code, whenever
        # the pods' end is seen before they are gone). Kueue's doing, not the nodes'.
        return Assessment(RunState("Pending", QUEUED, (
            f"{job_text} was preempted by Kueue and ended before its report ({state.reason or 'Failed'}): "
            "not a verdict on any node; the run goes on as a new attempt, queued again")), requeue=True)
    if state.finished:
        return _finished(obs, state, now, timing, report_problem)
    if obs.admission is not None and not obs.admission.admitted:  # queued(obs): waits for Kueue, no deadline counts
        return Assessment(RunState("Pending", QUEUED, obs.admission.message))
    stalled = _stalled(obs, now, timing)
    if stalled is not None:
        return stalled

    start = clock_start(obs)
    if start is not None and (now - start).total_seconds() >= obs.timeout_seconds:
        return _failed(
            TIMEOUT,
            f"no verdict within spec.timeoutSeconds={obs.timeout_seconds}: {diagnosis.progress(job, obs.pods)}",
            stop_job=True,
        )

    progress = diagnosis.progress(job, obs.pods)
    refused = diagnosis.refusal(job, obs.pods, obs.events, obs.gpu_pods, not_before=admitted_at(obs))
    if refused is not None:  # one that may pass (pods_refused ended the run on any other): quoted while it waits
        progress += (f"; the API server refuses the pods ({refused.attempts} attempt(s), retried until the "
                     f"unschedulable grace ends): {refused.words}")
    if report_problem:
        progress += f"; {report_problem}"
    if state.state in ("Running", "Restarting") or diagnosis.any_running(obs.pods):
        return Assessment(RunState("Running", "JobRunning", progress))
    return Assessment(RunState("Pending", "Pending", progress))


def _finished(obs: Observation, state: JobState, now: datetime, timing: Timing,
              report_problem: str | None) -> Assessment:
    """The job ended without a report: wait a grace for it, then say why (a pod that says it could not deliver
    it, timeout, failure, missing report)."""
    job_text = f"{obs.job_kind} {obs.job_name}"
    waited = (now - state.since).total_seconds() if state.since else timing.report_grace_seconds
    if waited < timing.report_grace_seconds:
        return Assessment(RunState("Running", "AwaitingReport",
                                   f"{job_text} is {state.state}; waiting for the workload's report"))
    undelivered = diagnosis.report_not_delivered(obs.pods)
    if undelivered is not None:  # before Timeout: the checks ended; their report could not reach the operator
        return _failed(undelivered.reason, undelivered.message)
    if state.state == "Succeeded":
        why = f" ({report_problem})" if report_problem else ""
        return _failed(
            REPORT_MISSING,
            f"{job_text} succeeded but no report for generation {obs.generation} was written{why}: "
            "read the rank-0 pod's log, and check that its ServiceAccount may get and patch the run's evidence "
            "ConfigMaps (<test>-evidence-*; kubectl auth can-i patch configmaps/<test>-evidence-job --as "
            "system:serviceaccount:<namespace>:<test>-workload)",
        )
    if state.deadline_exceeded or _ended_at_deadline(state, obs):
        return _failed(TIMEOUT, f"{job_text} was stopped at spec.timeoutSeconds={obs.timeout_seconds}: "
                                f"{state.message or state.reason}")
    return _failed(JOB_FAILED, diagnosis.job_failure(obs.job, obs.pods).message,
                   failed_nodes=diagnosis.culprit_nodes(obs.pods, obs.gpu_pods))


def _stalled(obs: Observation, now: datetime, timing: Timing) -> Assessment | None:
    """A running job that cannot finish: a lost node, a stuck or unschedulable pod, refused pods, an idle backend."""
    job = obs.job
    lost = diagnosis.lost_nodes(obs.pods, obs.nodes, now, timing.node_lost_grace_seconds)
    if lost is not None:
        finding, nodes = lost
        return _failed(finding.reason, finding.message, stop_job=True, failed_nodes=nodes)

    refused_login = diagnosis.login_refused(obs.pods)
    if refused_login is not None:
        return _failed(refused_login.reason, refused_login.message, stop_job=True)

    stuck = diagnosis.stuck_pod(obs.pods)
    if stuck is not None:
        finding, since = stuck
        if since is None or (now - since).total_seconds() >= timing.unschedulable_grace_seconds:
            return _failed(finding.reason, finding.message, stop_job=True)

    pending = diagnosis.unschedulable(obs.pods, obs.events, now, timing.unschedulable_grace_seconds,
                                      obs.gpus_per_node)
    if pending is not None:
        return _failed(pending.reason, pending.message, stop_job=True)

    refused = diagnosis.pods_refused(job, obs.pods, obs.events, obs.gpu_pods, now, timing.unschedulable_grace_seconds,
                                     not_before=admitted_at(obs))
    if refused is not None:
        return _failed(refused.reason, refused.message, stop_job=True)

    idle = diagnosis.backend_not_running(job, obs.pods, now, timing.unschedulable_grace_seconds,
                                         not_before=admitted_at(obs))
    if idle is not None:
        return _failed(idle.reason, idle.message, stop_job=True)
    return None


def refusal_look(missing_since: datetime, now: datetime) -> datetime:
    """When to look again at a job that lacks pods: no watch event announces its controller's FailedCreate event,
    so 5, 10, 20, 40 ... s after the job: a refusal that cannot pass ends the run within seconds, at a few reads
    of the events over the whole grace."""
    step = REFUSAL_FIRST_LOOK_SECONDS
    while missing_since + timedelta(seconds=step) <= now:
        step *= 2
    return missing_since + timedelta(seconds=step)


def next_look(obs: Observation, now: datetime, timing: Timing) -> datetime | None:
    """The earliest moment after `now` at which the clock alone can change assess()'s answer.

    Watch events wake the operator for every change in the cluster; this is
    for what no event announces: the run's timeout, the report grace after the
    job ended, and the patience for pods that cannot be scheduled or started.
    None when no deadline lies ahead (a finished run, or one Kueue has not admitted: its job's unsuspension is an
    event).
    """
    if queued(obs):
        return None
    deadlines: list[datetime] = []
    if (start := clock_start(obs)) is not None:
        deadlines.append(start + timedelta(seconds=obs.timeout_seconds))
    state = diagnosis.job_state(obs.job)
    if state.finished and state.since is not None:
        deadlines.append(state.since + timedelta(seconds=timing.report_grace_seconds))
    stuck = diagnosis.stuck_pod(obs.pods)
    if stuck is not None and stuck[1] is not None:
        deadlines.append(stuck[1] + timedelta(seconds=timing.unschedulable_grace_seconds))
    admitted = admitted_at(obs)
    unstarted = (diagnosis.unstarted_since(obs.job, obs.pods, not_before=admitted)
                 or diagnosis.missing_pods_since(obs.job, obs.pods, obs.gpu_pods, not_before=admitted))
    if unstarted is not None:
        deadlines.append(unstarted + timedelta(seconds=timing.unschedulable_grace_seconds))
    missing = diagnosis.missing_pods_since(obs.job, obs.pods, obs.gpu_pods, not_before=admitted)
    if missing is not None:
        deadlines.append(refusal_look(missing, now))
    for node in obs.nodes.values():
        if (since := diagnosis.not_ready_since(node)) is not None:
            deadlines.append(since + timedelta(seconds=timing.node_lost_grace_seconds))
    for since in diagnosis.unscheduled_since(obs.pods):
        deadlines.append(since + timedelta(seconds=timing.unschedulable_grace_seconds))
    ahead = [d for d in deadlines if d > now]
    return min(ahead) if ahead else None
