"""Runs through the real parts: the operator's job -> the backend controller's pods -> the real scheduler's binding
to fake GPU nodes -> pod phases from kwok. The test writes only what the workload would write (its report).

A cluster of its own (tests/devcluster.py): the test API server with kube-controller-manager, kube-scheduler and
kwok running `DEV_NODES` (default 4) fake nodes of 8 nvidia.com/gpu each. kwok keeps a pod Running until the test
makes its process exit (Controllers.exit_pods, where the workload would exit); faults come from outside: a node's
kubelet stops reporting (Controllers.stop_kubelet), a pod is deleted, a controller is stopped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.apiserver import ApiServer, backend_crd_paths
from tests.cluster.conftest import AT_CRD, StartOperator
from tests.cluster.operator_harness import Cluster, report
from tests.devcluster import GPUS_PER_NODE, Controllers, dev_nodes

# Kubernetes' Job controller completes the pods kwok runs at once; the report may come a little later.
REAL_ENV = {"GPU_ACCEPTANCE_REPORT_GRACE_SECONDS": "60", "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "3"}


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[tuple[ApiServer, list[str], Controllers]]:
    server = ApiServer()
    server.start()
    controllers = Controllers(server)
    try:
        server.install_crds([*backend_crd_paths(), AT_CRD])
        controllers.start()
        nodes = controllers.add_gpu_nodes(dev_nodes())
        yield server, nodes, controllers
    finally:
        controllers.stop()
        server.stop()


@pytest.fixture
def real(real_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator) -> Cluster:
    server, _, _ = real_cluster
    namespace = server.create_namespace(f"real-{uuid.uuid4().hex[:6]}")
    proc = start_operator(server.kubeconfig, [namespace], REAL_ENV)
    return Cluster(server, namespace, proc.log_tail)


def run_pods(cluster: Cluster, name: str) -> list[dict]:
    selector = f"gpu-acceptance.io/test%3D{name},gpu-acceptance.io/generation%3D1"
    return cluster.server.request("GET", f"/api/v1/namespaces/{cluster.ns}/pods?labelSelector={selector}")["items"]


def running_pods(cluster: Cluster, name: str, count: int) -> list[dict]:
    """The run's `count` pods once each is bound to a node and Running (kwok keeps them so until they exit)."""
    def placed() -> list[dict] | None:
        pods = run_pods(cluster, name)
        bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")
                 and (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(pods) == count and len(bound) == count else None

    return cluster.wait(placed, f"the {count} pods of {name}, bound by the scheduler and run by kwok", timeout=120)


def test_job_runs_one_pod_per_fake_gpu_node(real: Cluster, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, controllers = real_cluster
    real.create_test("accept", {"backend": "Job", "nodes": 2})
    pods = running_pods(real, "accept", 2)
    real.wait_phase("accept", "Running", timeout=60)  # the pods run until their processes exit
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert len(set(nodes)) == 2 and set(nodes) <= set(gpu_nodes)  # one per node, on the fake GPU nodes
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Job", "accept-g1")  # made by the real Job controller
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(GPUS_PER_NODE)
    real.write_report("accept", report(1, nodes=tuple(nodes)), place_pods=False)
    status = real.wait_phase("accept", "Succeeded", timeout=120)
    assert status["summary"]["failedNodes"] == []
    controllers.exit_pods(pods, 0)  # then the workload exits, and kwok reports the containers Completed
    # The Job controller completes the Job once its pods have succeeded.
    real.wait(lambda: any(c["type"] == "Complete" and c["status"] == "True"
                          for c in (real.job("Job", "accept-g1") or {}).get("status", {}).get("conditions", [])),
              "the Job controller to mark accept-g1 Complete", timeout=120)


def test_unschedulable_quotes_the_real_scheduler(real: Cluster,
                                                 real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, _ = real_cluster
    real.create_test("greedy", {"backend": "Job", "nodes": 1, "gpusPerNode": 16})
    status = real.wait_phase("greedy", "Failed", timeout=120)
    succeeded = real.condition("greedy", "Succeeded")
    assert succeeded["reason"] == "Unschedulable"
    # The scheduler's own words, then what to do.
    assert f"0/{len(gpu_nodes)} nodes are available: {len(gpu_nodes)} Insufficient nvidia.com/gpu" in \
        succeeded["message"]
    assert "no node has 16 free nvidia.com/gpu" in succeeded["message"]
    assert status["summary"]["result"] == "Failed"
    real.wait(lambda: real.job("Job", "greedy-g1") is None, "the unschedulable Job to be deleted")


def test_a_node_going_not_ready_mid_run_is_named(real: Cluster, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, _, controllers = real_cluster
    real.create_test("lost", {"backend": "Job", "nodes": 2})
    pods = running_pods(real, "lost", 2)
    victim = sorted(p["spec"]["nodeName"] for p in pods)[1]
    controllers.stop_kubelet(victim)
    try:
        # Its kubelet (kwok) stops reporting; the real node lifecycle controller marks it Unknown, taints it and
        # marks its pods not Ready; the operator names it.
        status = real.wait_phase("lost", "Failed", timeout=120)
        succeeded = real.condition("lost", "Succeeded")
        assert succeeded["reason"] == "NodeNotReady"
        assert f"node {victim} is not Ready (Ready=Unknown, NodeStatusUnknown: Kubelet stopped posting node " \
            "status.) while pod lost-g1-" in succeeded["message"]
        assert status["summary"]["failedNodes"] == [victim]  # only the lost node, not its healthy peer
        real.wait(lambda: real.job("Job", "lost-g1") is None, "the run's Job to be deleted (its GPUs freed)")
    finally:
        controllers.start_kubelet(victim)


def test_a_pod_deleted_mid_run_fails_the_run(real: Cluster, real_cluster: tuple[ApiServer, list[str], Controllers]):
    real.create_test("evicted", {"backend": "Job", "nodes": 2})
    pods = running_pods(real, "evicted", 2)
    victim = sorted(pods, key=lambda p: p["metadata"]["name"])[1]["metadata"]["name"]
    real.server.request("DELETE", f"/api/v1/namespaces/{real.ns}/pods/{victim}")
    # The kubelet (kwok) stops the container (SIGTERM, 143); the Job's pod failure policy fails the Job.
    status = real.wait_phase("evicted", "Failed", timeout=180)
    succeeded = real.condition("evicted", "Succeeded")
    assert succeeded["reason"] == "JobFailed", succeeded
    assert "Job evicted-g1 failed" in succeeded["message"], succeeded["message"]
    assert f"{victim}" in succeeded["message"] and "exit code 143" in succeeded["message"], succeeded["message"]
    assert status["summary"]["result"] == "Failed"


@pytest.fixture(scope="module")
def jobset_controller(real_cluster: tuple[ApiServer, list[str], Controllers]) -> Controllers:
    """The real JobSet controller (sigs.k8s.io/jobset at the pinned CRD's version, `make tools` builds it) with its
    webhooks, in the module's cluster."""
    _, _, controllers = real_cluster
    return controllers.start_jobset()


def jobset_run(cluster: Cluster, name: str) -> tuple[list[dict], tuple[str, ...]]:
    """A two-node JobSet run up to Running: the JobSet controller's Job, the Job controller's pods on two nodes."""
    cluster.create_test(name, {"backend": "JobSet", "nodes": 2})
    pods = running_pods(cluster, name, 2)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "Job" and owner["name"].startswith(f"{name}-g1-")  # the JobSet controller's Job
        assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == f"{name}-g1"
    nodes = tuple(sorted(p["spec"]["nodeName"] for p in pods))
    assert len(set(nodes)) == 2
    cluster.wait_phase(name, "Running", timeout=60)
    return pods, nodes


def jobset_condition(cluster: Cluster, name: str, type_: str) -> bool:
    jobset = cluster.job("JobSet", name) or {}
    return any(c["type"] == type_ and c["status"] == "True" for c in jobset.get("status", {}).get("conditions", []))


def test_jobset_passes_through_the_real_jobset_controller(real: Cluster, jobset_controller: Controllers):
    pods, nodes = jobset_run(real, "set")
    real.write_report("set", report(1, nodes=nodes), place_pods=False)
    jobset_controller.exit_pods(pods, 0)
    real.wait(lambda: jobset_condition(real, "set-g1", "Completed"), "the JobSet controller to complete set-g1",
              timeout=120)
    status = real.wait_phase("set", "Succeeded", timeout=120)
    assert status["summary"]["result"] == "Passed" and status["summary"]["failedNodes"] == []
    assert real.condition("set", "Succeeded")["reason"] == "ChecksPassed"


def test_jobset_fails_through_the_real_jobset_controller(real: Cluster, jobset_controller: Controllers):
    pods, nodes = jobset_run(real, "badset")
    real.write_report("badset", report(1, nodes=nodes, failed_node=nodes[1]), place_pods=False)
    jobset_controller.exit_pods(pods, 1)  # the workload exits 1 when a check failed
    real.wait(lambda: jobset_condition(real, "badset-g1", "Failed"), "the JobSet controller to fail badset-g1",
              timeout=120)
    status = real.wait_phase("badset", "Failed", timeout=120)
    assert status["summary"]["failedNodes"] == [nodes[1]]
    succeeded = real.condition("badset", "Succeeded")
    assert succeeded["reason"] == "ChecksFailed"
    assert f"preflight/gpu_count on {nodes[1]}: 7 < 8 GPUs" in succeeded["message"]
