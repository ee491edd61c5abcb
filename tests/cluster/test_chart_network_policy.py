"""The chart's NetworkPolicy against the real test API server: `helm install` (here `helm template
--dry-run=server`, which reads the cluster as an install does) finds the API server's own addresses in the
`kubernetes` EndpointSlice and Service, and the API server accepts the policy. What the rules allow is
tests/unit/test_chart_network_policy.py."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml

from tests.apiserver import ApiServer
from tests.helm import CHART, helm, values_file

SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
# What the API server's endpoint reconciler keeps (this test server runs without one: --endpoint-reconciler-type=none).
SLICE = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
         "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
         "endpoints": [{"addresses": ["192.0.2.10"]}, {"addresses": ["192.0.2.11"]}],
         "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}


def test_the_api_servers_addresses_are_read_from_the_cluster_and_the_policy_is_accepted(
        apiserver: ApiServer, namespace: str) -> None:
    env = {**os.environ, "KUBECONFIG": str(apiserver.kubeconfig)}
    apiserver.request("POST", SLICES, SLICE)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            proc = helm("template", "ga-np", str(CHART), "--namespace", namespace, "--dry-run=server",
                        "--show-only", "templates/networkpolicy.yaml",
                        *values_file({"networkPolicy": {"enabled": True, "namespaces": [namespace]}}, Path(tmp)),
                        env=env)
    finally:
        apiserver.request("DELETE", f"{SLICES}/kubernetes")
    (policy,) = [d for d in yaml.safe_load_all(proc.stdout) if d]
    service = apiserver.request("GET", "/api/v1/namespaces/default/services/kubernetes")
    rule = policy["spec"]["egress"][1]
    # The endpoints' addresses (a policy is judged after the Service's address is translated), and the Service's.
    assert [b["ipBlock"]["cidr"] for b in rule["to"]] == ["192.0.2.10/32", "192.0.2.11/32",
                                                          f"{service['spec']['clusterIP']}/32"]
    assert [p["port"] for p in rule["ports"]] == [6443, 443]
    out = apiserver.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(policy),
                            check=False)
    assert out.returncode == 0 and "(server dry run)" in out.stdout, out.stderr
