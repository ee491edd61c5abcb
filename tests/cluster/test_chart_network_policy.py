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


def test_the_api_servers_addresses_are_read_from_the_cluster_and_the_policy_is_accepted(
        apiserver: ApiServer, namespace: str) -> None:
    env = {**os.environ, "KUBECONFIG": str(apiserver.kubeconfig)}
    with tempfile.TemporaryDirectory() as tmp:
        proc = helm("template", "ga-np", str(CHART), "--namespace", namespace, "--dry-run=server",
                    "--show-only", "templates/networkpolicy.yaml",
                    *values_file({"networkPolicy": {"enabled": True, "namespaces": [namespace]}}, Path(tmp)),
                    env=env)
    (policy,) = [d for d in yaml.safe_load_all(proc.stdout) if d]
    slice_ = apiserver.request("GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes")
    service = apiserver.request("GET", "/api/v1/namespaces/default/services/kubernetes")
    addresses = [a for e in slice_["endpoints"] for a in e["addresses"]] + [service["spec"]["clusterIP"]]
    ports = {p["port"] for p in slice_["ports"]} | {443}
    rule = policy["spec"]["egress"][1]
    assert [b["ipBlock"]["cidr"] for b in rule["to"]] == [f"{a}/32" for a in addresses]
    assert {p["port"] for p in rule["ports"]} == ports
    out = apiserver.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(policy),
                            check=False)
    assert out.returncode == 0 and "(server dry run)" in out.stdout, out.stderr
