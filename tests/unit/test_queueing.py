"""spec.queueName (Kueue): the queue label and suspend on every backend's job and on sweep children; a run Kueue has
not admitted is Queued with Kueue's words, and its deadlines count from the admission."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from acceptance_operator.building.backends import BACKENDS, build_children, build_job
from acceptance_operator.building.queueing import QUEUE_LABEL, Admission, admission, job_workload, suspended
from acceptance_operator.fleet import sweep
from acceptance_operator.judging.assessment import Observation, Timing, assess, next_look
from acceptance_operator.resource import api, runs
from acceptance_operator.resource.spec_input import validation_messages
from pydantic import ValidationError

from tests.unit.operator_samples import T0, job, pod, ts

TIMING = Timing(unschedulable_grace_seconds=600, report_grace_seconds=30, node_lost_grace_seconds=60)
KUBEFLOW_SUSPEND = ("spec", "runPolicy", "suspend")


def make(backend: str, **spec) -> api.AcceptanceTest:
    return api.AcceptanceTest.model_validate({
        "apiVersion": api.API_VERSION, "kind": api.KIND,
        "metadata": {"name": "t", "namespace": "gpu", "uid": "u", "generation": 2},
        "spec": {"backend": backend, "nodes": 2, **spec}})


@pytest.mark.parametrize("kind", sorted(BACKENDS))
def test_every_backend_job_carries_the_queue_label_and_is_created_suspended(kind: str):
    queued = build_job(make(kind, queueName="gpu-queue"))
    assert queued["metadata"]["labels"][QUEUE_LABEL] == "gpu-queue"
    assert suspended(queued, BACKENDS[kind].suspend)
    # Only the job: what goes with it (RBAC, evidence, the Job backend's Service) is not Kueue's to admit.
    others = [o for o in build_children(make(kind, queueName="gpu-queue")) if o["kind"] != kind]
    assert others and all(QUEUE_LABEL not in (o["metadata"].get("labels") or {}) for o in others)
    plain = build_job(make(kind))
    assert QUEUE_LABEL not in plain["metadata"]["labels"] and not suspended(plain, BACKENDS[kind].suspend)


def test_sweep_children_keep_the_queue():
    parent = api.AcceptanceTest.model_validate({
        "metadata": {"name": "pool", "namespace": "lab", "uid": "u1"},
        "spec": {"sweep": True, "queueName": "gpu-queue", "backend": "Job"}})
    child = api.AcceptanceTest.model_validate(sweep.child(parent, "g1", "pool", ["n3"], "n3"))
    assert child.spec.queue_name == "gpu-queue"
    assert build_job(child)["metadata"]["labels"][QUEUE_LABEL] == "gpu-queue"


@pytest.mark.parametrize("bad", ["Gpu_Queue", "-q", "q" * 64, ""])
def test_a_queue_name_that_cannot_be_a_label_value_is_refused_naming_the_field(bad: str):
    with pytest.raises(ValidationError) as e:
        make("Job", queueName=bad)
    assert any(line.startswith("spec.queueName") for line in validation_messages(e.value, {"spec": {"queueName": bad}}))


# --------------------------------------------------------------------------- reading Kueue's Workload


def workload(*conditions: tuple[str, str, str], cluster_queue: str | None = None, uid: str = "job-uid") -> dict:
    """A Workload of the job with `uid`; conditions: (type, status, message), all at T0 + 100 s."""
    status: dict = {"conditions": [{"type": t, "status": s, "message": m, "reason": t,
                                    "lastTransitionTime": ts(T0 + timedelta(seconds=100))}
                                   for t, s, m in conditions]}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue}
    return {"metadata": {"name": "pytorchjob-t-g2-abcde", "labels": {"kueue.x-k8s.io/job-uid": uid}},
            "status": status}


def suspended_job(suspend: bool = True) -> dict:
    j = job(name="t-g2")
    j["metadata"]["uid"] = "job-uid"
    j["spec"] = {"runPolicy": {"suspend": suspend}}
    return j


def test_a_pending_workload_is_queued_with_kueues_words():
    pending = workload(("QuotaReserved", "False", "couldn't assign flavors to pod set Master: insufficient "
                                                  "unused quota for nvidia.com/gpu in flavor default, 8 more needed"))
    found = job_workload([workload(uid="other"), pending], suspended_job())
    assert found is pending
    a = admission(suspended_job(), found, KUBEFLOW_SUSPEND, "team-a")
    assert not a.admitted and a.since is None
    assert a.message == ("PyTorchJob t-g2 waits in LocalQueue team-a (Workload pytorchjob-t-g2-abcde, not admitted "
                         "yet): couldn't assign flavors to pod set Master: insufficient unused quota for "
                         "nvidia.com/gpu in flavor default, 8 more needed")


def test_admitted_once_the_workload_is_admitted_and_the_job_runs():
    admitted = workload(("QuotaReserved", "True", "Quota reserved in ClusterQueue gpus"),
                        ("Admitted", "True", "The workload is admitted"), cluster_queue="gpus")
    starting = admission(suspended_job(), admitted, KUBEFLOW_SUSPEND, "team-a")
    assert not starting.admitted and "ClusterQueue gpus" in starting.message and "about to start" in starting.message
    running = admission(suspended_job(False), admitted, KUBEFLOW_SUSPEND, "team-a")
    assert running == Admission(True, T0 + timedelta(seconds=100))


def test_without_a_workload_the_job_alone_tells():
    waiting = admission(suspended_job(), None, KUBEFLOW_SUSPEND, "team-a")
    assert not waiting.admitted and "Kueue has made no Workload for it yet (is Kueue running" in waiting.message
    denied = admission(suspended_job(), None, KUBEFLOW_SUSPEND, "team-a", workloads_readable=False)
    assert "may not list Kueue Workloads" in denied.message
    assert admission(suspended_job(False), None, KUBEFLOW_SUSPEND, "team-a") == Admission(True)


# --------------------------------------------------------------------------- deadlines count from the admission


def obs(**changes) -> Observation:
    base = Observation(generation=2, job_kind="PyTorchJob", job_name="t-g2", timeout_seconds=600, gpus_per_node=8,
                       start_time=T0, raw_report=None, job=job(name="t-g2"), pods=[], events=[])
    return replace(base, **changes)


QUEUED = Admission(False, message="PyTorchJob t-g2 waits in LocalQueue team-a: quota")


def test_a_queued_run_is_pending_queued_past_every_deadline():
    untouched = job(name="t-g2")
    untouched["metadata"]["creationTimestamp"] = ts(T0)
    for later in (timedelta(seconds=5), timedelta(hours=5)):  # past timeoutSeconds, past every grace
        a = assess(obs(job=untouched, admission=QUEUED), T0 + later, TIMING)
        assert (a.state.phase, a.state.reason, a.state.message, a.stop_job) == \
            ("Pending", "Queued", QUEUED.message, False)
    assert next_look(obs(job=untouched, admission=QUEUED), T0, TIMING) is None  # Kueue's admission is an event


def test_timeout_counts_from_the_admission():
    admitted_at = T0 + timedelta(hours=3)
    running = job(name="t-g2", conditions=[("Running", "True", "", "", admitted_at)])
    o = obs(job=running, pods=[pod("p", "Running", node="n")], admission=Admission(True, admitted_at))
    assert assess(o, admitted_at + timedelta(seconds=599), TIMING).state.phase == "Running"
    assert next_look(o, admitted_at, TIMING) == admitted_at + timedelta(seconds=600)
    a = assess(o, admitted_at + timedelta(seconds=600), TIMING)
    assert (a.state.reason, a.stop_job) == ("Timeout", True)
    # Ended by its controller at activeDeadlineSeconds (counted from the job's resumption): a Timeout too.
    failed = job(name="t-g2", conditions=[("Failed", "True", "DeadlineExceeded", "",
                                           admitted_at + timedelta(seconds=601))])
    ended = assess(replace(o, job=failed), admitted_at + timedelta(seconds=700), TIMING)
    assert ended.state.reason == "Timeout"
    # ... but a job that failed at once after a long wait in the queue is not.
    early = job(name="t-g2", conditions=[("Failed", "True", "Error", "", admitted_at + timedelta(seconds=5))])
    assert assess(replace(o, job=early), admitted_at + timedelta(seconds=100), TIMING).state.reason == "JobFailed"


def test_the_backends_patience_counts_from_the_admission():
    """A job created hours before Kueue admitted it is not judged BackendNotRunning the moment it is admitted."""
    admitted_at = T0 + timedelta(hours=3)
    untouched = job(name="t-g2")
    untouched["metadata"].update(namespace="ns", creationTimestamp=ts(T0))
    o = obs(job=untouched, timeout_seconds=86400, admission=Admission(True, admitted_at))
    assert assess(o, admitted_at + timedelta(seconds=599), TIMING).state.phase == "Pending"
    # A job that lacks pods is looked at again 5, 10, 20 ... s after the admission (refusals: assessment.refusal_look);
    # once those looks reach past the patience, its end counted from the admission comes first.
    assert next_look(o, admitted_at + timedelta(seconds=5), TIMING) == admitted_at + timedelta(seconds=10)
    assert next_look(o, admitted_at + timedelta(seconds=320), TIMING) == admitted_at + timedelta(seconds=600)
    assert assess(o, admitted_at + timedelta(seconds=600), TIMING).state.reason == "BackendNotRunning"


# --------------------------------------------------------------------------- preemption


def test_a_job_that_ended_while_kueue_had_it_suspended_is_requeued_not_judged():
    """Kueue's preemption suspends the job; a Job's controller may then fail it on its stopped pods' exit codes. No
    node is to blame: the run goes on as a new attempt, queued again, whatever the job's failure says."""
    failed = job(name="t-g2", conditions=[("Failed", "True", "PodFailurePolicy",
                                           "Container workload for pod gpu/t-g2-0-x failed with exit code 143", T0)])
    failed.setdefault("spec", {}).setdefault("runPolicy", {})["suspend"] = True
    assert suspended(failed, KUBEFLOW_SUSPEND)
    a = assess(obs(job=failed, suspended_by_queue=True), T0 + timedelta(seconds=5), TIMING)
    assert (a.state.phase, a.state.reason, a.requeue, a.summary) == ("Pending", "Queued", True, None)
    assert a.state.message.startswith("PyTorchJob t-g2 was preempted by Kueue and ended before its report")
    assert "not a verdict on any node" in a.state.message
    # The same failure of a job that runs (not suspended) is the run's verdict, as without a queue.
    failed["spec"]["runPolicy"]["suspend"] = False
    assert not suspended(failed, KUBEFLOW_SUSPEND)
    judged = assess(obs(job=failed), T0 + timedelta(seconds=60), TIMING)  # past the report grace
    assert (judged.state.phase, judged.state.reason, judged.requeue) == ("Failed", "JobFailed", False)
    # A suspended job that has not ended is only queued (Kueue admits it again itself).
    waiting = assess(obs(job=suspended_job(True), suspended_by_queue=True, admission=QUEUED), T0, TIMING)
    assert (waiting.state.reason, waiting.requeue) == ("Queued", False)


def test_the_next_attempt_keeps_the_spec_and_the_rerun_and_says_why():
    current = api.RunRef(id="g3-r2", generation=3, attempt=2, trigger="rerun", rerun="2026-11-28")
    following = runs.after_preemption(current)
    assert following.to_wire() == {"id": "g3-r3", "generation": 3, "attempt": 3, "trigger": "preempted",
                                   "rerun": "2026-11-28"}
    # A run started for a new attempt is not one the loop starts again: it is not due while it runs.
    assert runs.due(following, False, 3, "2026-11-28", None, T0, T0) is None
