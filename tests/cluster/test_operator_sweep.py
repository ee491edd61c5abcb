"""A node-pool sweep against the real API server: every matching node gets a single-node test, at most
maxConcurrent at a time, then the nodes that passed are tested together.

The test creates the Node objects (cluster-scoped: labelled with its own pool so no other test's sweep sees
them), plays Kubeflow and the workload for each child test (tests/cluster/operator_harness.py), and watches
the children while it does, to check that no more than maxConcurrent run at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.operator_harness import Cluster, OperatorProcess, report

SWEEP = "gpu-acceptance.io/sweep"
NODE = "gpu-acceptance.io/node"


@pytest.fixture
def pool(cluster: Cluster) -> Iterator[list[str]]:
    """Eight Node objects labelled pool=<this test's namespace>; deleted afterwards."""
    names = [f"{cluster.ns}-gpu-{i}" for i in range(8)]
    for name in names:
        cluster.server.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"pool": cluster.ns, "kubernetes.io/hostname": name}}})
    yield names
    for name in names:
        cluster.server.request("DELETE", f"/api/v1/nodes/{name}", expect=(200, 404))


def children(cluster: Cluster, parent: str) -> list[dict]:
    return cluster.server.request("GET", f"{cluster.test_path()}?labelSelector={SWEEP}%3D{parent}")["items"]


def active(items: list[dict]) -> list[dict]:
    return [c for c in items if (c.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def test_a_sweep_tests_every_node_with_at_most_max_concurrent_at_once(cluster: Cluster, pool: list[str]):
    cluster.create_test("pool", {"sweep": True, "maxConcurrent": 3, "placement": {"nodeSelector": {
        "pool": cluster.ns}}})
    bad = pool[5]
    seen_at_once, reported = 0, set()

    def step() -> bool:
        """Deliver one pending single-node report; done when every node has one."""
        nonlocal seen_at_once
        items = [c for c in children(cluster, "pool") if c["metadata"]["annotations"][NODE]]
        seen_at_once = max(seen_at_once, len(active(items)))
        assert len(active(items)) <= 3, [c["metadata"]["name"] for c in active(items)]
        for c in items:
            node, name = c["metadata"]["annotations"][NODE], c["metadata"]["name"]
            ready = (c.get("status") or {}).get("run") and (c.get("status") or {}).get("phase") == "Pending"
            if node not in reported and ready:
                assert c["spec"]["nodes"] == 1 and not c["spec"].get("sweep")
                cluster.write_report(name, report(1, nodes=(node,), failed_node=bad if node == bad else None))
                reported.add(node)
                return False
        return len(reported) == len(pool)

    # Three start at once and wait: nothing finishes before the test delivers a report.
    cluster.wait(lambda: len(active(children(cluster, "pool"))) == 3, "three single-node tests")
    progress = cluster.wait(lambda: (s := cluster.status("pool").get("sweep")) and s["running"] == 3 and s,
                            "the sweep's progress")
    assert (progress["total"], progress["pending"], progress["stage"]) == (8, 5, "nodes")
    (row,) = [r for r in cluster.kubectl_table("-o", "wide") if r["NAME"] == "pool"]
    assert row["SWEEP"] == "0/8 passed, 0 failed, 3 running, 5 pending"
    cluster.wait(step, "every node's single-node test", timeout=240)
    assert seen_at_once == 3

    # Then one test over the seven nodes that passed.
    stage = cluster.wait(lambda: next((c for c in children(cluster, "pool")
                                       if not c["metadata"]["annotations"][NODE]
                                       and (c.get("status") or {}).get("run")), None), "the inter-node stage")
    assert stage["spec"]["nodes"] == 7
    pinned = stage["spec"]["placement"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # By the nodes' hostname labels (here their names): a pod may not name more than one node in a node field.
    (term,) = pinned["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                          "values": sorted(set(pool) - {bad})}]}
    cluster.write_report(stage["metadata"]["name"], report(1, nodes=tuple(n for n in pool if n != bad)))

    status = cluster.wait_phase("pool", "Failed", timeout=60)
    assert status["sweep"]["passed"] == 7 and status["sweep"]["failed"] == 1 and status["sweep"]["failedNodes"] == [bad]
    assert status["summary"]["failedNodes"] == [bad] and status["summary"]["allReduceBusbwGBps"] == 371.5
    message = cluster.condition("pool", "Succeeded")["message"]
    assert f"1 of 8 nodes failed their single-node test; nodes to blame: {bad}" in message
    assert "inter-node stage over 7 nodes Succeeded" in message
    for c in children(cluster, "pool"):
        node = c["metadata"]["annotations"][NODE]
        assert c["status"]["phase"] == ("Failed" if node == bad else "Succeeded"), node
    assert [h["result"] for h in status["history"]] == ["Failed"]


def test_nodes_left_out_of_a_sweep_are_skipped_with_why(cluster: Cluster, pool: list[str]):
    """A user's test holding the name of a node's child test, a node cordoned before the sweep, one deleted and
    one cordoned after its test passed: each is skipped with its reason, none stops the sweep, and the inter-node
    stage runs over the others."""
    taken, cordoned, deleted, cordoned_late = pool[0], pool[1], pool[2], pool[3]
    cluster.create_test(f"sw-g1-{taken}", {"nodes": 1})
    cluster.server.request("PATCH", f"/api/v1/nodes/{cordoned}", {"spec": {"unschedulable": True}},
                           content_type="application/merge-patch+json")
    cluster.create_test("sw", {"sweep": True, "maxConcurrent": 8, "placement": {"nodeSelector": {"pool": cluster.ns}}})

    def pending_children() -> dict[str, dict] | None:
        items = {c["metadata"]["annotations"][NODE]: c for c in children(cluster, "sw")
                 if (c.get("status") or {}).get("run") and c["status"].get("phase") == "Pending"}
        return items if len(items) == 6 else None

    singles = cluster.wait(pending_children, "the six single-node tests the sweep could create")
    assert sorted(singles) == sorted(pool[2:])
    cluster.write_report(singles[deleted]["metadata"]["name"], report(1, nodes=(deleted,)))
    cluster.wait_phase(singles[deleted]["metadata"]["name"], "Succeeded")
    cluster.server.request("DELETE", f"/api/v1/nodes/{deleted}")
    cluster.write_report(singles[cordoned_late]["metadata"]["name"], report(1, nodes=(cordoned_late,)))
    cluster.wait_phase(singles[cordoned_late]["metadata"]["name"], "Succeeded")
    cluster.server.request("PATCH", f"/api/v1/nodes/{cordoned_late}", {"spec": {"unschedulable": True}},
                           content_type="application/merge-patch+json")
    for node in pool[4:]:
        cluster.write_report(singles[node]["metadata"]["name"], report(1, nodes=(node,)))
    stage = cluster.wait(lambda: next((c for c in children(cluster, "sw") if not c["metadata"]["annotations"][NODE]
                                       and (c.get("status") or {}).get("run")), None), "the inter-node stage")
    assert stage["spec"]["nodes"] == 4  # neither the deleted node nor the one cordoned after its pass
    cluster.write_report(stage["metadata"]["name"], report(1, nodes=tuple(pool[4:])))
    status = cluster.wait_phase("sw", "Succeeded", timeout=60)
    reasons = {s["node"]: s["message"] for s in status["sweep"]["skippedNodes"]}
    assert {s["node"]: s["reason"] for s in status["sweep"]["skippedNodes"]} == {
        taken: "NameTaken", cordoned: "Cordoned", deleted: "Deleted", cordoned_late: "Cordoned"}
    assert status["sweep"]["skipped"] == 4 and sorted(reasons) == sorted(pool[:4]), status["sweep"]
    assert reasons[taken].startswith(f"another test is named sw-g1-{taken}"), reasons
    assert reasons[cordoned] == "cordoned before its test started"
    assert reasons[deleted] == "deleted during the sweep: its test's verdict does not count"
    assert reasons[cordoned_late] == "cordoned after its test passed: left out of the inter-node stage"
    assert status["sweep"]["passed"] == 4 and status["summary"]["total"] == 4, status["sweep"]
    assert "4 skipped" in cluster.condition("sw", "Succeeded")["message"]
    assert cluster.wait_event("sw", "SweepNameTaken")
    assert cluster.get_test(f"sw-g1-{taken}")["metadata"].get("labels", {}).get(SWEEP) is None  # left alone


def run_id(test: dict) -> str | None:
    return ((test.get("status") or {}).get("run") or {}).get("id")


def test_a_restart_mid_sweep_carries_on_the_same_run_without_new_children_or_warnings(
        cluster: Cluster, pool: list[str], operator: OperatorProcess):
    """An operator restarted while four single-node tests run takes its own earlier writes as its own: it keeps
    the sweep's run and each running child's run, creates no second test for a node it already started, and has
    nothing to warn about. (Before issue 22 a restart took its own status writes for a foreign writer's.)"""
    cluster.create_test("rs", {"sweep": True, "maxConcurrent": 4, "placement": {"nodeSelector": {"pool": cluster.ns}}})
    started = cluster.wait(lambda: (items := active(children(cluster, "rs"))) and len(items) == 4
                           and all(run_id(c) for c in items) and items, "four single-node tests with their runs")
    before = {c["metadata"]["name"]: run_id(c) for c in started}
    sweep_run = run_id(cluster.get_test("rs"))
    assert sweep_run
    operator.restart()
    cluster.play_sweep("rs", timeout=180)
    assert cluster.status("rs")["phase"] == "Succeeded"
    assert run_id(cluster.get_test("rs")) == sweep_run
    after = children(cluster, "rs")
    assert {name: run_id(c) for c in after for name in [c["metadata"]["name"]] if name in before} == before
    per_node: dict[str, list[str]] = {}
    for c in after:
        per_node.setdefault(c["metadata"]["annotations"][NODE], []).append(c["metadata"]["name"])
    assert per_node == {**{node: [f"rs-g1-{node}"] for node in pool}, "": per_node.get("")}, per_node
    assert len(per_node[""]) == 1, per_node  # one inter-node stage
    tests = [cluster.get_test("rs"), *after]
    warnings = [(t["metadata"]["name"], r, m) for t in tests for kind, r, m in cluster.events(t["metadata"]["name"])
                if kind == "Warning"]
    assert not warnings, warnings
