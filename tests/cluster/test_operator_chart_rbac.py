"""The operator runs a whole lifecycle with nothing but the permissions the rendered Helm chart grants.

The chart is rendered by a real helm (tests/helm.py); its ServiceAccount,
ClusterRole and ClusterRoleBinding are applied to a test API server with RBAC
on, and the operator runs cluster-wide (the chart's default) with a token of
that ServiceAccount and the environment of the chart's Deployment. Any call
the chart does not allow is a 403 the test catches (reconcile-error metric,
kopf's log). The server is the one without the MPIJob CRD, which no other test
fills with objects a cluster-wide operator would pick up.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, report
from tests.helm import by_kind, render

RELEASE_NAMESPACE = "gpu-acceptance-system"
LABELS = {"gpu-acceptance.io/test": "gate", "gpu-acceptance.io/generation": "1"}


def install_chart_rbac(server: ApiServer, namespace: str) -> tuple[str, dict[str, str]]:
    """Apply the chart's identity and RBAC (nodeActions on for the tests of `namespace`); return the ServiceAccount
    and the operator's env."""
    objects = by_kind(render({"nodeActions": {"enabled": True, "namespaces": [namespace]}},
                             namespace=RELEASE_NAMESPACE))
    server.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": RELEASE_NAMESPACE}}, expect=(201, 409))
    rbac = (objects["ServiceAccount"] + objects["ClusterRole"] + objects["ClusterRoleBinding"] + objects["Role"]
            + objects["RoleBinding"])
    server.kubectl("apply", "-f", "-", input="\n".join(json.dumps(o) for o in rbac))
    (deployment,) = objects["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    assert env["GPU_ACCEPTANCE_NODE_ACTIONS"] == "true"
    return objects["ServiceAccount"][0]["metadata"]["name"], env


def test_lifecycle_with_the_charts_rbac_only(pytorch_only_apiserver: ApiServer, start_operator: StartOperator,
                                             tmp_path: Path):
    server = pytorch_only_apiserver
    namespace = f"rbac-{uuid.uuid4().hex[:6]}"
    account, chart_env = install_chart_rbac(server, namespace)
    token = server.token_for_service_account(RELEASE_NAMESPACE, account, create=False)
    kubeconfig = server.kubeconfig_for_token(token, tmp_path / "operator.kubeconfig")
    # The chart's environment, with the test's short report grace.
    env = {k: v for k, v in chart_env.items() if k.startswith("GPU_ACCEPTANCE_")}
    env["POD_NAMESPACE"] = RELEASE_NAMESPACE  # the downward API's value: the lease is the release namespace's
    proc = start_operator(kubeconfig, None, {**env, "GPU_ACCEPTANCE_REPORT_GRACE_SECONDS": "1"})

    namespace = server.create_namespace(namespace)
    cluster = Cluster(server, namespace, proc.log_tail)
    bad_node = f"gpu-rbac-{uuid.uuid4().hex[:6]}"
    pool = [f"{bad_node}-pool-{i}" for i in range(2)]
    server.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": bad_node}})
    try:
        cluster.create_test("gate", {"nodes": 2, "onFailure": "label"})
        cluster.wait_job("PyTorchJob", "gate-g1")
        cluster.set_job_condition("PyTorchJob", "gate-g1", "Running")
        # Pods wait for the scheduler first (the operator then reads their FailedScheduling events), then bind.
        for i in range(2):
            cluster.create_pod(f"gate-g1-worker-{i}", LABELS)
        cluster.wait(lambda: "pods: 2 Pending" in cluster.condition("gate", "Running")["message"],
                     "the operator to look at the pending pods")
        for i, node in enumerate(("gpu-ok", bad_node)):
            server.request("POST", f"/api/v1/namespaces/{namespace}/pods/gate-g1-worker-{i}/binding", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"gate-g1-worker-{i}"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
            cluster.set_pod_status(f"gate-g1-worker-{i}", {"phase": "Running"})
        cluster.wait_phase("gate", "Running")
        cluster.write_report("gate", report(1, nodes=("gpu-ok", bad_node), failed_node=bad_node))
        status = cluster.wait_phase("gate", "Failed")
        assert status["summary"]["failedNodes"] == [bad_node]
        cluster.wait_event("gate", "NodeActionApplied")
        node = server.request("GET", f"/api/v1/nodes/{bad_node}")
        assert node["metadata"]["labels"]["gpu-acceptance.io/status"] == "failed"
        assert not cluster.exists(cluster.service_account_path("gate-workload"))

        cluster.delete_test("gate")
        cluster.wait(lambda: cluster.get_test("gate") is None, "the test to be deleted")
        # Its children go once it is gone (by owner uid, no finalizer): a moment after.
        cluster.wait(lambda: cluster.jobs("PyTorchJob") == [], "the test's PyTorchJob to be deleted with it")

        # A sweep: the nodes watched, its child tests created and deleted with it.
        for node in pool:
            server.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": node, "labels": {"pool": namespace}}})
        cluster.create_test("pool", {"sweep": True, "maxConcurrent": 1, "placement": {"nodeSelector": {
            "pool": namespace}}})
        cluster.play_sweep("pool")
        assert cluster.status("pool")["sweep"]["progress"] == "2/2 passed, 0 failed; inter-node Succeeded"
        cluster.delete_test("pool")
        cluster.wait(lambda: not cluster.server.request("GET", cluster.test_path())["items"],
                     "the sweep and its tests to be deleted")
    finally:
        for node in (bad_node, *pool):
            server.request("DELETE", f"/api/v1/nodes/{node}", expect=(200, 404))

    assert "gpu_acceptance_reconcile_errors_total{" not in proc.metrics()
    # No request refused, ours or kopf's (urllib3 logs each answer's status; kopf names APIForbiddenError).
    refused = re.findall(r'.*(?:HTTP/1\.1" 403 |Forbidden).*', proc.log_path.read_text())
    assert not refused, "\n".join(refused[:5])
