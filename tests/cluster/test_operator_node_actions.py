"""spec.onFailure marks the nodes a failed report blames, and only when the operator may touch nodes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, node_actions_env, report


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
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], node_actions_env(namespace))
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
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], node_actions_env(namespace))
    cluster = Cluster(acceptance_crd, namespace, proc.log_tail)
    good, bad = nodes
    cluster.create_test("blame", {"nodes": 2, "onFailure": "cordon"})
    cluster.wait_job("PyTorchJob", "blame-g1")
    cluster.write_report("blame", report(1, nodes=(good, bad)))
    cluster.wait_phase("blame", "Succeeded")
    assert not node(acceptance_crd, bad)["spec"].get("unschedulable")
    assert not [r for _, r, _ in cluster.events("blame") if r.startswith("NodeAction")]


def pass_on(cluster: Cluster, name: str, nodes: tuple[str, ...], spec: dict) -> None:
    cluster.create_test(name, {"nodes": len(nodes), **spec})
    cluster.wait_job("PyTorchJob", f"{name}-g1")
    cluster.write_report(name, report(1, nodes=nodes))
    cluster.wait_phase(name, "Succeeded")


def test_a_pass_uncordons_only_what_the_operator_cordoned(acceptance_crd: ApiServer, namespace: str,
                                                          start_operator: StartOperator, nodes: tuple[str, str]):
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], node_actions_env(namespace))
    cluster = Cluster(acceptance_crd, namespace, proc.log_tail)
    good, bad = nodes
    run_to_failure(cluster, "cordon", good, bad)  # the operator cordons bad, and says so on the node
    cluster.wait(lambda: node(acceptance_crd, bad)["spec"].get("unschedulable"), "bad to be cordoned")
    assert node(acceptance_crd, bad)["metadata"]["annotations"]["gpu-acceptance.io/cordoned-by"] == f"{namespace}/blame"
    acceptance_crd.request("PATCH", f"/api/v1/nodes/{good}", {"spec": {"unschedulable": True}},
                           content_type="application/merge-patch+json")  # an admin's own cordon
    pass_on(cluster, "repaired", (good, bad), {"onPass": {"uncordon": True}})
    cluster.wait(lambda: not node(acceptance_crd, bad)["spec"].get("unschedulable"), "bad to be uncordoned")
    assert "gpu-acceptance.io/cordoned-by" not in (node(acceptance_crd, bad)["metadata"].get("annotations") or {})
    left = cluster.wait_event("repaired", "NodeActionLeft")
    assert left[2] == f"spec.onPass: {good}: cordoned, but not by this operator: left cordoned"
    assert node(acceptance_crd, good)["spec"]["unschedulable"] is True


def test_on_pass_without_node_actions_is_skipped_with_an_event_and_the_gauge_survives_a_restart(
        acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator, nodes: tuple[str, str]):
    proc = start_operator(acceptance_crd.kubeconfig, [namespace])
    cluster = Cluster(acceptance_crd, namespace, proc.log_tail)
    good, bad = nodes
    pass_on(cluster, "gate", (good,), {"onPass": {"removeTaints": ["nvidia.com/gpu"], "label": True}})
    event = cluster.wait_event("gate", "NodeActionSkipped")
    assert "spec.onPass" in event[2] and "nodeActions.enabled" in event[2] and good in event[2]
    assert node(acceptance_crd, good)["spec"]["taints"][0]["key"] == "nvidia.com/gpu"  # untouched
    # The gauge does not need node actions: set at the pass, and restored from the test's status after a restart.
    passed = cluster.wait(lambda: proc.sample("gpu_acceptance_node_last_pass_timestamp_seconds", node=good),
                          "the last-pass gauge")
    completed = cluster.status("gate")["completionTime"]
    assert abs(passed - datetime.strptime(completed, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=timezone.utc).timestamp()) <= 2
    proc.restart()
    restored = cluster.wait(lambda: proc.sample("gpu_acceptance_node_last_pass_timestamp_seconds", node=good),
                            "the gauge restored from the test's status")
    assert restored == datetime.strptime(completed, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    assert proc.sample("gpu_acceptance_node_last_pass_timestamp_seconds", node=bad) is None


def test_a_validated_node_that_fails_loses_its_passed_label(acceptance_crd: ApiServer, namespace: str,
                                                            start_operator: StartOperator, nodes: tuple[str, str]):
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], node_actions_env(namespace))
    cluster = Cluster(acceptance_crd, namespace, proc.log_tail)
    good, bad = nodes
    pass_on(cluster, "first", (good, bad), {"onPass": {"label": True}})
    cluster.wait(lambda: "gpu-acceptance.io/passed" in node(acceptance_crd, bad)["metadata"]["labels"], "the labels")
    cluster.create_test("blame", {"nodes": 2, "onPass": {"label": True}})  # onFailure: none
    cluster.wait_job("PyTorchJob", "blame-g1")
    cluster.write_report("blame", report(1, nodes=(good, bad), failed_node=bad))
    cluster.wait_phase("blame", "Failed")
    cluster.wait(lambda: "gpu-acceptance.io/passed" not in node(acceptance_crd, bad)["metadata"]["labels"],
                 "the failed node's passed label to go")
    assert "gpu-acceptance.io/passed" in node(acceptance_crd, good)["metadata"]["labels"]
    assert "gpu-acceptance.io/passed-run" in node(acceptance_crd, bad)["metadata"]["annotations"]  # its last pass
    assert "gpu-acceptance.io/status" not in node(acceptance_crd, bad)["metadata"]["labels"]  # not asked
    event = cluster.wait_event("blame", "NodeActionApplied")
    assert event[2] == f"removed label gpu-acceptance.io/passed: {bad}"
