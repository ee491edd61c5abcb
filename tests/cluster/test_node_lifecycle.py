"""Node lifecycle on the dev cluster: the real scheduler places the tests' pods on kwok's fake GPU nodes, the real Job
controller runs them, and the operator acts on the nodes as the verdicts say.

- A node gated by a taint (gpu-acceptance.io/untested) is let in when its single-node test passes (taint lifted,
  labelled gpu-acceptance.io/passed with the date, the run in an annotation), and stays out when it fails.
- A sweep skips a node whose GPUs another pod uses (spec.skipBusyNodes), says why, and tests it in the next run.
- The last-pass gauge comes back after an operator restart from the node's annotation alone.

The test writes only what the workload would write (its report) and what a user would (a GPU pod of their own).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, OperatorProcess, node_actions_env, report
from tests.cluster.test_real_controllers import REAL_ENV, real_cluster, running_pods  # noqa: F401 (a fixture)
from tests.devcluster import Controllers

UNTESTED = {"key": "gpu-acceptance.io/untested", "value": "true", "effect": "NoSchedule"}
TOLERATE = {"key": "gpu-acceptance.io/untested", "operator": "Exists", "effect": "NoSchedule"}
MERGE = "application/merge-patch+json"
GAUGE = "gpu_acceptance_node_last_pass_timestamp_seconds"
POOL = "gpu-acceptance.io/test-pool"  # a label of this file's own (removed with the others after each test)
RealCluster = tuple[ApiServer, list[str], Controllers]


@pytest.fixture
def lifecycle(real_cluster: RealCluster,  # noqa: F811 (the fixture imported above)
              start_operator: StartOperator) -> Iterator[tuple[Cluster, OperatorProcess]]:
    """The operator with node actions on, watching a namespace of its own; the nodes put back as they were after."""
    server, nodes, _ = real_cluster
    namespace = server.create_namespace(f"life-{uuid.uuid4().hex[:6]}")
    proc = start_operator(server.kubeconfig, [namespace], {**REAL_ENV, **node_actions_env(namespace)})
    cluster = Cluster(server, namespace, proc.log_tail)
    yield cluster, proc
    for name in [t["metadata"]["name"] for t in cluster.server.request("GET", cluster.test_path())["items"]]:
        cluster.delete_test(name)
    server.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")  # a user's pod too
    for node in nodes:
        labels = {k: None for k in node_of(server, node)["metadata"].get("labels") or {}
                  if k.startswith("gpu-acceptance.io/")}
        annotations = {k: None for k in node_of(server, node)["metadata"].get("annotations") or {}
                       if k.startswith("gpu-acceptance.io/")}
        server.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": labels, "annotations": annotations},
                                                           "spec": {"taints": None, "unschedulable": None}},
                       content_type=MERGE)
    # The next test needs every node's GPUs free: the runs' pods go with their tests.
    cluster.wait(lambda: not gpu_pods(server, namespace), "the runs' pods to be gone", timeout=120)


def node_of(server: ApiServer, name: str) -> dict:
    return server.request("GET", f"/api/v1/nodes/{name}")


def gpu_pods(server: ApiServer, namespace: str) -> list[dict]:
    return server.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]


def taint(server: ApiServer, node: str) -> None:
    server.request("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": [UNTESTED]}}, content_type=MERGE)


def single_node_test(node: str) -> dict:
    return {"backend": "Job", "nodes": 1, "onFailure": "label",
            "placement": {"nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [TOLERATE]},
            "onPass": {"removeTaints": [UNTESTED["key"]], "uncordon": True, "label": True}}


def test_a_gated_node_is_let_in_when_it_passes_and_stays_out_when_it_fails(
        lifecycle: tuple[Cluster, OperatorProcess], real_cluster: RealCluster):  # noqa: F811
    cluster, proc = lifecycle
    server, nodes, _ = real_cluster
    good, bad = nodes[0], nodes[1]
    for node in (good, bad):
        taint(server, node)
    cluster.create_test("admit-good", single_node_test(good))
    cluster.create_test("admit-bad", single_node_test(bad))
    # The real scheduler puts each test's pod on its tainted node: the test tolerates the gate.
    (pod,) = running_pods(cluster, "admit-good", 1)
    assert pod["spec"]["nodeName"] == good
    (pod,) = running_pods(cluster, "admit-bad", 1)
    assert pod["spec"]["nodeName"] == bad

    cluster.write_report("admit-good", report(1, nodes=(good,)), place_pods=False)
    cluster.wait_phase("admit-good", "Succeeded", timeout=120)
    let_in = cluster.wait(lambda: (n := node_of(server, good)) and not n["spec"].get("taints") and n,
                          f"{good}'s gate to be lifted")
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert let_in["metadata"]["labels"]["gpu-acceptance.io/passed"] == today
    recorded = json.loads(let_in["metadata"]["annotations"]["gpu-acceptance.io/passed-run"])
    assert recorded["test"] == f"{cluster.ns}/admit-good" and recorded["run"] == "g1"
    event = cluster.wait_event("admit-good", "NodeActionApplied")
    assert event[2] == (f"spec.onPass: removed taint {UNTESTED['key']}, labelled gpu-acceptance.io/passed={today}: "
                        f"{good}")

    cluster.write_report("admit-bad", report(1, nodes=(bad,), failed_node=bad), place_pods=False)
    status = cluster.wait_phase("admit-bad", "Failed", timeout=120)
    assert status["summary"]["failedNodes"] == [bad]
    cluster.wait_event("admit-bad", "NodeActionApplied")
    kept_out = node_of(server, bad)
    assert UNTESTED in kept_out["spec"]["taints"]  # still gated
    assert kept_out["metadata"]["labels"].get("gpu-acceptance.io/status") == "failed"
    assert "gpu-acceptance.io/passed" not in kept_out["metadata"]["labels"]

    # The gauge: set at the pass; after a restart, with the tests gone, the node's annotation alone brings it back.
    passed_at = datetime.strptime(recorded["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    cluster.wait(lambda: proc.sample(GAUGE, node=good) == passed_at, "the last-pass gauge of the passed node")
    assert proc.sample(GAUGE, node=bad) is None
    cluster.delete_test("admit-good")
    cluster.delete_test("admit-bad")
    proc.restart()
    cluster.wait(lambda: proc.sample(GAUGE, node=good) == passed_at, "the gauge restored from the node")
    assert proc.sample(GAUGE, node=bad) is None
    created = proc.sample("gpu_acceptance_gpu_node_created_timestamp_seconds", node=bad)
    assert created is not None and created <= passed_at  # the alert counts a never-passed node from here


def test_a_sweep_skips_a_node_whose_gpus_a_pod_uses_and_tests_it_in_the_next_run(
        lifecycle: tuple[Cluster, OperatorProcess], real_cluster: RealCluster):  # noqa: F811
    cluster, _ = lifecycle
    server, nodes, controllers = real_cluster
    busy = nodes[2]
    # Someone's training pod holds all 8 GPUs of one node (scheduled by the real scheduler, run by kwok).
    server.request("POST", f"/api/v1/namespaces/{cluster.ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "training"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": busy},
                 "containers": [{"name": "train", "image": "trainer",
                                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
    cluster.wait(lambda: (p := server.request("GET", f"/api/v1/namespaces/{cluster.ns}/pods/training"))
                 ["status"].get("phase") == "Running" and p, "the training pod to run")

    # The sweep's pool: the busy node and one other (one node passing: no inter-node stage to play).
    pool, free = {POOL: cluster.ns}, nodes[3]
    for node in (busy, free):
        server.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": pool}}, content_type=MERGE)
    cluster.create_test("nightly", {"sweep": True, "backend": "Job", "placement": {"nodeSelector": pool},
                                    "onPass": {"label": True}})
    sweep = cluster.wait(lambda: (s := cluster.status("nightly").get("sweep")) and s["skipped"] == 1 and s,
                         "the sweep to skip the busy node")
    assert sweep["skippedNodes"] == [{"node": busy, "reason": "Busy",
                                      "message": f"nvidia.com/gpu in use by pod {cluster.ns}/training"}]
    assert sweep["total"] == 1 and sweep["progress"].endswith(", 1 skipped")
    assert [c["metadata"]["annotations"]["gpu-acceptance.io/node"] for c in sweep_children(cluster)] == [free]

    play_sweep(cluster, controllers)
    status, message = cluster.status("nightly"), cluster.condition("nightly", "Succeeded")["message"]
    why = {c["metadata"]["name"]: [x.get("message") for x in (c.get("status") or {}).get("conditions") or []
                                   if x["type"] == "Succeeded"] for c in sweep_children(cluster)}
    assert status["phase"] == "Succeeded", (message, why)
    assert status["sweep"]["skippedNodes"][0]["node"] == busy
    assert f"1 busy node(s) skipped, for the next run: {busy} (nvidia.com/gpu in use by pod {cluster.ns}/training)" \
        in message
    # Each single-node test's pass acted on its own node; the skipped node was not touched.
    assert "gpu-acceptance.io/passed" in node_of(server, free)["metadata"]["labels"]
    assert "gpu-acceptance.io/passed" not in node_of(server, busy)["metadata"]["labels"]

    # The job is done with the node: the next run tests it.
    server.request("DELETE", f"/api/v1/namespaces/{cluster.ns}/pods/training?gracePeriodSeconds=0")
    cluster.wait(lambda: not [p for p in gpu_pods(server, cluster.ns) if p["metadata"]["name"] == "training"],
                 "the training pod to be gone")
    server.request("PATCH", cluster.test_path("nightly"), {"metadata": {"annotations": {
        "gpu-acceptance.io/rerun": "after-training"}}}, content_type=MERGE)
    second = cluster.wait(lambda: (c := sweep_children(cluster)) and sorted(
        x["metadata"]["annotations"]["gpu-acceptance.io/node"] for x in c) == sorted([busy, free]) and c,
        f"the next run to test {busy} and {free}")
    assert not (cluster.status("nightly").get("sweep") or {}).get("skippedNodes")

    # A changed spec stops that run while its pods hold the GPUs: its own pods, on their way out, do not make the
    # nodes busy for the new run.
    for child in second:
        running_pods(cluster, child["metadata"]["name"], 1)
    cluster.patch_spec("nightly", {"maxConcurrent": 4})
    third = cluster.wait(lambda: (s := cluster.status("nightly")).get("run", {}).get("id") == "g2" and
                         (s.get("sweep") or {}).get("total") == 2 and s, "the new spec's run to start both nodes")
    assert third["sweep"]["skipped"] == 0 and not third["sweep"].get("skippedNodes")


def sweep_children(cluster: Cluster) -> list[dict]:
    return cluster.server.request("GET", f"{cluster.test_path()}?labelSelector=gpu-acceptance.io%2Fsweep%3Dnightly")[
        "items"]


def play_sweep(cluster: Cluster, controllers: Controllers) -> None:
    """The workload of each single-node child (its pod exits, its report passes), then of the inter-node stage."""
    reported: set[str] = set()

    def step() -> bool:
        for child in sweep_children(cluster):
            name, status = child["metadata"]["name"], child.get("status") or {}
            if name in reported or status.get("phase") not in ("Pending", "Running"):
                continue
            node = child["metadata"]["annotations"]["gpu-acceptance.io/node"]
            pods = running_pods(cluster, name, child["spec"]["nodes"])
            placed = tuple(sorted(p["spec"]["nodeName"] for p in pods))
            assert not node or placed == (node,)
            # The pods exit first: the inter-node stage, started at the last node's verdict, needs their GPUs.
            controllers.exit_pods(pods, 0)
            cluster.write_report(name, report(1, nodes=placed), place_pods=False)
            cluster.wait_phase(name, "Succeeded", timeout=60)
            reported.add(name)
        return (cluster.status("nightly").get("phase") or "Running") in ("Succeeded", "Failed")

    cluster.wait(step, "the sweep to end", timeout=240)


def test_a_pass_with_a_loosened_threshold_leaves_the_gate_and_the_profiles_thresholds_lift_it(
        lifecycle: tuple[Cluster, OperatorProcess], real_cluster: RealCluster):  # noqa: F811
    """Issue 36 on the dev cluster: the same passing test on a gated node, first with a floor loosened below its
    profile's (judged, but the node stays gated, and the verdict and an event say why), then as the profile has it."""
    cluster, _ = lifecycle
    server, nodes, _ = real_cluster
    node = nodes[0]
    taint(server, node)
    loose = {**single_node_test(node), "checks": {"ddp": {"thresholds": {"minScalingEfficiency": 0.01}}}}
    why = ("nodes not changed: thresholds looser than profile h100-sxm's: "
           "checks.ddp.thresholds.minScalingEfficiency 0.01 (profile: 0.9)")
    for name, spec in (("admit-loose", loose), ("admit", single_node_test(node))):
        cluster.create_test(name, spec)
        (pod,) = running_pods(cluster, name, 1)
        assert pod["spec"]["nodeName"] == node
        cluster.write_report(name, report(1, nodes=(node,)), place_pods=False)
        cluster.wait_phase(name, "Succeeded", timeout=120)
        if name == "admit-loose":
            assert cluster.condition(name, "Succeeded")["message"].endswith(f"; {why}")
            assert cluster.wait_event(name, "NodeActionSkipped")[2] == why
            assert UNTESTED in node_of(server, node)["spec"]["taints"]  # still gated
            assert "gpu-acceptance.io/passed" not in (node_of(server, node)["metadata"].get("labels") or {})
            cluster.delete_test(name)
            cluster.wait(lambda: not gpu_pods(server, cluster.ns), "the loose run's pod to go", timeout=120)
    cluster.wait(lambda: not node_of(server, node)["spec"].get("taints"), f"{node}'s gate to be lifted")
    assert "nodes not changed" not in cluster.condition("admit", "Succeeded")["message"]
