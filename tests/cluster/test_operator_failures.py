"""Every way a run goes wrong ends in Failed with the documented reason and a message that says what happened.

Reasons: ReportMissing, JobFailed, Unschedulable, Timeout, BackendNotInstalled,
InvalidSpec (docs/troubleshooting.md). The operator runs with short test
timings: report grace 1s, and 2s of patience for pods that cannot start.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, OperatorProcess

LABELS = {"gpu-acceptance.io/test": "broken", "gpu-acceptance.io/generation": "1"}
# registry.invalid/: the image that cannot be pulled is one the operator allows (userPolicy.allowedImages).
SHORT_GRACE = {"GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "2", "GPU_ACCEPTANCE_ALLOWED_IMAGES": "registry.invalid/"}


def failed(cluster: Cluster, name: str, reason: str) -> dict:
    status = cluster.wait_phase(name, "Failed")
    succeeded = cluster.condition(name, "Succeeded")
    assert (succeeded["status"], succeeded["reason"]) == ("False", reason), succeeded
    assert status["summary"]["result"] == "Failed"
    assert status["completionTime"]
    assert cluster.wait_event(name, reason)[0] == "Warning"
    return succeeded


@pytest.fixture
def impatient(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator) -> Cluster:
    """The operator with a 2-second grace for pods that cannot be scheduled or cannot pull their image."""
    proc: OperatorProcess = start_operator(acceptance_crd.kubeconfig, [namespace], SHORT_GRACE)
    return Cluster(acceptance_crd, namespace, proc.log_tail)


def test_report_missing(cluster: Cluster):
    cluster.create_test("broken", {})
    cluster.wait_job("PyTorchJob", "broken-g1")
    cluster.set_job_condition("PyTorchJob", "broken-g1", "Running")
    cluster.set_job_condition("PyTorchJob", "broken-g1", "Succeeded")
    message = failed(cluster, "broken", "ReportMissing")["message"]
    assert "PyTorchJob broken-g1 succeeded but no report for generation 1 was written" in message
    assert "may get and patch the run's evidence ConfigMaps" in message  # the workload's only write (issue 22)
    assert "configmaps/<test>-evidence-job" in message


def test_stale_report_counts_as_missing(cluster: Cluster):
    """A report left by an earlier generation says nothing about this run."""
    cluster.create_test("broken", {})
    cluster.wait_job("PyTorchJob", "broken-g1")
    from tests.cluster.operator_harness import report

    cluster.write_report("broken", report(generation=7))
    cluster.set_job_condition("PyTorchJob", "broken-g1", "Succeeded")
    message = failed(cluster, "broken", "ReportMissing")["message"]
    assert "generation 7, not 1" in message


def test_job_failed_names_the_oom_killed_pod(cluster: Cluster):
    cluster.create_test("broken", {"nodes": 2})
    cluster.wait_job("PyTorchJob", "broken-g1")
    cluster.create_pod("broken-g1-master-0", LABELS, node="gpu-node-3")
    cluster.set_pod_status("broken-g1-master-0", {"phase": "Running"})
    cluster.create_pod("broken-g1-worker-0", LABELS, node="gpu-node-7")
    cluster.set_pod_status("broken-g1-worker-0", {"phase": "Failed", "containerStatuses": [{
        "name": "pytorch", "image": "ghcr.io/gpu-acceptance/workload:test", "imageID": "", "ready": False,
        "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                    "startedAt": "2025-01-01T00:00:00Z",
                                                    "finishedAt": "2025-01-01T00:01:00Z"}}}]})
    cluster.set_job_condition("PyTorchJob", "broken-g1", "Failed", message="1 Worker replica(s) failed.")
    message = failed(cluster, "broken", "JobFailed")["message"]
    assert "pod broken-g1-worker-0 on node gpu-node-7" in message
    assert "container pytorch exited with code 137 (OOMKilled)" in message


def test_unschedulable_names_the_missing_resource_and_stops_the_job(impatient: Cluster):
    cluster = impatient
    cluster.create_test("broken", {"nodes": 4})
    cluster.wait_job("PyTorchJob", "broken-g1")
    cluster.create_pod("broken-g1-master-0", LABELS)
    message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available."
    cluster.set_pod_status("broken-g1-master-0", {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastTransitionTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}]})
    cluster.scheduling_event("broken-g1-master-0", message)
    text = failed(cluster, "broken", "Unschedulable")["message"]
    assert "pod broken-g1-master-0 has been Pending for" in text
    assert "4 Insufficient nvidia.com/gpu" in text
    assert "no node has 8 free nvidia.com/gpu" in text
    assert cluster.job("PyTorchJob", "broken-g1") is None  # its pods must not grab GPUs later


def test_image_pull_backoff_fails_the_job(impatient: Cluster):
    cluster = impatient
    cluster.create_test("broken", {"image": "registry.invalid/workload:nope"})
    cluster.wait_job("PyTorchJob", "broken-g1")
    cluster.create_pod("broken-g1-master-0", LABELS, node="gpu-node-1")
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "registry.invalid/workload:nope"'}
    cluster.set_pod_status("broken-g1-master-0", {"phase": "Pending", "containerStatuses": [{
        "name": "pytorch", "image": "registry.invalid/workload:nope", "imageID": "", "ready": False,
        "restartCount": 0, "state": {"waiting": waiting}}]})
    text = failed(cluster, "broken", "ImagePullFailed")["message"]
    assert "pod broken-g1-master-0 on node gpu-node-1: container pytorch is ImagePullBackOff" in text
    assert "registry.invalid/workload:nope" in text
    assert cluster.job("PyTorchJob", "broken-g1") is None


def test_timeout_deletes_the_children(cluster: Cluster):
    """timeoutSeconds has a floor of 60s; rather than wait, the test moves the run's startTime into the past."""
    cluster.create_test("broken", {"timeoutSeconds": 60})
    cluster.wait_job("PyTorchJob", "broken-g1")
    cluster.set_job_condition("PyTorchJob", "broken-g1", "Running")
    cluster.age_run_until_failed("broken")
    message = failed(cluster, "broken", "Timeout")["message"]
    assert "no verdict within spec.timeoutSeconds=60" in message
    assert "PyTorchJob broken-g1 is Running" in message
    assert cluster.job("PyTorchJob", "broken-g1") is None
    assert not cluster.exists(cluster.service_account_path("broken-workload"))
    assert not cluster.exists(cluster.role_path("broken-workload"))


def test_kubeflow_deadline_is_a_timeout(cluster: Cluster):
    cluster.create_test("broken", {"backend": "MPIJob", "timeoutSeconds": 60})
    cluster.wait_job("MPIJob", "broken-g1")
    cluster.set_job_condition("MPIJob", "broken-g1", "Failed", reason="DeadlineExceeded",
                              message="MPIJob broken-g1 has failed because it was active longer than specified "
                                      "deadline")
    message = failed(cluster, "broken", "Timeout")["message"]
    assert "spec.timeoutSeconds=60" in message and "deadline" in message


def test_job_deadline_is_a_timeout_and_the_service_goes_with_the_job(cluster: Cluster):
    """backend Job: the Job controller's DeadlineExceeded is the run's Timeout; stopping the Job removes its
    headless Service too."""
    cluster.create_test("broken", {"backend": "Job", "nodes": 2, "timeoutSeconds": 60})
    cluster.wait_job("Job", "broken-g1")
    service = f"/api/v1/namespaces/{cluster.ns}/services/broken-g1"
    assert cluster.exists(service)
    cluster.set_job_condition("Job", "broken-g1", "Failed", reason="DeadlineExceeded",
                              message="Job was active longer than specified deadline")
    message = failed(cluster, "broken", "Timeout")["message"]
    assert "Job broken-g1 was stopped at spec.timeoutSeconds=60: Job was active longer than specified deadline" \
        in message
    # The run is over; a new generation stops the old Job and takes its Service with it.
    cluster.patch_spec("broken", {"timeoutSeconds": 61})
    cluster.wait(lambda: cluster.job("Job", "broken-g2"), "the second generation's Job")
    cluster.wait(lambda: cluster.job("Job", "broken-g1") is None and not cluster.exists(service),
                 "the first generation's Job and Service to be deleted")


def test_job_failed_by_its_pod_failure_policy_quotes_the_job_controller(cluster: Cluster):
    """The pods may be gone (TTL, node lost): the Job's own Failed condition still names the pod and exit code."""
    cluster.create_test("broken", {"backend": "Job", "nodes": 2})
    cluster.wait_job("Job", "broken-g1")
    cluster.set_job_condition("Job", "broken-g1", "Running")
    cluster.set_job_condition("Job", "broken-g1", "Failed", reason="PodFailurePolicy",
                              message=f"Container workload for pod {cluster.ns}/broken-g1-1-x7k2p failed with "
                                      "exit code 2 matching FailJob rule at index 0")
    message = failed(cluster, "broken", "JobFailed")["message"]
    assert "Job broken-g1 failed: Container workload for pod" in message
    assert "broken-g1-1-x7k2p failed with exit code 2" in message


def _deep(levels: int) -> dict:
    out: dict = {"leaf": "x"}
    for _ in range(levels):
        out = {"a": out}
    return out


@pytest.mark.parametrize(("spec", "field", "advice"), [
    # What neither the schema nor CEL can say (a mount over /dev/shm and a label value with spaces the CRD refuses
    # now: tests/cluster/test_manifest_agreement.py).
    ({"schedule": "5-1 * * * *"}, "spec.schedule", "'0 3 * * *'"),
    ({"pod": {"volumes": [{"name": "deep", "csi": {"driver": "d", "volumeAttributes": _deep(20)}}]}},
     "spec.pod.volumes[0].csi", "nested more than 16 levels deep"),
    # Least privilege: what the chart has not allowed (userPolicy) is refused, naming the chart value.
    ({"pod": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}},
     "spec.pod.volumes[0].hostPath", "userPolicy.allowHostPath"),
    ({"pod": {"serviceAccountName": "default"}}, "spec.pod.serviceAccountName", "userPolicy.allowServiceAccountName"),
    ({"pod": {"hostNetwork": True}}, "spec.pod.hostNetwork", "userPolicy.allowHostNetwork"),
    ({"pod": {"volumes": [{"name": "cfg", "configMap": "cfg"}]}},
     "spec.pod.volumes[0].configMap", "a volume source is an object"),
])
def test_invalid_spec_names_the_field(shared_cluster: Cluster, spec: dict, field: str, advice: str):
    """Specs the schema admits but the operator must refuse: nothing is created, the message names the field."""
    cluster = shared_cluster
    cluster.create_test("broken", spec)  # the API server accepts it
    message = failed(cluster, "broken", "InvalidSpec")["message"]
    assert message.startswith(field), message
    assert advice in message
    assert cluster.condition("broken", "JobCreated")["status"] == "False"
    assert cluster.condition("broken", "JobCreated")["reason"] == "InvalidSpec"
    assert cluster.jobs("PyTorchJob") == []
    assert not cluster.exists(cluster.service_account_path("broken-workload"))


def test_backend_not_installed(pytorch_only_apiserver: ApiServer, start_operator: StartOperator):
    server = pytorch_only_apiserver
    namespace = server.create_namespace(f"backend-{uuid.uuid4().hex[:6]}")
    proc = start_operator(server.kubeconfig, [namespace])
    cluster = Cluster(server, namespace, proc.log_tail)
    cluster.create_test("broken", {"backend": "MPIJob"})
    message = failed(cluster, "broken", "BackendNotInstalled")["message"]
    assert "mpijobs.kubeflow.org" in message and "mpi-operator" in message
    created = cluster.condition("broken", "JobCreated")
    assert (created["status"], created["reason"]) == ("False", "BackendNotInstalled")
    assert "job" not in cluster.status("broken")
    assert not cluster.exists(cluster.service_account_path("broken-workload"))
    cluster.create_test("no-jobset", {"backend": "JobSet"})
    message = failed(cluster, "no-jobset", "BackendNotInstalled")["message"]
    assert "jobsets.jobset.x-k8s.io is not installed" in message and "JobSet controller" in message
    # The same server runs PyTorchJob tests: that backend is there; Job needs no CRD at all.
    cluster.create_test("fine", {"backend": "PyTorchJob"})
    cluster.wait_phase("fine", "Pending")
    cluster.create_test("plain", {"backend": "Job"})
    cluster.wait_phase("plain", "Pending")
    assert cluster.job("Job", "plain-g1") is not None
