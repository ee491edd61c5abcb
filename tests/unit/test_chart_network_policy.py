"""The chart's NetworkPolicy for the test pods (networkPolicy.enabled), rendered by a real helm: where it goes, what
it lets the test pods reach, and that it selects exactly the pods the operator creates, for every backend.

No policy controller runs here: what a controller enforces is these rules, and the rules are what is checked.
"""

from __future__ import annotations

from typing import Any

import pytest
from acceptance_operator.building.backends import BACKENDS, build_children
from acceptance_operator.resource import api
from acceptance_operator.resource.api import AcceptanceTest

from tests.helm import by_kind, render, template

NAMESPACE = "gpu-acceptance-system"
API = {"cidrs": ["10.0.0.1/32", "192.168.10.5/32"], "ports": [6443]}


def policies(values: dict[str, Any]) -> list[dict[str, Any]]:
    return by_kind(render({"networkPolicy": {"enabled": True, "apiServer": API, **values}})).get("NetworkPolicy", [])


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector's verdict on a pod's labels (matchLabels; matchExpressions In, NotIn, Exists,
    DoesNotExist)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {"Exists": key in labels, "DoesNotExist": key not in labels, "In": labels.get(key) in values,
              "NotIn": labels.get(key) not in values}[op]
        if not ok:
            return False
    return True


def pod_templates(obj: Any) -> list[dict[str, Any]]:
    """Every pod template in a built object (a dict with a pod spec under 'spec' and its metadata)."""
    found = []
    if isinstance(obj, dict):
        if isinstance(obj.get("spec"), dict) and "containers" in obj["spec"]:
            found.append(obj)
        for value in obj.values():
            found += pod_templates(value)
    elif isinstance(obj, list):
        for value in obj:
            found += pod_templates(value)
    return found


def test_off_by_default() -> None:
    assert "NetworkPolicy" not in by_kind(render())


def test_one_policy_in_each_namespace_tests_run_in_the_release_namespace_by_default() -> None:
    assert [p["metadata"]["namespace"] for p in policies({})] == [NAMESPACE]
    listed = policies({"namespaces": ["gpu-tests", "burn-in", "gpu-tests"]})
    assert [p["metadata"]["namespace"] for p in listed] == ["gpu-tests", "burn-in"]
    assert {p["metadata"]["name"] for p in listed} == {"gpu-acceptance-test-pods"}


def test_the_test_pods_reach_the_api_server_dns_and_each_other_and_only_test_pods_reach_them() -> None:
    (policy,) = policies({"extraEgress": [{"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}],
                                            "ports": [{"protocol": "TCP", "port": 2049}]}]})
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    own = spec["podSelector"]
    # Ingress: from test pods only, any port.
    assert spec["ingress"] == [{"from": [{"podSelector": own}]}]
    peers, apiserver, dns, extra = spec["egress"]
    # Each other on every port (no ports: torch's rendezvous, NCCL's bootstrap and sockets, MPI's sshd).
    assert peers == {"to": [{"podSelector": own}]}
    assert apiserver == {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "192.168.10.5/32"}}],
                         "ports": [{"protocol": "TCP", "port": 6443}]}
    assert dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                          "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    assert sorted((p["protocol"], p["port"]) for p in dns["ports"]) == [("TCP", 53), ("UDP", 53)]
    assert extra["ports"] == [{"protocol": "TCP", "port": 2049}]
    # Without cluster DNS (NodeLocal DNSCache, say, through extraEgress): no DNS rule.
    (policy,) = policies({"dns": {"enabled": False}})
    assert len(policy["spec"]["egress"]) == 2


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_it_selects_every_pod_the_operator_creates_for_a_test_and_not_the_operator(backend: str) -> None:
    (policy,) = policies({})
    selector = policy["spec"]["podSelector"]
    test = AcceptanceTest.model_validate({
        "apiVersion": api.API_VERSION, "kind": api.KIND,
        "metadata": {"name": "t", "namespace": NAMESPACE, "uid": "u", "generation": 1},
        "spec": {"backend": backend, "nodes": 2}})
    templates = [t for child in build_children(test) for t in pod_templates(child)]
    assert templates, backend
    for t in templates:
        assert selects(selector, t["metadata"]["labels"]), t["metadata"]["labels"]
    chart = render({"networkPolicy": {"enabled": True, "apiServer": API}})
    (operator,) = by_kind(chart)["Deployment"]
    assert not selects(selector, operator["spec"]["template"]["metadata"]["labels"])


def test_without_the_api_servers_addresses_and_no_cluster_to_read_them_from_it_says_what_to_set() -> None:
    proc = template({"networkPolicy": {"enabled": True}}, check=False)
    assert proc.returncode != 0
    assert "networkPolicy.apiServer.cidrs: the API server's addresses could not be read from the cluster" in \
        proc.stderr and "kubectl get endpointslice kubernetes -n default" in proc.stderr


@pytest.mark.parametrize(("values", "field"), [
    ({"apiServer": {"cidrs": ["10.0.0.1"]}}, "/networkPolicy/apiServer/cidrs/0"),
    ({"apiServer": {"cidrs": ["10.0.0.1/32"], "ports": [0]}}, "/networkPolicy/apiServer/ports/0"),
    ({"namespaces": ["GPU_Tests"]}, "/networkPolicy/namespaces/0"),
    ({"dns": {"enable": True}}, "networkPolicy/dns"),
])
def test_schema_rejects_bad_values(values: dict[str, Any], field: str) -> None:
    proc = template({"networkPolicy": {"enabled": True, **values}}, check=False)
    assert proc.returncode != 0 and field in proc.stderr, proc.stderr
