"""A sweep's plan: which single-node tests to start (maxConcurrent), the inter-node stage, progress, verdict."""

from __future__ import annotations

from acceptance_operator.fleet import sweep
from acceptance_operator.fleet.sweep import INTER_NODE, Child
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.kubetypes import MAX_VALUES

NODES = [f"n{i}" for i in range(8)]


def node(name: str, pool: str = "a", cordoned: bool = False) -> dict:
    return {"metadata": {"name": name, "labels": {"pool": pool}}, "spec": {"unschedulable": cordoned}}


def test_matching_nodes_by_selector_cordoned_apart():
    nodes = [node("b"), node("a"), node("c", cordoned=True), node("d", pool="other")]
    assert sweep.matching(nodes, {"pool": "a"}) == (["a", "b"], ["c"])
    assert sweep.matching(nodes, {}) == (["a", "b", "d"], ["c"])


def test_at_most_max_concurrent_run_and_the_rest_wait():
    first = sweep.plan([], NODES, [], 3)
    assert first.start == ["n0", "n1", "n2"] and not first.finished
    assert (first.status.total, first.status.running, first.status.pending) == (8, 3, 5)
    running = [Child(f"c{i}", f"n{i}") for i in range(3)]
    assert sweep.plan(running, NODES, [], 3).start == []
    one_done = [Child("c0", "n0", "Succeeded"), *running[1:]]
    assert sweep.plan(one_done, NODES, [], 3).start == ["n3"]


def test_the_inter_node_stage_runs_over_the_passed_nodes_after_all_single_node_tests():
    done = [Child(f"c{i}", n, "Failed" if n == "n5" else "Succeeded", failed_nodes=(n,) if n == "n5" else ())
            for i, n in enumerate(NODES)]
    p = sweep.plan(done, NODES, [], 3)
    assert p.inter_node == [n for n in NODES if n != "n5"] and not p.finished
    assert p.status.stage == "inter-node" and p.status.failed_nodes == ["n5"]
    with_stage = [*done, Child("s", INTER_NODE, "Running")]
    assert sweep.plan(with_stage, NODES, [], 3).inter_node is None
    finished = sweep.plan([*done, Child("s", INTER_NODE, "Succeeded", busbw=300.0)], NODES, [], 3)
    assert finished.finished and not finished.passed
    assert finished.status.progress == "7/8 passed, 1 failed; inter-node Succeeded"


def test_joining_and_cordoned_nodes():
    started = [Child("c0", "n0", "Running")]
    # n9 joined while single-node tests are being started: it is tested too; n1 was cordoned before its test.
    p = sweep.plan(started, ["n0", "n2", "n9"], ["n1"], 10)
    assert p.start == ["n2", "n9"] and p.status.total == 3 and p.status.skipped == 1
    # A node cordoned while its test runs keeps its test.
    assert sweep.plan(started, [], ["n0"], 10).status.running == 1
    # After the single-node stage a newcomer waits for the next run.
    done = [Child("c0", "n0", "Succeeded"), Child("c2", "n2", "Succeeded"), Child("s", INTER_NODE, "Running")]
    assert sweep.plan(done, ["n0", "n2", "n7"], [], 10).start == []


def test_a_sweep_with_one_or_no_node_has_no_inter_node_stage():
    one = sweep.plan([Child("c0", "n0", "Succeeded")], ["n0"], [], 2)
    assert one.finished and one.passed and one.inter_node is None
    none = sweep.plan([], [], ["n1"], 2)
    state, _ = sweep.verdict([], none.status, "g1", "pool", {"pool": "a"})
    assert none.finished and not none.passed and state.reason == "NoNodes" and "pool" in state.message


def test_verdict_names_the_failed_nodes_and_where_to_look():
    children = [Child("c0", "n0", "Succeeded"), Child("c1", "n1", "Failed", failed_nodes=("n1",)),
                Child("c2", "n2", "Succeeded"), Child("s", INTER_NODE, "Succeeded", busbw=350.0)]
    p = sweep.plan(children, ["n0", "n1", "n2"], [], 2)
    state, summary = sweep.verdict(children, p.status, "g1", "pool", {})
    assert state.phase == "Failed" and "1 of 3 nodes failed" in state.message and "n1" in state.message
    assert "gpu-acceptance.io/sweep=pool" in state.message
    assert (summary.passed, summary.failed, summary.total, summary.failed_nodes) == (2, 1, 3, ["n1"])
    assert summary.all_reduce_busbw_gbps == 350.0


def test_children_are_single_runs_pinned_to_their_nodes():
    parent = AcceptanceTest.model_validate({
        "metadata": {"name": "pool", "namespace": "lab", "uid": "u1"},
        "spec": {"sweep": True, "maxConcurrent": 4, "schedule": "0 3 * * *", "nodes": 4,
                 "placement": {"nodeSelector": {"pool": "a"}, "affinity": {"nodeAffinity": {
                     "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                         {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}}}}})
    one = sweep.child(parent, "g1", "pool", ["n3"], "n3")
    assert one["metadata"]["name"] == "pool-g1-n3" and one["metadata"]["ownerReferences"][0]["uid"] == "u1"
    spec = AcceptanceTest.model_validate(one).spec
    assert not spec.sweep and spec.schedule is None and spec.nodes == 1
    (term,) = spec.placement.affinity.node_affinity.required_during_scheduling_ignored_during_execution \
        .node_selector_terms
    assert term.match_expressions[0].key == "gpu" and term.match_fields[0].values == ["n3"]
    many = [f"node-{i}" for i in range(MAX_VALUES * 2 + 1)]
    hostnames = {n: f"host-{n}" for n in many[:-1]}  # the last node has no hostname label
    stage = AcceptanceTest.model_validate(sweep.child(parent, "g1", "pool", many, INTER_NODE, hostnames))
    terms = stage.spec.placement.affinity.node_affinity.required_during_scheduling_ignored_during_execution \
        .node_selector_terms
    assert stage.metadata.name == "pool-g1-inter-node" and stage.spec.nodes == len(many) and len(terms) == 3
    # Every term keeps the user's requirement; the nodes go by hostname label, MAX_VALUES a term, the unlabelled one
    # by name in a term of its own (a node field requirement takes one value only: the API server refuses more).
    assert all(t.match_expressions[0].key == "gpu" for t in terms)
    labelled = [v for t in terms[:2] for v in t.match_expressions[1].values]
    assert {t.match_expressions[1].key for t in terms[:2]} == {"kubernetes.io/hostname"}
    assert sorted(labelled) == sorted(hostnames.values()) and all(not t.match_fields for t in terms[:2])
    assert [f.values for f in terms[2].match_fields] == [[many[-1]]]
    assert all(len(f.values) == 1 for t in terms for f in t.match_fields or [])


def test_nodes_cordoned_deleted_or_whose_test_name_is_taken_are_skipped_with_why():
    done = [Child(f"c{i}", n, "Succeeded") for i, n in enumerate(NODES[:6])]
    done[5] = Child("c5", "n5", "Failed", failed_nodes=("n5",))
    taken = Child("pool-g1-n6", "n6", name_taken=True)
    present = set(NODES) - {"n1", "n5"}  # n1 (passed) and n5 (failed) were deleted
    schedulable = [n for n in NODES if n in present and n not in ("n2", "n7")]
    p = sweep.plan([*done, taken], schedulable, ["n2", "n7"], 3, present)
    assert {n: (s.reason, s.message) for n, s in p.skipped.items()} == {
        "n1": ("Deleted", "deleted during the sweep: its test's verdict does not count"),
        "n2": ("Cordoned", "cordoned after its test passed: left out of the inter-node stage"),
        "n6": ("NameTaken", "another test is named pool-g1-n6, the name of this node's test in the sweep: rename it"),
        "n7": ("Cordoned", "cordoned before its test started"),
    }
    # A failed node stays failed, gone or not; the stage runs over the passed nodes still in the pool.
    assert p.inter_node == ["n0", "n3", "n4"] and p.status.failed_nodes == ["n5"]
    assert (p.status.passed, p.status.failed, p.status.skipped) == (3, 1, 4)
    assert [s.node for s in p.status.skipped_nodes] == ["n1", "n2", "n6", "n7"]
    stage = Child("s", INTER_NODE, "Succeeded")
    final = sweep.plan([*done, taken, stage], schedulable, ["n2", "n7"], 3, present)
    state, summary = sweep.verdict([*done, taken, stage], final.status, "g1", "pool", {}, final.skipped)
    assert state.phase == "Failed" and "1 of 4 nodes failed their single-node test; 4 skipped (n1: deleted" in \
        state.message
    assert (summary.passed, summary.failed, summary.total) == (3, 1, 4)
    # Relabelled out of the pool (still there): said so.
    moved = sweep.plan([Child("c0", "n0", "Succeeded")], [], [], 3, {"n0"})
    assert {n: (s.reason, s.message) for n, s in moved.skipped.items()} == {
        "n0": ("LeftPool", "no longer matches placement.nodeSelector: its test's verdict does not count")}


def test_skip_passed_nodes_tests_only_the_nodes_without_the_passed_label():
    """spec.skipPassedNodes (examples/admit-nodes.yaml): a node labelled gpu-acceptance.io/passed is left out with
    reason Passed; the others are tested; a run that finds none to test passes, saying there was nothing new."""
    nodes = [node("n0"), node("n1"), node("n2"), node("n3")]
    for n in nodes[:2]:
        n["metadata"]["labels"]["gpu-acceptance.io/passed"] = "2026-12-01"
    earlier = sweep.passed_before(nodes)
    assert earlier == {"n0", "n1"}
    schedulable, cordoned = sweep.matching(nodes, {"pool": "a"})
    first = sweep.plan([], schedulable, cordoned, 16, {"n0", "n1", "n2", "n3"}, None, earlier)
    assert first.start == ["n2", "n3"] and first.status.total == 2 and first.status.skipped == 2
    assert {n: s.reason for n, s in first.skipped.items()} == {"n0": "Passed", "n1": "Passed"}
    # The nodes this run passes get the label too (onPass): they are not taken for skipped ones.
    done = [Child("c2", "n2", "Succeeded"), Child("c3", "n3", "Succeeded"), Child("s", INTER_NODE, "Succeeded")]
    final = sweep.plan(done, schedulable, cordoned, 16, None, None, earlier | {"n2", "n3"})
    state, summary = sweep.verdict(done, final.status, "g1", "pool", {}, final.skipped)
    assert state.phase == "Succeeded" and (summary.passed, summary.total) == (2, 2)
    assert "2 passed before, not tested (skipPassedNodes)" in state.message
    # Every node passed before: nothing to test is not a failure (the hourly admission run of a full pool).
    every = sweep.passed_before(nodes[:2])
    idle = sweep.plan([], ["n0", "n1"], [], 16, None, None, every)
    assert idle.start == [] and idle.finished
    state, summary = sweep.verdict([], idle.status, "g2", "pool", {}, idle.skipped)
    assert (state.phase, state.reason) == ("Succeeded", "ChecksPassed") and "no node to test" in state.message
    # Without the option (the default) nothing changes; a pool with no node at all still fails NoNodes.
    assert sweep.plan([], schedulable, cordoned, 16).start == ["n0", "n1", "n2", "n3"]
    empty = sweep.plan([], [], [], 16)
    assert sweep.verdict([], empty.status, "g3", "pool", {})[0].reason == "NoNodes"


def test_skip_passed_nodes_is_a_parent_field_the_children_drop():
    parent = AcceptanceTest.model_validate({"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                                            "metadata": {"name": "admit", "namespace": "ns", "uid": "u"},
                                            "spec": {"sweep": True, "skipPassedNodes": True}})
    obj = sweep.child(parent, "g1", "admit", ["n0"], "n0")
    assert "skipPassedNodes" not in obj["spec"] and "sweep" not in obj["spec"]
