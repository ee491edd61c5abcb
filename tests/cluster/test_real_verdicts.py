"""Verdicts under real conditions, through the real parts: the operator's tests (and a sweep's child tests) -> their
Jobs -> the real Job controller's pods -> the real scheduler's binding to kwok GPU nodes, with the real node
lifecycle controller. The tests write only what a workload would write (its report), make the pods' processes
exit, and stop the API server for an outage.

A cluster of its own (nine fake GPU nodes: a sweep's pool one more than eight), so the other real-controller
tests keep their four.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, report
from tests.cluster.test_real_controllers import REAL_ENV, cluster_of, operator_in_new_namespace
from tests.devcluster import NODE_MONITOR_GRACE_SECONDS, Controllers

SWEEP_NODES = 9
SWEEP = "gpu-acceptance.io/sweep"
NODE = "gpu-acceptance.io/node"
OUTAGE_NODE_GRACE = 20  # seconds a node may be not Ready under a run (GPU_ACCEPTANCE_NODE_LOST_GRACE_SECONDS)


@pytest.fixture(scope="module")
def sweep_cluster() -> Iterator[tuple[ApiServer, list[str], Controllers]]:
    yield from cluster_of(SWEEP_NODES)


@pytest.fixture
def real(sweep_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator) -> Cluster:
    return operator_in_new_namespace(sweep_cluster, start_operator, REAL_ENV)


@pytest.fixture
def patient(sweep_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator) -> Cluster:
    """An operator that lets pods wait for a node for the default 600 s (a report may come meanwhile)."""
    return operator_in_new_namespace(sweep_cluster, start_operator,
                                     {**REAL_ENV, "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "600"})


def children(cluster: Cluster, parent: str) -> list[dict]:
    return cluster.server.request("GET", f"{cluster.test_path()}?labelSelector={SWEEP}%3D{parent}")["items"]


def pods_of(cluster: Cluster, test: str) -> list[dict]:
    """The pods of a test (by its name: the tests here have short names, their label values)."""
    selector = f"gpu-acceptance.io/test%3D{test}"
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
            pods = [p for p in pods_of(cluster, c["metadata"]["name"]) if (p.get("spec") or {}).get("nodeName")
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
    assert sorted(p["spec"]["nodeName"] for p in pods_of(real, stage["metadata"]["name"])) == sorted(nodes)


@pytest.mark.parametrize("profile", ["h100-sxm", "cpu-smoke"])
def test_pods_pod_security_refuses_end_the_run_at_once_naming_the_policy_and_the_fix(
        sweep_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator, profile: str):
    """The namespace enforces Pod Security "baseline", which the privileged ulimit init container violates: the Job
    is admitted (only a warning), its pods are not. Waiting cannot change that: with the default 600 s grace the
    run still fails within 30 s, with the Job controller's words (its FailedCreate event), the policy and what to
    change, instead of waiting out the grace or blaming the backend's controller."""
    cluster = operator_in_new_namespace(sweep_cluster, start_operator,
                                        {**REAL_ENV, "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "600"},
                                        labels={"pod-security.kubernetes.io/enforce": "baseline"})
    started = time.monotonic()
    cluster.create_test("refused", {"backend": "Job", "nodes": 1, "profile": profile})
    status = cluster.wait_phase("refused", "Failed", timeout=30)
    took = time.monotonic() - started
    succeeded = cluster.condition("refused", "Succeeded")
    assert succeeded["reason"] == "PodsRefused", succeeded
    message = succeeded["message"]
    assert "the API server refused the pods of Job refused-g1" in message, message
    assert 'violates PodSecurity "baseline:latest": privileged' in message, message
    assert f'namespace {cluster.ns} enforces Pod Security "baseline:latest"' in message, message
    assert f"kubectl label namespace {cluster.ns} pod-security.kubernetes.io/enforce=privileged" in message, message
    assert status["summary"]["failedNodes"] == []
    print(f"PodsRefused {took:.1f} s after the test was created ({profile})")
    cluster.wait(lambda: cluster.job("Job", "refused-g1") is None, "the refused Job to be deleted")


def test_a_refusal_that_may_pass_keeps_the_grace_and_the_pending_message_quotes_it(
        sweep_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator):
    """A ResourceQuota the pods exceed (other pods may end and free it): the run stays Pending through the grace,
    and its message quotes the API server's latest refusal meanwhile."""
    cluster = operator_in_new_namespace(sweep_cluster, start_operator,
                                        {**REAL_ENV, "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "600"})
    cluster.server.request("POST", f"/api/v1/namespaces/{cluster.ns}/resourcequotas", {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    cluster.create_test("quota", {"backend": "Job", "nodes": 1, "profile": "cpu-smoke"})

    def quoted() -> str | None:
        messages = [c.get("message") or "" for c in cluster.status("quota").get("conditions") or []]
        return next((m for m in messages if "exceeded quota: no-pods" in m), None)

    message = cluster.wait(quoted, "a condition's message to quote the quota's refusal", timeout=45)
    assert cluster.status("quota")["phase"] == "Pending"
    assert "the API server refuses the pods" in message and "retried until the unschedulable grace ends" in message, \
        message


@pytest.mark.parametrize("named", ["gpu-node-0", ""])
def test_a_report_for_pods_that_never_ran_is_rejected(patient: Cluster, named: str):
    """The run's only pod is Pending (its nodeSelector matches no node): a report naming any node, or a node with an
    empty name, describes nothing that ran."""
    patient.create_test("ghost", {"backend": "Job", "nodes": 1, "placement": {"nodeSelector": {"pool": "nowhere"}}})
    patient.wait(lambda: any(c.get("reason") == "Unschedulable" for p in pods_of(patient, "ghost")
                             for c in (p.get("status") or {}).get("conditions") or []),
                 "the real scheduler to leave the pod Pending")
    patient.write_report("ghost", report(1, nodes=(named,)), place_pods=False)
    status = patient.wait_phase("ghost", "Failed", timeout=60)
    succeeded = patient.condition("ghost", "Succeeded")
    assert succeeded["reason"] == "ReportRejected", succeeded
    if named:
        assert "gpu-node-0 ran no pod of this run (its pods ran on no node: none was scheduled)" in \
            succeeded["message"], succeeded["message"]
    else:
        assert "it names a node with an empty name" in succeeded["message"], succeeded["message"]
    assert status["summary"]["failedNodes"] == []


def ready_since(cluster: Cluster, node: str) -> datetime:
    node_obj = cluster.server.request("GET", f"/api/v1/nodes/{node}")
    ready = next(c for c in node_obj["status"]["conditions"] if c["type"] == "Ready")
    return datetime.strptime(ready["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def test_nodes_unknown_right_after_an_api_server_outage_are_not_a_verdict(
        sweep_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator):
    """While the API server is down no kubelet can post its node's status. Back, the real node lifecycle controller
    marks the nodes whose heartbeats it missed Unknown until their kubelets post again, seconds later (kwok, playing
    every kubelet, is paused through the outage and resumed 5 s after the controller has done so). A run on those nodes
    goes on: no NodeNotReady, no node blamed."""
    server, _, controllers = sweep_cluster
    cluster = operator_in_new_namespace(sweep_cluster, start_operator,
                                        {**REAL_ENV, "GPU_ACCEPTANCE_NODE_LOST_GRACE_SECONDS": str(OUTAGE_NODE_GRACE)})
    cluster.create_test("steady", {"backend": "Job", "nodes": 2})
    pods = cluster.wait(lambda: (ps := [p for p in pods_of(cluster, "steady")
                                        if (p.get("status") or {}).get("phase") == "Running"]) and len(ps) == 2 and ps,
                        "the run's two pods to run")
    cluster.wait_phase("steady", "Running")
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    down = datetime.now(timezone.utc).replace(microsecond=0)
    controllers.pause("kwok")
    try:
        server.stop_apiserver()
        # Down longer than the node lifecycle controller lets a heartbeat be late: back, it finds every node's late.
        time.sleep(NODE_MONITOR_GRACE_SECONDS + 2)
        server.start_apiserver()
        # The node lifecycle controller marks the run's nodes not Ready, and their pods (else this test proves
        # nothing) ...
        cluster.wait(lambda: all(ready_since(cluster, n) > down for n in nodes),
                     "the run's nodes to leave Ready after the outage", timeout=60)
        not_ready_since = max(ready_since(cluster, n) for n in nodes)
        cluster.wait(lambda: all(c.get("status") != "True" for p in pods_of(cluster, "steady")
                                 for c in p["status"].get("conditions") or [] if c["type"] == "Ready"),
                     "the run's pods to be marked not Ready", timeout=60)
        time.sleep(5)  # kubelets post on their own schedule (every 10 s by default), not at once
    finally:
        controllers.resume("kwok")
    cluster.wait(lambda: all(controllers.node_ready(n) for n in nodes), "the nodes to be Ready again", timeout=60)
    # ... and the run is not failed for it, not then and not after the grace (counted from each node's change, in
    # whole seconds: its Ready condition's lastTransitionTime), with 5 s for the operator to act on its deadline.
    after_grace = not_ready_since.timestamp() + 1 + OUTAGE_NODE_GRACE + 5
    time.sleep(max(0.0, after_grace - time.time()))
    assert cluster.status("steady").get("phase") == "Running", cluster.condition("steady", "Succeeded")
    cluster.write_report("steady", report(1, nodes=tuple(nodes)), place_pods=False)
    controllers.exit_pods(pods, 0)
    status = cluster.wait_phase("steady", "Succeeded", timeout=60)
    assert status["summary"]["failedNodes"] == []
