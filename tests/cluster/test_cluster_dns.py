"""The real node's cluster DNS (tests/realnode_net.py) against a real API server, without a kubelet: CoreDNS, as
built by hack/envtest-assets.sh real-node and configured by realnode_net.corefile, answers a Service's name with
its ClusterIP and a headless Service's pod by its hostname (the names mpi-operator's launcher reaches its workers
by), and nothing for a name that is not there."""

from __future__ import annotations

import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from tests.apiserver import ApiServer
from tests.processes import die_with_parent, free_ports
from tests.realnode import _assets
from tests.realnode_net import CLUSTER_DOMAIN, corefile, dns_query

WORKER_IP = "10.244.0.5"


@pytest.fixture(scope="module")
def coredns(apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """CoreDNS on loopback, serving the shared API server's cluster.local; yields its port once it is ready."""
    folder = tmp_path_factory.mktemp("coredns")
    port, health, ready = free_ports(3)
    (folder / "Corefile").write_text(corefile(apiserver.kubeconfig, port, health, ready, bind="127.0.0.1"))
    with open(folder / "coredns.log", "wb") as log:
        proc = subprocess.Popen([str(_assets() / "coredns"), "-conf", str(folder / "Corefile")], stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    try:
        deadline = time.monotonic() + 30
        while not _ready(ready):
            assert proc.poll() is None and time.monotonic() < deadline, (folder / "coredns.log").read_text()
            time.sleep(0.5)
        yield port
    finally:
        proc.kill()
        proc.wait()


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _resolved(port: int, name: str, want: list[str], seconds: float = 10) -> list[str]:
    """What CoreDNS answers for name, asked until it gives `want` (its informers see new objects within moments)."""
    deadline = time.monotonic() + seconds
    while (got := dns_query("127.0.0.1", name, port=port)) != want and time.monotonic() < deadline:
        time.sleep(0.3)
    return got


def test_services_and_headless_pods_resolve_and_absent_names_do_not(apiserver: ApiServer, coredns: int) -> None:
    ns = apiserver.create_namespace(f"dns-{uuid.uuid4().hex[:6]}")
    web = apiserver.request("POST", f"/api/v1/namespaces/{ns}/services", {
        "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}, expect=(201,))
    apiserver.request("POST", f"/api/v1/namespaces/{ns}/services", {
        "metadata": {"name": "job"}, "spec": {"clusterIP": "None", "ports": [{"port": 22}]}}, expect=(201,))
    # What the EndpointSlice controller writes for a worker pod with hostname job-worker-0 and subdomain job.
    apiserver.request("POST", f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {
        "metadata": {"name": "job-abcde", "labels": {"kubernetes.io/service-name": "job"}},
        "addressType": "IPv4", "ports": [{"port": 22, "protocol": "TCP"}],
        "endpoints": [{"addresses": [WORKER_IP], "hostname": "job-worker-0", "conditions": {"ready": True}}],
    }, expect=(201,))
    cluster_ip = web["spec"]["clusterIP"]
    assert _resolved(coredns, f"web.{ns}.svc.{CLUSTER_DOMAIN}", [cluster_ip]) == [cluster_ip]
    worker = f"job-worker-0.job.{ns}.svc.{CLUSTER_DOMAIN}"
    assert _resolved(coredns, worker, [WORKER_IP]) == [WORKER_IP]
    assert dns_query("127.0.0.1", f"job-worker-1.job.{ns}.svc.{CLUSTER_DOMAIN}", port=coredns) == []
    assert dns_query("127.0.0.1", f"absent.{ns}.svc.{CLUSTER_DOMAIN}", port=coredns) == []

