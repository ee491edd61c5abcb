"""Failure messages name the pod, the node, the container, the exit code and the reason, and say what to do."""

from __future__ import annotations

from datetime import timedelta

import pytest
from acceptance_operator.judging.diagnosis import (
    culprit_nodes,
    failed_pod,
    job_failure,
    job_state,
    login_refused,
    lost_nodes,
    missing_resources,
    never_ran,
    nodes_to_check,
    parse_time,
    pod_phases,
    pods_refused,
    progress,
    scheduling_hint,
    stuck_pod,
    unschedulable,
)

from tests.unit.operator_samples import (
    T0,
    job,
    node,
    pod,
    ready,
    scheduling_event,
    terminated,
    unscheduled,
    waiting,
)

GPU_MESSAGE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available."


def test_parse_time():
    assert parse_time("2025-01-01T12:00:00Z") == T0
    assert parse_time("2025-01-01T12:00:00") == T0
    assert parse_time(None) is None
    assert parse_time("yesterday") is None


def test_job_state_picks_the_decisive_condition():
    assert job_state(None).state is None
    assert job_state(job(conditions=[])).state is None
    created_running = job(conditions=[("Created", "True", "", "", T0), ("Running", "True", "", "", T0)])
    assert job_state(created_running).state == "Running"
    failed = job(conditions=[("Created", "True", "", "", T0), ("Running", "False", "", "", T0),
                             ("Failed", "True", "PyTorchJobFailed", "boom", T0 + timedelta(seconds=5))])
    state = job_state(failed)
    assert (state.state, state.reason, state.message, state.since) == ("Failed", "PyTorchJobFailed", "boom",
                                                                        T0 + timedelta(seconds=5))
    assert state.finished and not state.deadline_exceeded
    deadline = job(conditions=[("Failed", "True", "DeadlineExceeded", "active longer than deadline", T0)])
    assert job_state(deadline).deadline_exceeded
    assert job_state(job(conditions=[("Succeeded", "True", "", "", T0)])).finished


def test_oom_killed_names_pod_node_exit_code_and_reason():
    pods = [pod("t-g1-master-0", "Running", node="gpu-1"),
            pod("t-g1-worker-0", "Failed", node="gpu-7", containers=[terminated(code=137, reason="OOMKilled")])]
    finding = failed_pod(pods)
    assert finding.reason == "JobFailed"
    assert "pod t-g1-worker-0 on node gpu-7" in finding.message
    assert "container pytorch exited with code 137 (OOMKilled)" in finding.message
    assert "spec.resources.memory" in finding.message


def test_error_exit_quotes_the_termination_message():
    pods = [pod("p", "Failed", node="n", containers=[terminated(code=2, message="FAILED preflight: ECC\n")])]
    assert "exited with code 2 (Error): FAILED preflight: ECC" in failed_pod(pods).message


def test_init_container_failure_is_found():
    pods = [pod("p", "Failed", node="n", init=[terminated(name="ulimit", code=1)])]
    assert "init container ulimit exited with code 1" in failed_pod(pods).message


def test_evicted_pod_without_container_status():
    pods = [pod("p", "Failed", node="n", reason="Evicted")]
    assert "the pod failed (Evicted)" in failed_pod(pods).message


def test_healthy_pods_have_no_failure():
    assert failed_pod([pod("p", "Running", node="n", containers=[])]) is None
    assert failed_pod([pod("p", "Succeeded", node="n", containers=[terminated(code=0, reason="Completed")])]) is None


def test_image_pull_backoff_is_stuck():
    pull = waiting("ImagePullBackOff", 'Back-off pulling image "ghcr.io/x:bad"', image="ghcr.io/x:bad")
    pods = [pod("p", "Pending", node="gpu-2", containers=[pull])]
    finding, since = stuck_pod(pods)
    assert finding.reason == "ImagePullFailed"
    assert "pod p on node gpu-2: container pytorch is ImagePullBackOff (image ghcr.io/x:bad)" in finding.message
    assert "pod.imagePullSecrets" in finding.message
    assert since == T0
    assert stuck_pod([pod("p", "Pending", node="n", containers=[waiting("ContainerCreating")])]) is None


# What containerd 1.6 says when a registry with htpasswd auth refuses the Secret's password (the e2e's wrong-password
# test sees it for real: tests/e2e/test_image_pulls.py).
REFUSED = ('failed to pull and unpack image "10.0.0.9:5443/gpu-acceptance/workload:0.1.0": failed to resolve reference '
           '"10.0.0.9:5443/gpu-acceptance/workload:0.1.0": unexpected status from HEAD request to '
           'https://10.0.0.9:5443/v2/gpu-acceptance/workload/manifests/0.1.0: 401 Unauthorized')


@pytest.mark.parametrize("message", [
    REFUSED,
    'failed to pull and unpack image "r.example/w:1": failed to resolve reference "r.example/w:1": failed to '
    'authorize: failed to fetch oauth token: unexpected status: 403 Forbidden',
    'failed to pull and unpack image "docker.io/org/w:1": failed to resolve reference "docker.io/org/w:1": pull access '
    'denied, repository does not exist or may require authorization: server message: insufficient_scope: '
    'authorization failed',
])
def test_a_refused_login_is_named_with_the_runtime_words_and_what_to_fix(message):
    pods = [pod("t-g1-master-0", "Pending", node="gpu-2",
                containers=[waiting("ErrImagePull", message, name="workload", image="r/w:1")])]
    finding = login_refused(pods)
    assert finding is not None and finding.reason == "ImagePullFailed"
    assert finding.message.startswith(
        "pod t-g1-master-0 on node gpu-2: container workload is ErrImagePull (image r/w:1): ")
    assert message[:200] in finding.message
    assert "spec.pod.imagePullSecrets" in finding.message and "wrong user or password" in finding.message


def test_a_pull_failing_for_another_cause_is_not_a_refused_login():
    """A missing tag or an unreachable registry may be a push still under way: it keeps the grace (stuck_pod)."""
    for message in ['failed to pull and unpack image "r/w:1": failed to resolve reference "r/w:1": r/w:1: not found',
                    'failed to do request: Head "https://r/v2/w/manifests/1": dial tcp 10.0.0.9:5443: connect: '
                    'connection refused']:
        pods = [pod("p", "Pending", node="n", containers=[waiting("ErrImagePull", message)])]
        assert login_refused(pods) is None
        assert stuck_pod(pods)[0].reason == "ImagePullFailed"
    # "401 Unauthorized" in another waiting reason is not a pull's
    assert login_refused([pod("p", "Pending", node="n", containers=[waiting("CreateContainerError", REFUSED)])]) is None
    assert login_refused([pod("p", "Pending", node="n", containers=[waiting("ContainerCreating")])]) is None


def test_missing_resources():
    assert missing_resources(GPU_MESSAGE) == ["nvidia.com/gpu"]
    both = "0/3 nodes are available: 1 Insufficient memory, 2 Insufficient rdma/ib."
    assert missing_resources(both) == ["memory", "rdma/ib"]
    assert missing_resources("0/3 nodes are available: 3 node(s) had untolerated taint {a: b}.") == []


def test_scheduling_hints():
    assert "no node has 8 free nvidia.com/gpu" in scheduling_hint(GPU_MESSAGE, 8)
    assert "spec.placement.tolerations" in scheduling_hint("3 node(s) had untolerated taint {x: y}", 8)
    # A NotReady node's taints are not for tolerating: the node is down.
    lost = ("0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, "
            "3 node(s) didn't match pod anti-affinity rules.")
    assert scheduling_hint(lost, 8) == (
        "one pod per node: spec.nodes must not exceed the eligible nodes; 1 node(s) are not Ready (their kubelet "
        "stopped reporting, or the node is down): check `kubectl get nodes`, or lower spec.nodes to the Ready nodes")
    both = "2 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) had untolerated taint {x: y}"
    assert "2 node(s) are not Ready" in scheduling_hint(both, 8)
    assert "spec.placement.tolerations" in scheduling_hint(both, 8)
    assert "nodeSelector" in scheduling_hint("2 node(s) didn't match Pod's node affinity/selector", 8)
    assert "spec.nodes" in scheduling_hint("1 node(s) didn't match pod anti-affinity rules", 8)
    assert "spec.resources.extra" in scheduling_hint("Insufficient rdma/ib", 8)


def test_unschedulable_after_grace_names_resource_from_event():
    pods = [pod("t-g1-master-0", conditions=unscheduled("0/4 nodes are available", T0))]
    events = [scheduling_event("t-g1-master-0", GPU_MESSAGE, T0 + timedelta(seconds=30)),
              scheduling_event("t-g1-master-0", "older", T0), scheduling_event("other-pod", "no", T0)]
    assert unschedulable(pods, events, T0 + timedelta(seconds=59), 60, 8) is None  # within the grace
    finding = unschedulable(pods, events, T0 + timedelta(seconds=61), 60, 8)
    assert finding.reason == "Unschedulable"
    assert "pod t-g1-master-0 has been Pending for 61s" in finding.message
    assert "4 Insufficient nvidia.com/gpu" in finding.message
    assert "no node has 8 free nvidia.com/gpu" in finding.message


def test_unschedulable_from_condition_when_events_expired():
    pods = [pod("p", conditions=unscheduled(GPU_MESSAGE, T0))]
    assert "Insufficient nvidia.com/gpu" in unschedulable(pods, [], T0 + timedelta(minutes=20), 600, 4).message


def test_pending_without_a_scheduler_word_is_not_unschedulable():
    assert unschedulable([pod("p")], [], T0 + timedelta(hours=1), 60, 8) is None
    scheduled = pod("p", node="n", conditions=unscheduled(GPU_MESSAGE, T0))
    assert unschedulable([scheduled], [], T0 + timedelta(hours=1), 60, 8) is None


def test_job_failure_prefers_the_pod_and_falls_back_to_the_job():
    failed = job(conditions=[("Failed", "True", "PyTorchJobFailed", "PyTorchJob t-g1 is failed because 1 "
                              "Worker replica(s) failed.", T0)])
    pods = [pod("t-g1-worker-0", "Failed", node="gpu-7", containers=[terminated(code=137, reason="OOMKilled")])]
    assert "PyTorchJob t-g1 failed: pod t-g1-worker-0 on node gpu-7" in job_failure(failed, pods).message
    fallback = job_failure(failed, [])
    assert "1 Worker replica(s) failed" in fallback.message and fallback.reason == "JobFailed"


def test_job_failure_names_the_pod_the_controller_names_else_the_one_that_failed_first():
    def failed_at(name: str, node_name: str, second: int) -> dict:
        container = terminated(code=143)
        container["state"]["terminated"]["finishedAt"] = (T0 + timedelta(seconds=second)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        return pod(name, "Failed", node=node_name, containers=[container])

    # The victim (index 1) ended first; index 0 was stopped by the Job controller after the Job failed.
    pods = [failed_at("t-g1-0-a", "n0", 9), failed_at("t-g1-1-b", "n1", 5)]
    plain = job(conditions=[("Failed", "True", "BackoffLimitExceeded", "Job has reached the backoff limit", T0)])
    assert "pod t-g1-1-b on node n1" in job_failure(plain, pods).message
    # The Job's pod failure policy names its pod: that one, whatever the clocks say.
    named = job(conditions=[("Failed", "True", "PodFailurePolicy", "Container workload for pod ns/t-g1-0-a failed "
                             "with exit code 143 matching FailJob rule at index 0", T0)])
    assert "pod t-g1-0-a on node n0" in job_failure(named, pods).message


def test_progress_and_phase_counts():
    pods = [pod("a", "Running", node="n"), pod("b"), pod("c", "Running", node="m")]
    assert pod_phases(pods) == "1 Pending, 2 Running"
    assert pod_phases([]) == "no pods"
    assert "has no status yet (is the Kubeflow training-operator running?)" in progress(job(), [])
    assert progress(job(conditions=[("Running", "True", "", "", T0)]), pods).startswith("PyTorchJob t-g1 is Running")


LOST = node("n2", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")


def test_only_live_pods_that_are_not_ready_send_the_operator_to_their_node():
    pods = [pod("p0", "Running", node="n0", conditions=ready("True")),
            pod("p1", "Running", node="n1", conditions=ready("False")),
            pod("p2", "Pending", node="n2", conditions=ready("False")),  # bound, pulling its image
            pod("p3", "Succeeded", node="n3", conditions=ready("False")),  # ended: nothing to wait for
            pod("p4", "Pending"),  # not scheduled
            pod("p5", "Running", node="n5")]  # no Ready condition: not Ready
    assert nodes_to_check(pods) == ["n1", "n5"]
    assert nodes_to_check([pod("p0", "Running", node="n0", conditions=ready("True"))]) == []


def test_a_lost_node_under_a_live_pod_is_named_with_the_node_controllers_words():
    pods = [pod("t-0", "Running", node="n1", conditions=ready("True")),
            pod("t-1", "Running", node="n2", conditions=ready("False"))]
    finding, nodes = lost_nodes(pods, {"n1": node("n1"), "n2": LOST}, T0, 0)
    assert nodes == ["n2"]
    assert finding.reason == "NodeNotReady"
    assert finding.message.startswith("node n2 is not Ready (Ready=Unknown, NodeStatusUnknown: Kubelet stopped "
                                      "posting node status.) while pod t-1 ran on it -> ")
    assert "kubectl describe node" in finding.message


def test_ready_nodes_unread_nodes_and_ended_pods_blame_nobody():
    live = [pod("t-1", "Running", node="n2", conditions=ready("False"))]
    assert lost_nodes(live, {"n2": node("n2")}, T0, 0) is None  # flapped back: Ready again
    assert lost_nodes(live, {}, T0, 0) is None  # not read (no permission, or deleted)
    ended = [pod("t-1", "Failed", node="n2", containers=[terminated(code=143)])]
    assert lost_nodes(ended, {"n2": LOST}, T0, 0) is None  # the job's own failure tells that story


QUOTA = ('Error creating: pods "t-g1-0-x" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=8, '
         'used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8')


def refusal(involved: str, count: int = 3, reason: str = "FailedCreate", message: str = QUOTA,
            at: str = "2025-01-01T12:00:05Z") -> dict:
    return {"type": "Warning", "reason": reason, "count": count, "lastTimestamp": at,
            "involvedObject": {"kind": "Job", "name": involved}, "message": message}


def test_pods_the_api_server_refuses_are_named_with_the_controllers_words():
    created = {**job("Job", "t-g1"), "metadata": {"name": "t-g1", "creationTimestamp": "2025-01-01T12:00:00Z"},
               "status": {"startTime": "2025-01-01T12:00:00Z"}}  # the Job controller gave it a status: it runs
    events = [refusal("t-g1"), refusal("other-g1", 9)]
    assert pods_refused(created, [], events, 1, T0 + timedelta(seconds=5), 10) is None  # within the grace
    finding = pods_refused(created, [], events, 1, T0 + timedelta(seconds=10), 10)
    assert finding is not None and finding.reason == "PodsRefused"
    assert finding.message.startswith("the API server refused the pods of Job t-g1 (3 attempt(s), the latest by "
                                      "Job t-g1): Error creating: pods \"t-g1-0-x\" is forbidden: exceeded quota"), \
        finding.message
    # A JobSet's Jobs carry its name as their prefix; the training-operator says FailedCreatePod.
    assert pods_refused(created, [], [refusal("t-g1-workers-0", reason="FailedCreatePod")], 1,
                        T0 + timedelta(seconds=10), 10) is not None
    # Its pods exist, or nobody refused them: not this finding.
    assert pods_refused(created, [pod("t-g1-0")], events, 1, T0 + timedelta(seconds=10), 10) is None
    assert pods_refused(created, [], [refusal("other-g1")], 1, T0 + timedelta(seconds=10), 10) is None


def test_a_node_is_lost_only_once_it_stays_not_ready_past_the_grace():
    """Right after an API server outage every node whose heartbeat could not be posted reads Unknown for a moment:
    judged only once the Ready condition has been off for the grace (its lastTransitionTime)."""
    live = [pod("t-1", "Running", node="n2", conditions=ready("False"))]
    unknown = node("n2", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    unknown["status"]["conditions"][0]["lastTransitionTime"] = "2025-01-01T12:00:00Z"
    assert lost_nodes(live, {"n2": unknown}, T0 + timedelta(seconds=59), 60) is None
    finding, nodes = lost_nodes(live, {"n2": unknown}, T0 + timedelta(seconds=60), 60)
    assert nodes == ["n2"] and finding.reason == "NodeNotReady"


@pytest.mark.parametrize(("code", "reason", "said"), [
    (137, "Error", "exited with code 137 (Error), killed by SIGKILL (signal 9)"),
    (139, "Error", "exited with code 139 (Error), killed by SIGSEGV (signal 11)"),
    (134, "Error", "exited with code 134 (Error), killed by SIGABRT (signal 6)"),
    (135, "Error", "exited with code 135 (Error), killed by SIGBUS (signal 7)"),
    (137, "OOMKilled", "exited with code 137 (OOMKilled), killed by SIGKILL (signal 9): it ran out of memory"),
    (1, "Error", "exited with code 1 (Error)"),
])
def test_a_container_killed_by_a_signal_is_named_with_the_signal(code, reason, said):
    """Exit code 128 + N is the signal N: the verdict spells it as the workload's launcher does (deaths.py)."""
    pods = [pod("t-g1-worker-0", "Failed", node="gpu-7", containers=[terminated(code=code, reason=reason)])]
    message = failed_pod(pods).message
    assert f"pod t-g1-worker-0 on node gpu-7: container pytorch {said}" in message, message
    if code < 128:
        assert "killed by" not in message


@pytest.mark.parametrize(("code", "reason", "deleted", "blamed"), [
    (137, "Error", None, ["gpu-7"]),  # SIGKILL on the node: its node, though it is the only pod
    (139, "Error", None, ["gpu-7"]),  # SIGSEGV
    (137, "OOMKilled", None, ["gpu-7"]),
    (137, "Error", 0, []),  # deleted: the deletion's SIGKILL at its grace's end, not a death on the node
    (137, "Error", -1, []),  # ... stamped a second early by a node's clock behind the API server's
    (137, "Error", 30, ["gpu-7"]),  # killed as the deletion came (mpi-operator cleaning a pod it thought Running)
    (137, "Error", 20, ["gpu-7"]),  # ... or inside its grace: the deletion had only sent SIGTERM by then
    (137, "OOMKilled", 20, ["gpu-7"]),
    (134, "Error", 20, []),  # SIGABRT after the deletion's SIGTERM: a process aborting as it stops
    (134, "Error", 30, []),  # ... in the second it was asked for
    (134, "Error", 40, ["gpu-7"]),  # ... but 10 s before it: it died on its own
    (143, "Error", None, []),  # SIGTERM: stopped by someone
    (143, "Error", 40, []),
    (2, "Error", None, []),  # the workload's own exit: node or spec, cannot tell from one pod
])
def test_a_pod_killed_on_its_node_is_blamed_even_alone(code, reason, deleted, blamed):
    """`deleted`: the pod's deletionTimestamp (its grace's end, 30 s after the deletion was asked for) is this many
    seconds after its container's end; None: not deleted."""
    killed = pod("t-g1-master-0", "Failed", node="gpu-7", containers=[terminated(code=code, reason=reason)])
    killed["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = "2025-01-01T12:01:00Z"
    if deleted is not None:
        at = T0 + timedelta(minutes=1, seconds=deleted)
        killed["metadata"]["deletionTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        killed["metadata"]["deletionGracePeriodSeconds"] = 30
    assert culprit_nodes([killed], gpu_pods=1) == blamed
    # With a healthy peer that failed at the same moment (torchrun's peers end with it), the killed one is named.
    peer = pod("t-g1-worker-0", "Failed", node="gpu-1", containers=[terminated(code=1)])
    assert culprit_nodes([killed, peer], gpu_pods=2) == blamed


def test_a_deleted_pod_whose_end_is_not_timed_is_not_blamed():
    killed = pod("t-g1-master-0", "Failed", node="gpu-7", containers=[terminated(code=137)])
    killed["metadata"]["deletionTimestamp"] = "2025-01-01T12:01:00Z"
    assert culprit_nodes([killed], gpu_pods=1) == []


def _created_again(name: str, node: str) -> dict:
    """A pod a job's controller created again under a failed pod's name and deleted before the kubelet started it:
    its init container lost (137), its main container never out of PodInitializing."""
    again = pod(name, "Failed", node=node, init=[terminated("ulimits", 137, "ContainerStatusUnknown",
                                                            "The container could not be located when the pod was "
                                                            "terminated")],
                containers=[waiting("PodInitializing")])
    again["metadata"]["deletionTimestamp"] = "2025-01-01T12:01:01Z"
    return again


def test_a_pod_deleted_before_it_ran_is_no_failure_of_its_node():
    """training-operator deletes a PyTorchJob's failed pod, creates it again under the same name and deletes that
    one before it starts (kubeflow/trainer#3419; tests/unit/recorded): the verdict names the pod that ran, and the
    pod created again, wherever it landed, counts as one pod, blames no node and no SIGKILL."""
    def failed(name: str, node: str) -> dict:
        ended = terminated(code=1)
        ended["state"]["terminated"]["finishedAt"] = "2025-01-01T12:00:05Z"
        return pod(name, "Failed", node=node, containers=[ended])

    ran, again = failed("t-g2-worker-0", "n0"), _created_again("t-g2-worker-0", "n9")
    assert never_ran(again) and not never_ran(ran)
    finding = failed_pod([again, ran])
    assert finding is not None and "on node n0: container pytorch exited with code 1" in finding.message
    assert failed_pod([again]) is None
    peer = pod("t-g2-worker-1", "Running", node="n1")
    assert culprit_nodes([ran, again, peer], gpu_pods=2) == ["n0"]
    assert culprit_nodes([again, peer], gpu_pods=2) == []
    # two ranks that failed together, something common to both: the pod created again makes neither "the" one
    assert culprit_nodes([ran, failed("t-g2-worker-1", "n1"), again], gpu_pods=2) == []


@pytest.mark.parametrize(("state", "last", "ran"), [
    ({"waiting": {"reason": "PodInitializing"}}, {}, False),
    ({"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                     "message": "The container could not be located when the pod was terminated"}}, {}, False),
    # the kubelet had seen it running, then could not find it: it ran
    ({"waiting": {"reason": "PodInitializing"}}, {"terminated": {
        "exitCode": 137, "reason": "ContainerStatusUnknown",
        "message": "The container could not be located when the pod was deleted.  The container used to be Running"}},
     True),
    ({"running": {"startedAt": "2025-01-01T12:00:00Z"}}, {}, True),
    ({"terminated": {"exitCode": 128, "reason": "StartError"}}, {}, True),  # an end its kubelet saw
])
def test_a_deleted_pod_never_ran_only_when_no_container_of_it_did(state, last, ran):
    deleted = pod("p", "Failed", node="n0", containers=[{"name": "pytorch", "state": state, "lastState": last}])
    assert never_ran(deleted) is False  # not deleted: whatever its containers say, it is still its controller's
    deleted["metadata"]["deletionTimestamp"] = "2025-01-01T12:01:01Z"
    assert never_ran(deleted) is (not ran)
