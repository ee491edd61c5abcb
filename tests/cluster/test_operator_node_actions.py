"""spec.onFailure marks the nodes a failed report blames, and only when the operator may touch nodes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, report


@pytest.fixture
def nodes(acceptance_crd: ApiServer) -> Iterator[tuple[str, str]]:
    """Two Node objects (cluster-scoped, so uniquely named); one carries a taint of its own."""
    suffix = uuid.uuid4().hex[:6]
    good, bad = f"gpu-good-{suffix}", f"gpu-bad-{suffix}"
    for name in (good, bad):
        acceptance_crd.request("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"pool": "h100"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        })
    yield good, bad
    for name in (good, bad):
        acceptance_crd.request("DELETE", f"/api/v1/nodes/{name}", expect=(200, 404))


def node(server: ApiServer, name: str) -> dict:
    return server.request("GET", f"/api/v1/nodes/{name}")


def run_to_failure(cluster: Cluster, on_failure: str, good: str, bad: str) -> None:
    cluster.create_test("blame", {"nodes": 2, "onFailure": on_failure})
    cluster.wait_job("PyTorchJob", "blame-g1")
    cluster.write_report("blame", report(1, nodes=(good, bad), failed_node=bad))
    status = cluster.wait_phase("blame", "Failed")
    assert status["summary"]["failedNodes"] == [bad]


@pytest.mark.parametrize("action", ["label", "taint", "cordon"])
def test_blamed_node_is_marked(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator,
                               nodes: tuple[str, str], action: str):
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], {"GPU_ACCEPTANCE_NODE_ACTIONS": "true"})
    cluster = Cluster(acceptance_crd, namespace, proc.log_tail)
    good, bad = nodes
    taints = node(acceptance_crd, bad)["spec"]["taints"]  # ours plus what admission added (not-ready)
    run_to_failure(cluster, action, good, bad)
    event = cluster.wait_event("blame", "NodeActionApplied")
    assert bad in event[2] and good not in event[2]

    marked, untouched = node(acceptance_crd, bad), node(acceptance_crd, good)
    if action == "label":
        assert marked["metadata"]["labels"] == {"pool": "h100", "gpu-acceptance.io/status": "failed"}
    elif action == "taint":
        assert marked["spec"]["taints"] == [
            *taints, {"key": "gpu-acceptance.io/failed", "value": "true", "effect": "NoSchedule"},
        ]
    else:
        assert marked["spec"]["unschedulable"] is True
    assert untouched["metadata"]["labels"] == {"pool": "h100"}
    assert untouched["spec"]["taints"] == taints and not untouched["spec"].get("unschedulable")


def test_node_actions_off_means_skipped_with_an_event(cluster: Cluster, acceptance_crd: ApiServer,
                                                       nodes: tuple[str, str]):
    good, bad = nodes
    run_to_failure(cluster, "label", good, bad)
    event = cluster.wait_event("blame", "NodeActionSkipped")
    assert "spec.onFailure=label" in event[2] and "nodeActions.enabled" in event[2] and bad in event[2]
    assert "gpu-acceptance.io/status" not in node(acceptance_crd, bad)["metadata"]["labels"]


def test_passing_run_touches_no_node(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator,
                                     nodes: tuple[str, str]):
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], {"GPU_ACCEPTANCE_NODE_ACTIONS": "true"})
    cluster = Cluster(acceptance_crd, namespace, proc.log_tail)
    good, bad = nodes
    cluster.create_test("blame", {"nodes": 2, "onFailure": "cordon"})
    cluster.wait_job("PyTorchJob", "blame-g1")
    cluster.write_report("blame", report(1, nodes=(good, bad)))
    cluster.wait_phase("blame", "Succeeded")
    assert not node(acceptance_crd, bad)["spec"].get("unschedulable")
    assert not [r for _, r, _ in cluster.events("blame") if r.startswith("NodeAction")]
