"""Never stuck: an operator missing a permission still ends every run.

The operator runs with the chart's ClusterRole minus one grant (as after a
chart/operator version mismatch). Without `list` on events it judges
scheduling from the pods' PodScheduled condition alone; unable to read the
job at all (neither get nor watch), it still ends the run as a Timeout once
timeoutSeconds has passed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster
from tests.helm import by_kind, render

LABELS = {"gpu-acceptance.io/test": "held", "gpu-acceptance.io/generation": "1"}
MakeOperator = Callable[[tuple[str, str, tuple[str, ...]]], Cluster]


@pytest.fixture
def operator_without(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator,
                     tmp_path: Path) -> Iterator[MakeOperator]:
    """Start an operator whose ClusterRole is the chart's minus (apiGroup, resource, verbs)."""
    created: list[str] = []

    def start(missing: tuple[str, str, tuple[str, ...]]) -> Cluster:
        group, resource, verbs = missing
        (role,) = by_kind(render())["ClusterRole"]
        rules = []
        for rule in role["rules"]:
            if group in rule["apiGroups"] and resource in rule["resources"]:
                others = [r for r in rule["resources"] if r != resource]
                if others:
                    rules.append({**rule, "resources": others})
                rules.append({**rule, "resources": [resource], "verbs": [v for v in rule["verbs"] if v not in verbs]})
            else:
                rules.append(rule)
        name = f"degraded-{uuid.uuid4().hex[:6]}"
        acceptance_crd.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": rules})
        acceptance_crd.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}]})
        created.append(name)
        for kind in ("Role", "RoleBinding"):  # the chart's lease grant, in the namespace of the test's operator
            (obj,) = by_kind(render(namespace=namespace))[kind]
            acceptance_crd.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{kind.lower()}s",
                                   {**obj, "subjects": [{"kind": "ServiceAccount", "name": "operator",
                                                         "namespace": namespace}]} if kind == "RoleBinding" else obj,
                                   expect=(201, 409))
        token = acceptance_crd.token_for_service_account(namespace, "operator")
        kubeconfig = acceptance_crd.kubeconfig_for_token(token, tmp_path / f"{name}.kubeconfig")
        proc = start_operator(kubeconfig, [namespace], {"GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "2"})
        return Cluster(acceptance_crd, namespace, proc.log_tail)

    yield start
    for name in created:
        acceptance_crd.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
                               expect=(200, 404))
        acceptance_crd.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}", expect=(200, 404))


def test_unschedulable_without_reading_events(operator_without: MakeOperator):
    cluster = operator_without(("", "events", ("list",)))
    cluster.create_test("held", {"nodes": 2})
    cluster.wait_job("PyTorchJob", "held-g1")
    cluster.create_pod("held-g1-master-0", LABELS)
    cluster.set_pod_status("held-g1-master-0", {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient rdma/ib.",
        "lastTransitionTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}]})
    cluster.wait_phase("held", "Failed")
    succeeded = cluster.condition("held", "Succeeded")
    assert succeeded["reason"] == "Unschedulable"
    assert "Insufficient rdma/ib" in succeeded["message"] and "spec.resources.extra" in succeeded["message"]


def test_timeout_even_when_the_job_cannot_be_read(operator_without: MakeOperator):
    cluster = operator_without(("kubeflow.org", "pytorchjobs", ("get", "watch")))
    cluster.create_test("held", {"timeoutSeconds": 60})
    cluster.wait_phase("held", "Pending")
    cluster.wait_job("PyTorchJob", "held-g1")
    cluster.age_run_until_failed("held")
    succeeded = cluster.condition("held", "Succeeded")
    assert succeeded["reason"] == "Timeout"
    assert "cannot read PyTorchJob held-g1" in succeeded["message"] and "HTTP 403" in succeeded["message"]
