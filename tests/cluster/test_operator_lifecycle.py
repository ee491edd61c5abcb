"""Full runs against the real API server, for every backend: to Succeeded and to Failed on the report's verdict.

The test plays the backend's controller (job status through the status
subresource, in that controller's words), the kubelet (pods with statuses) and the workload (status.report);
the operator is the real `gpu-acceptance operator` process.
"""

from __future__ import annotations

import pytest

from tests.cluster.operator_harness import Cluster, report

API_VERSIONS = {"PyTorchJob": "kubeflow.org/v1", "MPIJob": "kubeflow.org/v2beta1", "Job": "batch/v1",
                "JobSet": "jobset.x-k8s.io/v1alpha2"}
BACKENDS = list(API_VERSIONS)
LABEL_TEST, LABEL_GEN = "gpu-acceptance.io/test", "gpu-acceptance.io/generation"


def start_and_run(cluster: Cluster, name: str, backend: str, nodes: tuple[str, ...]) -> str:
    """Create the test, check the run it starts, play its controller and kubelet up to Running; return the job name."""
    created = cluster.create_test(name, {"backend": backend, "nodes": len(nodes)})
    status = cluster.wait_phase(name, "Pending")
    job_name = f"{name}-g1"
    assert status["job"] == {"apiVersion": API_VERSIONS[backend], "kind": backend, "name": job_name}
    assert status["startTime"] and "completionTime" not in status
    conditions = {c["type"]: (c["status"], c["observedGeneration"]) for c in status["conditions"]}
    assert conditions == {"JobCreated": ("True", 1), "Running": ("Unknown", 1), "Succeeded": ("Unknown", 1)}

    job = cluster.wait_job(backend, job_name)
    assert job["metadata"]["labels"][LABEL_TEST] == name
    assert job["metadata"]["labels"][LABEL_GEN] == "1"
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("AcceptanceTest", name, created["metadata"]["uid"])
    assert cluster.exists(cluster.service_account_path(f"{name}-workload"))
    assert cluster.exists(cluster.role_path(f"{name}-workload"))
    if backend == "Job":  # the headless Service that names index 0 for the static rendezvous
        assert cluster.exists(f"/api/v1/namespaces/{cluster.ns}/services/{job_name}")

    cluster.set_job_condition(backend, job_name, "Created")
    cluster.set_job_condition(backend, job_name, "Running")
    for i, node in enumerate(nodes):
        pod = f"{job_name}-worker-{i}"
        cluster.create_pod(pod, {LABEL_TEST: name, LABEL_GEN: "1"}, node=node)
        cluster.set_pod_status(pod, {"phase": "Running"})
    cluster.wait_phase(name, "Running")
    running = cluster.wait(lambda: (c := cluster.condition(name, "Running")) and f"pods: {len(nodes)} Running"
                           in c["message"] and c, "the Running condition to count the pods")
    assert running["status"] == "True"
    assert running["message"] == f"{backend} {job_name} is Running; pods: {len(nodes)} Running"
    return job_name


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_passes(shared_cluster: Cluster, backend: str):
    cluster = shared_cluster
    job_name = start_and_run(cluster, "accept", backend, ("node-a", "node-b"))
    written = report(1, nodes=("node-a", "node-b"))
    n = len(written["results"])
    cluster.write_report("accept", written)
    cluster.set_job_condition(backend, job_name, "Succeeded")
    status = cluster.wait_phase("accept", "Succeeded")

    assert status["summary"] == {
        "result": "Passed", "passed": n, "failed": 0, "total": n, "allReduceBusbwGBps": 371.5,
        "ddpThroughputPerGpu": 400000.0, "ddpThroughputUnit": "tokens/s", "scalingEfficiency": 0.95,
        "failedNodes": [],
    }
    assert status["completionTime"] >= status["startTime"]
    succeeded = cluster.condition("accept", "Succeeded")
    assert (succeeded["status"], succeeded["reason"]) == ("True", "ChecksPassed")
    assert f"all {n} checks passed" in succeeded["message"]
    assert cluster.condition("accept", "Running")["status"] == "False"

    (row,) = cluster.kubectl_table()
    assert (row["NAME"], row["PHASE"], row["REASON"], row["BUS BW"], row["NODES"]) == (
        "accept", "Succeeded", "ChecksPassed", "371.5", "2")
    (wide,) = cluster.kubectl_table("-o", "wide")
    assert (wide["BACKEND"], wide["PROFILE"]) == (backend, "h100-sxm")

    # The finished job stays for its logs (ttlSecondsAfterFinished); the workload's write access goes.
    assert cluster.job(backend, job_name) is not None
    cluster.wait(lambda: not cluster.exists(cluster.service_account_path("accept-workload")),
                 "the workload ServiceAccount to be removed")
    assert cluster.wait_event("accept", "ChecksPassed")[0] == "Normal"  # events are posted asynchronously
    reasons = [reason for _, reason, _ in cluster.events("accept")]
    assert {"RunStarted", "Running", "ChecksPassed"} <= set(reasons)
    # No finalizer and no kopf bookkeeping on the object: the operator only watches tests (a burst of
    # creations costs no request for them, and a test never hangs in Terminating once the operator is gone).
    meta = cluster.get_test("accept")["metadata"]
    assert not meta.get("finalizers")
    assert [k for k in meta.get("annotations", {}) if "kopf" in k or "last-handled" in k] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_fails_on_the_report(shared_cluster: Cluster, backend: str):
    cluster = shared_cluster
    job_name = start_and_run(cluster, "accept", backend, ("node-a", "node-b"))
    written = report(1, nodes=("node-a", "node-b"), failed_node="node-b")
    n = len(written["results"])
    cluster.write_report("accept", written)
    cluster.set_job_condition(backend, job_name, "Failed", message="1 Worker replica(s) failed")
    status = cluster.wait_phase("accept", "Failed")

    summary = status["summary"]
    assert (summary["result"], summary["passed"], summary["failed"], summary["total"]) == ("Failed", n - 1, 1, n)
    assert summary["failedNodes"] == ["node-b"]
    succeeded = cluster.condition("accept", "Succeeded")
    assert (succeeded["status"], succeeded["reason"]) == ("False", "ChecksFailed")
    assert f"1 of {n} checks failed: preflight/gpu_count on node-b: 7 < 8 GPUs" in succeeded["message"]
    assert "nodes to blame: node-b" in succeeded["message"]
    (row,) = cluster.kubectl_table()
    assert (row["PHASE"], row["REASON"], row["BUS BW"]) == ("Failed", "ChecksFailed", "371.5")
    assert cluster.wait_event("accept", "ChecksFailed")[0] == "Warning"
