"""A node-pool sweep through the real parts: the operator's child tests -> their Jobs -> the real Job controller's
pods -> the real scheduler's binding to kwok GPU nodes. The test writes only what each child's workload would
write (its report) and makes the pods' processes exit.

A cluster of its own (nine fake GPU nodes: the sweep's pool, one more than the eight the issue asks for), so the
other real-controller tests keep their four.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.apiserver import ApiServer, backend_crd_paths
from tests.cluster.conftest import AT_CRD, StartOperator
from tests.cluster.operator_harness import Cluster, report
from tests.devcluster import Controllers

SWEEP_NODES = 9
SWEEP = "gpu-acceptance.io/sweep"
NODE = "gpu-acceptance.io/node"
REAL_ENV = {"GPU_ACCEPTANCE_REPORT_GRACE_SECONDS": "60", "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "5"}


@pytest.fixture(scope="module")
def sweep_cluster() -> Iterator[tuple[ApiServer, list[str], Controllers]]:
    server = ApiServer()
    server.start()
    controllers = Controllers(server)
    try:
        server.install_crds([*backend_crd_paths(), AT_CRD])
        controllers.start()
        nodes = controllers.add_gpu_nodes(SWEEP_NODES)
        yield server, nodes, controllers
    finally:
        controllers.stop()
        server.stop()


@pytest.fixture
def real(sweep_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator) -> Cluster:
    server, _, _ = sweep_cluster
    namespace = server.create_namespace(f"sweep-{uuid.uuid4().hex[:6]}")
    proc = start_operator(server.kubeconfig, [namespace], REAL_ENV)
    return Cluster(server, namespace, proc.log_tail)


def children(cluster: Cluster, parent: str) -> list[dict]:
    return cluster.server.request("GET", f"{cluster.test_path()}?labelSelector={SWEEP}%3D{parent}")["items"]


def pods_of(cluster: Cluster, child: dict) -> list[dict]:
    label = child["metadata"]["labels"].get("gpu-acceptance.io/test") or child["metadata"]["name"]
    selector = f"gpu-acceptance.io/test%3D{label}"
    return cluster.server.request("GET", f"/api/v1/namespaces/{cluster.ns}/pods?labelSelector={selector}")["items"]


def play_workloads(cluster: Cluster, controllers: Controllers, parent: str, timeout: float = 300.0) -> set[str]:
    """Each child test's workload: once its pods run (bound by the scheduler, run by kwok), its report names the
    pods' nodes and its processes exit 0. Returns the names of the children it reported for."""
    reported: set[str] = set()

    def step() -> bool:
        for c in children(cluster, parent):
            name = c["metadata"]["name"]
            if name in reported or not (c.get("status") or {}).get("run"):
                continue
            pods = [p for p in pods_of(cluster, c) if (p.get("spec") or {}).get("nodeName")
                    and (p.get("status") or {}).get("phase") == "Running"]
            if len(pods) == c["spec"]["nodes"]:
                cluster.write_report(name, report(1, nodes=tuple(sorted(p["spec"]["nodeName"] for p in pods))),
                                     place_pods=False)
                controllers.exit_pods(pods, 0)
                reported.add(name)
        return (cluster.status(parent).get("phase") or "Running") in ("Succeeded", "Failed")

    cluster.wait(step, f"the sweep {parent} to end", timeout=timeout)
    return reported


def test_a_sweep_completes_both_stages_through_the_real_controllers(
        real: Cluster, sweep_cluster: tuple[ApiServer, list[str], Controllers]):
    _, nodes, controllers = sweep_cluster
    real.create_test("pool", {"sweep": True, "backend": "Job", "maxConcurrent": 4,
                              "placement": {"nodeSelector": {"type": "kwok"}}})
    reported = play_workloads(real, controllers, "pool")
    status = real.status("pool")
    succeeded = real.condition("pool", "Succeeded")
    assert status["phase"] == "Succeeded", succeeded
    assert status["sweep"]["passed"] == len(nodes) and status["sweep"]["interNode"] == "Succeeded", status["sweep"]
    assert f"all {len(nodes)} nodes passed; inter-node stage over {len(nodes)} nodes Succeeded" in \
        succeeded["message"]
    stage = next(c for c in children(real, "pool") if not c["metadata"]["annotations"][NODE])
    assert stage["metadata"]["name"] in reported and stage["status"]["phase"] == "Succeeded"
    # The stage's pods ran on every node that passed, one each: the scheduler accepted the pinning.
    assert sorted(p["spec"]["nodeName"] for p in pods_of(real, stage)) == sorted(nodes)


def test_pods_the_api_server_refuses_are_named_not_a_missing_controller(real: Cluster):
    """A user's node affinity the API server refuses in a pod (two values for a node field): the Job controller's
    FailedCreate event says why, and the run fails with those words instead of waiting for its timeout or blaming
    the backend's controller."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-0", "gpu-node-1"]}]}]}}}
    real.create_test("refused", {"backend": "Job", "nodes": 1, "placement": {"affinity": affinity}})
    status = real.wait_phase("refused", "Failed", timeout=90)
    succeeded = real.condition("refused", "Succeeded")
    assert succeeded["reason"] == "PodsRefused", succeeded
    assert "the API server refused the pods of Job refused-g1" in succeeded["message"], succeeded["message"]
    assert "must be only one value when `operator` is 'In' or 'NotIn' for node field selector" in \
        succeeded["message"], succeeded["message"]
    assert status["summary"]["failedNodes"] == []
    real.wait(lambda: real.job("Job", "refused-g1") is None, "the refused Job to be deleted")
