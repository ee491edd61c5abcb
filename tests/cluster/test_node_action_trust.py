"""Who may admit a node (issue 36): with node actions on, a verdict changes nodes only from a namespace the chart
names, with an allowed image and the profile's thresholds (or stricter). Otherwise the test still runs and is judged,
and its verdict and an event say "nodes not changed: <why>". An image outside userPolicy.allowedImages ends
InvalidSpec; the reserved environment names are refused at admission by the CRD's own rules.

The operator runs as `gpu-acceptance operator` against the real API server; the tests play the job controller and
the workload's report (operator_harness), and a tenant's namespace beside the administrator's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, node_actions_env, report

UNTESTED = {"key": "gpu-acceptance.io/untested", "value": "true", "effect": "NoSchedule"}
ADMIT = {"onPass": {"removeTaints": [UNTESTED["key"]], "label": True}, "onFailure": "taint"}
LOOSE = {"checks": {"ddp": {"thresholds": {"minScalingEfficiency": 0.01}}}}
Setup = tuple[Cluster, Cluster, str, Any]  # the admin's, the tenant's, the gated node, the operator's process
GAUGE = "gpu_acceptance_node_last_pass_timestamp_seconds"


@pytest.fixture
def gated(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator) -> Iterator[Setup]:
    """The administrator's namespace (listed in nodeActions.namespaces), a tenant's (not listed), and a node gated
    by the untested taint; the operator watches both namespaces with node actions on."""
    server = acceptance_crd
    tenant = server.create_namespace(f"tenant-{uuid.uuid4().hex[:6]}")
    node = f"gpu-gated-{uuid.uuid4().hex[:6]}"
    server.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                                             "spec": {"taints": [UNTESTED]}})
    proc = start_operator(server.kubeconfig, [namespace, tenant], node_actions_env(namespace))
    try:
        yield Cluster(server, namespace, proc.log_tail), Cluster(server, tenant, proc.log_tail), node, proc
    finally:
        server.request("DELETE", f"/api/v1/nodes/{node}", expect=(200, 404))
        server.delete_namespace(tenant)


def taint_keys(server: ApiServer, node: str) -> list[str]:
    return [t["key"] for t in server.request("GET", f"/api/v1/nodes/{node}")["spec"].get("taints") or []]


def run(cluster: Cluster, name: str, node: str, spec: dict, *, passed: bool = True) -> dict:
    """A test on `node` whose report the workload writes; its verdict (the Succeeded condition) once written."""
    cluster.create_test(name, {"nodes": 1, **ADMIT, **spec})
    cluster.wait_job("PyTorchJob", f"{name}-g1")
    cluster.write_report(name, report(1, nodes=(node,), failed_node=None if passed else node))
    cluster.wait_phase(name, "Succeeded" if passed else "Failed")
    return cluster.condition(name, "Succeeded")


def test_a_loosened_threshold_or_an_unlisted_namespace_leaves_the_node_gated(gated: Setup):
    admin, tenant, node, proc = gated
    server = admin.server
    why = ("nodes not changed: thresholds looser than profile h100-sxm's: "
           "checks.ddp.thresholds.minScalingEfficiency 0.01 (profile: 0.9)")
    verdict = run(admin, "loose", node, LOOSE)
    assert verdict["reason"] == "ChecksPassed" and verdict["message"].endswith(f"; {why}"), verdict
    event = admin.wait_event("loose", "NodeActionSkipped")
    assert event[0] == "Warning" and event[2] == why
    assert UNTESTED["key"] in taint_keys(server, node)
    # Nor is it the node's last pass: the gauge (and the not-passed-recently alert) stays as it was.
    uncounted = admin.wait_event("loose", "PassNotCounted")[2]
    assert uncounted.startswith("thresholds looser than profile h100-sxm's: checks.ddp.thresholds.minScalingEfficiency"
                                f" 0.01 (profile: 0.9): not the last pass of nodes {node}"), uncounted
    assert proc.sample(GAUGE, node=node) is None

    why = (f"nodes not changed: namespace {tenant.ns} is not one whose tests may change nodes (chart value "
           f"nodeActions.namespaces: {admin.ns})")
    verdict = run(tenant, "mine", node, {})
    assert verdict["reason"] == "ChecksPassed" and verdict["message"].endswith(f"; {why}"), verdict
    assert tenant.wait_event("mine", "NodeActionSkipped")[2] == why
    assert UNTESTED["key"] in taint_keys(server, node)
    # Its pass under the profile's thresholds is the node's last pass all the same: who ran it moves no node.
    tenant.wait(lambda: proc.sample(GAUGE, node=node), "the tenant's pass to be the node's last pass")
    assert not [e for e in tenant.events("mine") if e[1] == "PassNotCounted"]
    assert "gpu-acceptance.io/passed" not in (server.request("GET", f"/api/v1/nodes/{node}")["metadata"]
                                              .get("labels") or {})
    # spec.onFailure too: a tenant's failure does not taint the node it blames.
    verdict = run(tenant, "blame", node, {}, passed=False)
    assert verdict["message"].endswith(f"; {why}"), verdict
    assert tenant.wait_event("blame", "NodeActionSkipped")[2] == why
    assert "gpu-acceptance.io/failed" not in taint_keys(server, node)
    assert not [e for e in admin.events("loose") + tenant.events("mine") + tenant.events("blame")
                if e[1] == "NodeActionApplied"]

    # The same test in the listed namespace with the profile's thresholds lets the node in.
    verdict = run(admin, "trusted", node, {})
    assert verdict["reason"] == "ChecksPassed" and "nodes not changed" not in verdict["message"], verdict
    admin.wait(lambda: UNTESTED["key"] not in taint_keys(server, node), "the untested taint to be lifted")
    assert admin.wait_event("trusted", "NodeActionApplied")[2].startswith(
        f"spec.onPass: removed taint {UNTESTED['key']}, labelled gpu-acceptance.io/passed=")


def test_an_image_outside_allowed_images_ends_invalid_spec(gated: Setup):
    admin, _, node, _ = gated
    admin.create_test("evil", {"nodes": 1, "image": "evil.example/fake:1", **ADMIT})
    status = admin.wait_phase("evil", "Failed")
    verdict = admin.condition("evil", "Succeeded")
    assert verdict["reason"] == "InvalidSpec", verdict
    assert verdict["message"].startswith("spec.image: 'evil.example/fake:1' is not an image this operator allows "
                                         "(an administrator can allow it with the chart value "
                                         "userPolicy.allowedImages)"), verdict
    assert "job" not in status or status["job"] is None
    assert admin.job("PyTorchJob", "evil-g1") is None and UNTESTED["key"] in taint_keys(admin.server, node)


@pytest.mark.parametrize(("field", "name"), [
    ("pod", "KUBERNETES_SERVICE_HOST"), ("pod", "KUBERNETES_SERVICE_PORT"), ("network", "KUBERNETES_PORT"),
    ("pod", "KUBERNETES_PORT_443_TCP_ADDR"), ("network", "GPU_ACCEPTANCE_CONFIG"), ("pod", "GPU_ACCEPTANCE_ANY"),
])
def test_admission_refuses_the_reserved_environment(acceptance_crd: ApiServer, namespace: str, field: str,
                                                    name: str):
    """The generated CRD's rules, in the real API server: a test that sets one is never stored."""
    cluster = Cluster(acceptance_crd, namespace)
    answer = acceptance_crd.request("POST", cluster.test_path(), {
        "apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "metadata": {"name": "env"},
        "spec": {field: {"env": {name: "203.0.113.9", "NCCL_DEBUG": "INFO"}}}}, expect=None)
    assert answer["_status"] == 422, answer
    prefix = next(p for p in ("KUBERNETES_SERVICE_", "KUBERNETES_PORT", "GPU_ACCEPTANCE_") if name.startswith(p))
    assert f"spec.{field}.env: Invalid value" in answer["message"], answer["message"]
    assert f"names starting with {prefix} are reserved" in answer["message"], answer["message"]
    assert cluster.get_test("env") is None
    ok = acceptance_crd.request("POST", cluster.test_path(), {
        "apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "metadata": {"name": "env"},
        "spec": {field: {"env": {"NCCL_DEBUG": "INFO", "KUBERNETES_NAMESPACE_HINT": "x"}}}}, expect=None)
    assert ok["_status"] == 201, ok
