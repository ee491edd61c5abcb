"""Every way a run can end, decided from one observation: the reasons and when each applies."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from acceptance_operator.building.manifests import LABEL_ROLE, ROLE_LAUNCHER
from acceptance_operator.judging.assessment import Observation, Timing, assess, next_look
from acceptance_operator.judging.rejudge import RunFacts
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef

from tests.reports import node_names, passing_report
from tests.unit.operator_samples import (
    T0,
    good_report,
    job,
    node,
    pod,
    ready,
    scheduling_event,
    terminated,
    unscheduled,
    waiting,
)

TIMING = Timing(unschedulable_grace_seconds=600, report_grace_seconds=30, node_lost_grace_seconds=60)
RUNNING_JOB = job(conditions=[("Created", "True", "", "", T0), ("Running", "True", "", "", T0)])


CONFIG = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=2, gpus_per_node=8,
                              test=TestRef(name="t", namespace="ns", uid="uid-1", generation=2))
NODE_PODS = [pod(f"t-g2-{i}", "Running", node=n) for i, n in enumerate(node_names(2))]


def obs(**changes) -> Observation:
    base = Observation(generation=2, job_kind="PyTorchJob", job_name="t-g2", timeout_seconds=3600, gpus_per_node=8,
                       start_time=T0, raw_report=None, job=job(name="t-g2"), pods=[], events=[],
                       run=RunFacts(CONFIG, "uid-1"))
    return replace(base, **changes)


def reported(report=None, **changes) -> Observation:
    """A run whose pods ran on the report's nodes, with the report written."""
    report = report or passing_report(CONFIG)
    return obs(**{"raw_report": report.to_wire(), "pods": NODE_PODS, **changes})


def test_no_status_yet_is_pending():
    a = assess(obs(), T0 + timedelta(seconds=5), TIMING)
    assert (a.state.phase, a.state.terminal) == ("Pending", False)
    assert "has no status yet" in a.state.message


def test_a_job_no_controller_acts_on_fails_as_backend_not_running_after_the_grace():
    untouched = job(name="t-g2")
    untouched["metadata"].update(namespace="ns", creationTimestamp=T0.strftime("%Y-%m-%dT%H:%M:%SZ"))
    a = assess(obs(job=untouched), T0 + timedelta(seconds=599), TIMING)
    assert a.state.phase == "Pending" and "is the Kubeflow training-operator running?" in a.state.message
    # While it lacks pods it is looked at 5, 10, 20 ... s after its creation (a refusal is an event no watch
    # announces), and at the grace's end at the latest.
    assert [next_look(obs(job=untouched), T0 + timedelta(seconds=s), TIMING) - T0 for s in (0, 5, 12, 599)] == [
        timedelta(seconds=s) for s in (5, 10, 20, 600)]
    a = assess(obs(job=untouched), T0 + timedelta(seconds=600), TIMING)
    assert (a.state.phase, a.state.reason, a.stop_job) == ("Failed", "BackendNotRunning", True)
    assert a.state.message.startswith("PyTorchJob t-g2 has no status and no pods 600s after it was created: the "
                                      "Kubeflow training-operator is not running, or does not watch namespace ns")
    # Its controller saw it (a Created condition), or made a pod: the controller runs; the run waits as before.
    seen = job(name="t-g2", conditions=[("Created", "True", "", "", T0)])
    seen["metadata"] = untouched["metadata"]
    assert assess(obs(job=seen), T0 + timedelta(seconds=900), TIMING).state.phase == "Pending"
    assert assess(obs(job=untouched, pods=[pod("p")]), T0 + timedelta(seconds=900), TIMING).state.phase == "Pending"


def test_running_job_is_running():
    a = assess(obs(job=RUNNING_JOB, pods=[pod("p", "Running", node="n")]), T0, TIMING)
    assert a.state.phase == "Running"
    assert "pods: 1 Running" in a.state.message


def test_passing_report_of_this_generation_succeeds_even_while_the_job_exits():
    a = assess(reported(job=RUNNING_JOB), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Succeeded", "ChecksPassed"), a.state.message
    assert a.summary.result == "Passed" and a.summary.all_reduce_busbw_gbps == pytest.approx(371.5)
    assert not a.stop_job  # it ends by itself and keeps its logs


def test_failing_report_fails_with_checks_failed():
    report = passing_report(CONFIG)
    busbw = next(r for r in report.results if r.name == "all_reduce_busbw")
    busbw.value = 120  # still claims passed, against a threshold of its own
    a = assess(reported(report), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ChecksFailed")
    assert "nccl/all_reduce_busbw: 120 < 340 GB/s" in a.state.message
    # 2 nodes: no localisation stage is called for (their one pair is the job-wide sweep), so none is missing
    assert a.report is not None and a.summary.failed == 1 and a.summary.failed_nodes == []


def test_stale_report_is_ignored():
    succeeded = job(name="t-g2", conditions=[("Succeeded", "True", "", "", T0)])
    a = assess(obs(job=succeeded, raw_report=good_report(generation=1).to_wire()), T0 + timedelta(minutes=5),
               TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportMissing")
    assert "generation 1, not 2" in a.state.message


def test_job_succeeded_without_report_waits_the_grace_then_report_missing():
    succeeded = job(name="t-g2", conditions=[("Succeeded", "True", "", "", T0)])
    waiting_for_it = assess(obs(job=succeeded), T0 + timedelta(seconds=10), TIMING)
    assert (waiting_for_it.state.phase, waiting_for_it.state.reason) == ("Running", "AwaitingReport")
    a = assess(obs(job=succeeded), T0 + timedelta(seconds=31), TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportMissing")
    assert "PyTorchJob t-g2 succeeded but no report for generation 2" in a.state.message
    assert "ServiceAccount" in a.state.message


def test_job_failed_names_the_oom_killed_pod():
    failed = job(name="t-g2", conditions=[("Failed", "True", "PyTorchJobFailed", "1 Worker failed", T0)])
    pods = [pod("t-g2-worker-0", "Failed", node="gpu-7", containers=[terminated(code=137, reason="OOMKilled")])]
    a = assess(obs(job=failed, pods=pods), T0 + timedelta(minutes=1), TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "JobFailed")
    for part in ("t-g2-worker-0", "gpu-7", "137", "OOMKilled"):
        assert part in a.state.message
    assert not a.stop_job


def test_kubeflow_deadline_is_a_timeout():
    failed = job(name="t-g2", conditions=[("Failed", "True", "DeadlineExceeded", "active longer than deadline", T0)])
    a = assess(obs(job=failed), T0 + timedelta(minutes=1), TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "Timeout")


def test_a_job_failed_at_its_deadline_is_a_timeout_whatever_its_controller_says():
    """A JobSet's Job hit activeDeadlineSeconds (= timeoutSeconds, from the Job's own start, after the run's): the
    JobSet says only that its Job failed, and the pods the Job controller stopped exited 143."""
    words = "jobset failed due to reaching max number of restarts (first failed job: t-g2-node-0)"
    at_deadline = job("JobSet", "t-g2", [("Failed", "True", "ReachedMaxRestarts", words, T0 + timedelta(seconds=3601))])
    pods = [_failed_at("t-g2-node-0-0", "n0", 3601), _failed_at("t-g2-node-0-1", "n1", 3602)]
    a = assess(obs(job_kind="JobSet", job=at_deadline, pods=pods), T0 + timedelta(seconds=3700), TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "Timeout")
    assert a.state.message == f"JobSet t-g2 was stopped at spec.timeoutSeconds=3600: {words}"
    assert a.summary.failed_nodes == []  # the deadline stopped them all: nobody to blame
    # The same failure before the deadline is the job's own.
    early = job("JobSet", "t-g2", [("Failed", "True", "ReachedMaxRestarts", words, T0 + timedelta(seconds=3599))])
    a = assess(obs(job_kind="JobSet", job=early, pods=pods), T0 + timedelta(seconds=3700), TIMING)
    assert a.state.reason == "JobFailed"


def test_deleted_job_fails():
    a = assess(obs(job=None), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "JobFailed")
    assert "was deleted" in a.state.message


def test_unschedulable_after_grace_stops_the_job():
    pods = [pod("t-g2-master-0", conditions=unscheduled("0/4 nodes", T0))]
    events = [scheduling_event("t-g2-master-0", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")]
    assert assess(obs(pods=pods, events=events), T0 + timedelta(minutes=9), TIMING).state.phase == "Pending"
    a = assess(obs(pods=pods, events=events), T0 + timedelta(minutes=11), TIMING)
    assert (a.state.phase, a.state.reason, a.stop_job) == ("Failed", "Unschedulable", True)
    assert "nvidia.com/gpu" in a.state.message


def test_image_pull_backoff_after_grace_fails_the_job():
    pods = [pod("t-g2-master-0", node="gpu-1", containers=[waiting("ImagePullBackOff", "not found")])]
    assert not assess(obs(pods=pods), T0 + timedelta(minutes=5), TIMING).state.terminal
    a = assess(obs(pods=pods), T0 + timedelta(minutes=10), TIMING)
    assert (a.state.reason, a.stop_job) == ("ImagePullFailed", True)
    assert "ImagePullBackOff" in a.state.message and "gpu-1" in a.state.message


def test_a_pull_the_registry_refused_the_login_for_fails_at_once():
    """No grace: the kubelet retries with the same Secret, so waiting cannot turn a wrong password into a pull."""
    refused = ('failed to pull and unpack image "r:5443/w:1": failed to resolve reference "r:5443/w:1": unexpected '
               'status from HEAD request to https://r:5443/v2/w/manifests/1: 401 Unauthorized')
    pods = [pod("t-g2-master-0", node="gpu-1", containers=[waiting("ErrImagePull", refused)])]
    a = assess(obs(pods=pods), T0 + timedelta(seconds=5), TIMING)
    assert (a.state.phase, a.state.reason, a.stop_job) == ("Failed", "ImagePullFailed", True)
    assert "ErrImagePull" in a.state.message and "401 Unauthorized" in a.state.message
    assert "wrong user or password" in a.state.message


def test_timeout_stops_the_job_and_says_where_it_was():
    pods = [pod("p", "Running", node="n")]
    assert not assess(obs(timeout_seconds=60, job=RUNNING_JOB, pods=pods), T0 + timedelta(seconds=59),
                      TIMING).state.terminal
    a = assess(obs(timeout_seconds=60, job=RUNNING_JOB, pods=pods), T0 + timedelta(seconds=60), TIMING)
    assert (a.state.phase, a.state.reason, a.stop_job) == ("Failed", "Timeout", True)
    assert "spec.timeoutSeconds=60" in a.state.message and "1 Running" in a.state.message


def test_report_beats_timeout():
    a = assess(reported(timeout_seconds=60), T0 + timedelta(hours=2), TIMING)
    assert a.state.phase == "Succeeded"


# --------------------------------------------------------------------------- next_look: when the clock alone matters


def test_next_look_is_the_timeout_while_the_job_runs():
    assert next_look(obs(job=RUNNING_JOB, pods=[pod("p", "Running", node="n")]), T0, TIMING) == \
        T0 + timedelta(seconds=3600)


def test_next_look_is_the_end_of_the_report_grace_after_the_job_ended():
    ended = T0 + timedelta(seconds=100)
    finished = job(name="t-g2", conditions=[("Succeeded", "True", "", "", ended)])
    now = ended + timedelta(seconds=1)
    assert next_look(obs(job=finished), now, TIMING) == ended + timedelta(seconds=30)
    # and at that moment the run does end: the deadline is where assess() changes its answer
    assert not assess(obs(job=finished), ended + timedelta(seconds=29), TIMING).state.terminal
    assert assess(obs(job=finished), ended + timedelta(seconds=30), TIMING).state.reason == "ReportMissing"


def test_next_look_is_the_end_of_the_unschedulable_grace():
    since = T0 + timedelta(seconds=10)
    pods = [pod("p", conditions=unscheduled("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", since))]
    look = next_look(obs(pods=pods), T0 + timedelta(seconds=20), TIMING)
    assert look == since + timedelta(seconds=600)
    assert assess(obs(pods=pods), look, TIMING).state.reason == "Unschedulable"


def test_next_look_is_the_end_of_the_patience_for_a_stuck_image_pull():
    pods = [pod("p", node="n", containers=[waiting("ImagePullBackOff")])]
    assert next_look(obs(pods=pods), T0 + timedelta(seconds=5), TIMING) == T0 + timedelta(seconds=600)


def test_next_look_skips_deadlines_already_past():
    """Past deadlines that did not end the run (no scheduler message yet) leave the next one ahead."""
    pods = [pod("p", created=T0)]  # Pending, no node, no PodScheduled condition: no message to judge by
    look = next_look(obs(pods=pods), T0 + timedelta(seconds=700), TIMING)
    assert look == T0 + timedelta(seconds=3600)
    assert next_look(obs(pods=pods), T0 + timedelta(seconds=3601), TIMING) is None


def test_cpu_smoke_report_is_rejected_naming_why():
    report = passing_report(CONFIG)
    report.mode = "cpu-smoke"
    a = assess(reported(report), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportRejected")
    assert "cpu-smoke report" in a.state.message and a.summary.result == "Failed"


def test_report_from_nodes_the_pods_did_not_run_on_is_rejected_and_its_blame_is_not_trusted():
    report = passing_report(CONFIG)
    bad = next(r for r in report.results if r.node == "gpu-node-0001")
    bad.value, bad.passed = 0.0, False  # a report that blames gpu-node-0001
    pods = [pod("t-g2-0", "Running", node="gpu-node-0000"), pod("t-g2-1", "Running", node="elsewhere")]
    a = assess(reported(report, pods=pods), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportRejected")
    assert "gpu-node-0001 ran no pod of this run" in a.state.message
    assert a.summary.failed_nodes == [] and a.report is None  # no node action, no node metrics from it


def test_pods_the_job_controller_removed_do_not_reject_a_report():
    """cleanPodPolicy Running deletes workers still running when the job ends; rank 0's pod stays. The operator
    remembers the nodes the removed pods were bound to (RunFacts.pod_nodes, from its pod watch)."""
    remembered = RunFacts(CONFIG, "uid-1", frozenset({"gpu-node-0001"}))
    a = assess(reported(pods=[pod("t-g2-0", "Succeeded", node="gpu-node-0000")], run=remembered), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Succeeded", "ChecksPassed")
    # A node no pod of the run was ever seen on is not taken on trust, whatever happened to the pods.
    a = assess(reported(pods=[pod("t-g2-0", "Succeeded", node="gpu-node-0000")]), T0, TIMING)
    assert a.state.reason == "ReportRejected" and "gpu-node-0001 ran no pod of this run" in a.state.message


def test_pods_never_scheduled_ran_nothing_a_report_can_describe():
    """A report for pods that never left Pending (no node): not run, whatever nodes it names."""
    pending = [pod("t-g2-0", "Pending"), pod("t-g2-1", "Pending")]
    a = assess(reported(pods=pending), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportRejected")
    assert "ran no pod of this run (its pods ran on no node: none was scheduled)" in a.state.message
    empty = passing_report(CONFIG)
    empty.environment.hostnames = ["gpu-node-0000", ""]
    for r in empty.results:
        if r.node == "gpu-node-0001":
            r.node = ""
    a = assess(reported(empty), T0, TIMING)
    assert a.state.reason == "ReportRejected" and "names a node with an empty name" in a.state.message


def _failed_at(name: str, node: str, second: int) -> dict:
    end = (T0 + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")
    container = terminated(code=1)
    container["state"]["terminated"]["finishedAt"] = end
    return pod(name, "Failed", node=node, containers=[container])


def _launcher(pod: dict) -> dict:
    pod["metadata"]["labels"] = {LABEL_ROLE: ROLE_LAUNCHER}
    return pod


@pytest.mark.parametrize(("pods", "blamed"), [
    ([_failed_at("w0", "n0", 5), pod("w1", "Running", node="n1")], ["n0"]),  # one failed, the other did not
    ([_failed_at("w0", "n0", 9), _failed_at("w1", "n1", 5), _failed_at("w2", "n2", 9)], ["n1"]),  # n1 first
    ([_failed_at("w0", "n0", 5), _failed_at("w1", "n1", 5)], []),  # together: something common to both
    ([_failed_at("w0", "n0", 5)], []),  # one pod: node or spec, cannot tell
    # An MPIJob: a rank died on n1 first, so mpirun (the launcher on n2) failed, then the other worker was stopped.
    ([_failed_at("w0", "n0", 9), _failed_at("w1", "n1", 5), _launcher(_failed_at("launcher", "n2", 6))], ["n1"]),
    ([pod("w0", "Running", node="n0"), _launcher(_failed_at("launcher", "n2", 6))], []),  # mpirun's own failure
])
def test_a_failed_job_without_report_blames_the_node_where_the_failure_was_local(pods, blamed):
    failed = job(name="t-g2", conditions=[("Failed", "True", "PyTorchJobFailed", "1 Worker failed", T0)])
    a = assess(obs(job=failed, pods=pods), T0 + timedelta(minutes=1), TIMING)
    assert a.state.reason == "JobFailed" and a.summary.failed_nodes == blamed


@pytest.mark.parametrize(("gpu_pods", "blamed"), [(2, ["n1"]), (1, [])])
def test_a_failed_pod_whose_peers_the_controller_deleted_is_blamed_in_a_multi_node_run(gpu_pods, blamed):
    """cleanPodPolicy Running: the PyTorchJob's or MPIJob's controller deletes the pods still running when the job
    fails, so only the failed rank's pod (and the MPIJob's failed launcher) are left to look at."""
    failed = job(name="t-g2", conditions=[("Failed", "True", "MPIJobFailed", "launcher failed", T0)])
    pods = [_failed_at("w1", "n1", 5), _launcher(_failed_at("launcher", "n2", 6))]
    a = assess(obs(job=failed, pods=pods, gpu_pods=gpu_pods), T0 + timedelta(minutes=1), TIMING)
    assert a.state.reason == "JobFailed" and a.summary.failed_nodes == blamed
    assert "pod w1 on node n1: container pytorch exited with code 1" in a.state.message  # the rank, not mpirun


def test_without_run_facts_no_report_passes():
    a = assess(reported(run=None), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportRejected")


def test_an_ignored_report_says_why_while_the_run_goes_on():
    stale = passing_report(CONFIG).model_copy(update={"generation": 1})
    a = assess(obs(job=RUNNING_JOB, pods=NODE_PODS, raw_report=stale.to_wire()), T0, TIMING)
    assert a.state.phase == "Running"
    assert "generation 1, not 2" in a.state.message


def test_a_node_lost_mid_run_fails_it_naming_the_node_and_frees_the_gpus():
    pods = [pod("t-g2-0", "Running", node="n1", conditions=ready("True")),
            pod("t-g2-1", "Running", node="n2", conditions=ready("False"))]
    lost = node("n2", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    a = assess(obs(job=RUNNING_JOB, pods=pods, nodes={"n2": lost}), T0 + timedelta(seconds=60), TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "NodeNotReady")
    assert a.summary.failed_nodes == ["n2"] and a.stop_job
    # Back to Ready before the operator looked: the run goes on.
    a = assess(obs(job=RUNNING_JOB, pods=pods, nodes={"n2": node("n2")}), T0 + timedelta(seconds=60), TIMING)
    assert a.state.phase == "Running"


def test_a_report_outranks_a_node_lost_after_it_was_written():
    pods = [dict(p, status={**p["status"], "conditions": ready("False")}) for p in NODE_PODS]
    lost = {p["spec"]["nodeName"]: node(p["spec"]["nodeName"], "Unknown") for p in pods}
    a = assess(reported(pods=pods, job=RUNNING_JOB, nodes=lost), T0 + timedelta(seconds=60), TIMING)
    assert a.state.reason == "ChecksPassed"


def test_a_pass_under_the_baseline_fails_as_regressed_and_one_within_it_passes():
    from acceptance_operator.resource.api import HistoryEntry

    base = HistoryEntry(id="g2", result="Passed", all_reduce_busbw_gbps=420.0)
    a = assess(reported(baseline=base, regression_tolerance=5.0), T0, TIMING)
    assert (a.state.phase, a.state.reason, a.summary.result) == ("Failed", "Regressed", "Failed")
    assert "all_reduce busbw 371.5 GB/s is 11.5% under baseline run g2's 420 GB/s" in a.state.message
    a = assess(reported(baseline=base, regression_tolerance=12.0), T0, TIMING)
    assert (a.state.phase, a.state.reason) == ("Succeeded", "ChecksPassed")


def test_a_report_of_another_run_of_this_generation_is_stale():
    report = passing_report(CONFIG)  # written for the generation's first run (no run id: g2)
    a = assess(reported(report, run_id="g2-r2"), T0, TIMING)
    assert not a.state.terminal and "is for run g2, not g2-r2" in a.state.message
    report.run = "g2-r2"
    assert assess(reported(report, run_id="g2-r2"), T0, TIMING).state.reason == "ChecksPassed"




def _undelivered_pods(message: str) -> list[dict]:
    return [pod("t-g2-worker-0", "Failed", node="gpu-7", containers=[terminated(code=2, message=message)]),
            pod("t-g2-worker-1", "Failed", node="gpu-8", containers=[terminated(code=2)])]


def test_a_run_whose_pod_could_not_deliver_its_report_is_report_not_delivered_quoting_it_unverified():
    from acceptance_workload.report.delivery import not_delivered

    said = passing_report(CONFIG)
    message = not_delivered("could not write evidence ConfigMap t-evidence-0 within 120s (9 attempts); last error: "
                            "ConnectTimeoutError", "https://10.96.0.1:443", said)
    failed = job(name="t-g2", conditions=[("Failed", "True", "PyTorchJobFailed", "2 Workers failed", T0)])
    waiting_for_it = assess(obs(job=failed, pods=_undelivered_pods(message)), T0 + timedelta(seconds=10), TIMING)
    assert waiting_for_it.state.reason == "AwaitingReport"  # a report may still be read within the grace
    a = assess(obs(job=failed, pods=_undelivered_pods(message)), T0 + timedelta(seconds=31), TIMING)
    assert (a.state.phase, a.state.reason) == ("Failed", "ReportNotDelivered"), a.state.message
    assert a.state.message.startswith(
        "the run's report was not delivered: pod t-g2-worker-0 on node gpu-7, container pytorch: could not write "
        "evidence ConfigMap t-evidence-0 within 120s (9 attempts); last error: ConnectTimeoutError (API server "
        "https://10.96.0.1:443) -> the test pods must reach the API server"), a.state.message
    assert "summary of its checks, UNVERIFIED" in a.state.message and "PASSED: " in a.state.message
    # It never passes on the pod's word, and blames no node (nothing says a node is at fault).
    assert a.summary.result == "Failed" and a.summary.passed == 0 and a.summary.failed_nodes == []
    assert a.report is None
    # The same pods stopped at the deadline while still delivering: the delivery, not the clock, is the news.
    at_deadline = job(name="t-g2", conditions=[("Failed", "True", "DeadlineExceeded", "deadline", T0)])
    a = assess(obs(job=at_deadline, pods=_undelivered_pods(message)), T0 + timedelta(seconds=31), TIMING)
    assert a.state.reason == "ReportNotDelivered"


def test_the_line_found_in_a_log_tail_counts_and_a_plain_failure_stays_job_failed():
    """FallbackToLogsOnError: a container that wrote no termination message (an MPIJob's launcher) gives its log's
    tail, where rank 0's line may be among others."""
    failed = job(name="t-g2", conditions=[("Failed", "True", "PyTorchJobFailed", "failed", T0)])
    tail = ("[gpu-acceptance] nccl done\ngpu-acceptance: report NOT delivered: HTTP 403 Forbidden (API server "
            "https://10.0.0.1:443); the checks said: FAILED: 60/69 checks passed\nfailed nodes: gpu-7\n")
    a = assess(obs(job=failed, pods=_undelivered_pods(tail)), T0 + timedelta(seconds=31), TIMING)
    assert a.state.reason == "ReportNotDelivered"
    assert "HTTP 403 Forbidden (API server https://10.0.0.1:443) ->" in a.state.message
    assert a.state.message.endswith("UNVERIFIED (the operator has no report to judge, and never passes a run on "
                                    "it): FAILED: 60/69 checks passed; failed nodes: gpu-7")
    assert a.summary.failed_nodes == []  # the pod's own blame is not taken either
    plain = _undelivered_pods("FAILED: 60/69 checks passed")
    assert assess(obs(job=failed, pods=plain), T0 + timedelta(seconds=31), TIMING).state.reason == "JobFailed"
