"""spec.skipBusyNodes: a sweep skips a node whose GPUs other pods use, says why, and tests it once it is free."""

from __future__ import annotations

from acceptance_operator.fleet import sweep
from acceptance_operator.fleet.sweep import Child

NODES = ["n0", "n1", "n2", "n3"]


def pod(name: str, node: str | None, gpus: int | None = 8, phase: str = "Running", deleting: bool = False,
        where: str = "limits", init: bool = False) -> dict:
    resources = {where: {"nvidia.com/gpu": str(gpus)}} if gpus is not None else {}
    containers = {"initContainers" if init else "containers": [{"name": "c", "resources": resources}]}
    meta = {"name": name, "namespace": "ml", **({"deletionTimestamp": "2026-11-26T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "spec": {**({"nodeName": node} if node else {}), **containers},
            "status": {"phase": phase}}


def test_busy_nodes_are_those_with_live_gpu_pods():
    pods = [
        pod("train-0", "n1"), pod("train-1", "n1", where="requests"), pod("prep", "n2", init=True),
        pod("cpu-only", "n0", gpus=None), pod("zero", "n0", gpus=0),
        pod("done", "n3", phase="Succeeded"), pod("crashed", "n3", phase="Failed"),
        pod("leaving", "n3", deleting=True), pod("pending", None),
    ]
    assert sweep.busy_nodes(pods) == {
        "n1": "nvidia.com/gpu in use by pod ml/train-0, ml/train-1",
        "n2": "nvidia.com/gpu in use by pod ml/prep",
    }
    # The pods of an earlier run's children, deleted when this run started, are on their way out.
    earlier = pod("nightly-g1-n3", "n3")
    earlier["metadata"]["labels"] = {"gpu-acceptance.io/test": "nightly-g1-n3"}
    assert sweep.busy_nodes([earlier], frozenset({"nightly-g1-n3"})) == {}
    assert list(sweep.busy_nodes([earlier])) == ["n3"]
    many = sweep.busy_nodes([pod(f"p{i}", "n0") for i in range(5)])
    assert many == {"n0": "nvidia.com/gpu in use by pod ml/p0, ml/p1, ml/p2 and 2 more"}


def test_a_busy_node_is_skipped_with_its_reason_and_not_counted_in_the_total():
    busy = {"n1": "nvidia.com/gpu in use by pod ml/train-0"}
    p = sweep.plan([], NODES, [], 2, busy=busy)
    assert p.start == ["n0", "n2"]
    assert (p.status.total, p.status.pending, p.status.skipped) == (3, 1, 1)
    (skipped,) = p.status.skipped_nodes
    assert (skipped.node, skipped.reason, skipped.message) == ("n1", "Busy", busy["n1"])
    assert p.status.progress.endswith(", 1 skipped")


def test_a_node_freed_while_single_node_tests_start_is_tested_in_the_same_run():
    running = [Child("c0", "n0"), Child("c2", "n2")]
    freed = sweep.plan([Child("c0", "n0", "Succeeded"), running[1]], NODES, [], 2, {})
    assert freed.start == ["n1"] and freed.status.skipped == 0


def test_a_sweep_whose_other_nodes_are_done_ends_with_the_busy_one_skipped():
    done = [Child(f"c{n}", n, "Succeeded") for n in ("n0", "n2", "n3")]
    busy = {"n1": "nvidia.com/gpu in use by pod ml/train-0"}
    p = sweep.plan([*done, Child("s", sweep.INTER_NODE, "Succeeded")], NODES, [], 2, busy=busy)
    assert p.finished and p.passed and p.status.skipped == 1
    state, summary = sweep.verdict([*done, Child("s", sweep.INTER_NODE, "Succeeded")], p.status, "g1", "pool", {})
    assert state.phase == "Succeeded" and summary.total == 3
    assert "1 busy node(s) skipped, for the next run: n1 (nvidia.com/gpu in use by pod ml/train-0)" in state.message


def test_a_sweep_of_busy_nodes_only_fails_as_no_nodes_saying_so():
    busy = {n: "nvidia.com/gpu in use by pod ml/x" for n in NODES}
    p = sweep.plan([], NODES, [], 2, busy=busy)
    assert p.finished and not p.start and p.status.skipped == 4
    state, _ = sweep.verdict([], p.status, "g1", "pool", {"pool": "a"})
    assert state.reason == "NoNodes" and "4 matching node(s) cordoned, busy or passed before" in state.message
    assert "busy nodes are tested by the next run" in state.message


def test_skip_busy_nodes_is_a_parent_field():
    assert "skipBusyNodes" in sweep.PARENT_ONLY
