"""Runs through the real parts: the operator's job -> the backend controller's pods -> the real scheduler's binding
to fake GPU nodes -> pod phases from kwok. The test writes only what the workload would write (its report).

A cluster of its own (tests/devcluster.py): the test API server with kube-controller-manager, kube-scheduler and
kwok running `DEV_NODES` (default 4) fake nodes of 8 nvidia.com/gpu each.
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
def real_cluster() -> Iterator[tuple[ApiServer, list[str]]]:
    server = ApiServer()
    server.start()
    controllers = Controllers(server)
    try:
        server.install_crds([*backend_crd_paths(), AT_CRD])
        controllers.start()
        nodes = controllers.add_gpu_nodes(dev_nodes())
        yield server, nodes
    finally:
        controllers.stop()
        server.stop()


@pytest.fixture
def real(real_cluster: tuple[ApiServer, list[str]], start_operator: StartOperator) -> Cluster:
    server, _ = real_cluster
    namespace = server.create_namespace(f"real-{uuid.uuid4().hex[:6]}")
    proc = start_operator(server.kubeconfig, [namespace], REAL_ENV)
    return Cluster(server, namespace, proc.log_tail)


def run_pods(cluster: Cluster, name: str) -> list[dict]:
    selector = f"gpu-acceptance.io/test%3D{name},gpu-acceptance.io/generation%3D1"
    return cluster.server.request("GET", f"/api/v1/namespaces/{cluster.ns}/pods?labelSelector={selector}")["items"]


def test_job_runs_one_pod_per_fake_gpu_node(real: Cluster, real_cluster: tuple[ApiServer, list[str]]):
    _, gpu_nodes = real_cluster
    real.create_test("accept", {"backend": "Job", "nodes": 2})

    def placed() -> list[dict] | None:
        pods = run_pods(real, "accept")
        bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")
                 and (p.get("status") or {}).get("phase") in ("Running", "Succeeded")]
        return pods if len(pods) == 2 and len(bound) == 2 else None

    pods = real.wait(placed, "the Job controller's two pods, bound by the scheduler and run by kwok", timeout=120)
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert len(set(nodes)) == 2 and set(nodes) <= set(gpu_nodes)  # one per node, on the fake GPU nodes
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Job", "accept-g1")  # made by the real Job controller
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(GPUS_PER_NODE)
    real.write_report("accept", report(1, nodes=tuple(nodes)), place_pods=False)
    status = real.wait_phase("accept", "Succeeded", timeout=120)
    assert status["summary"]["failedNodes"] == []
    # The Job controller completes the Job once kwok has ended its pods.
    real.wait(lambda: any(c["type"] == "Complete" and c["status"] == "True"
                          for c in (real.job("Job", "accept-g1") or {}).get("status", {}).get("conditions", [])),
              "the Job controller to mark accept-g1 Complete", timeout=120)


def test_unschedulable_quotes_the_real_scheduler(real: Cluster, real_cluster: tuple[ApiServer, list[str]]):
    _, gpu_nodes = real_cluster
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
