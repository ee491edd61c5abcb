"""The real node's cluster network: pods on a bridge, ClusterIP Services through kube-proxy, DNS from CoreDNS.

What a user's cluster gives its pods, built from the same programs (tests/realnode.py starts it):

- the pod network: a bridge (BRIDGE, POD_SUBNET; created here before the API server, which listens on its gateway
  address GATEWAY, so pods reach it and the `kubernetes` Service has an endpoint) and the bridge/host-local CNI
  plugins. Not podman's 10.88.0.0/16: podman's own bridge holds that subnet's route on this host too;
- kube-proxy of the API server's version in iptables mode: every ClusterIP Service, `kubernetes` included (its
  endpoint is the API server's advertised address, kept by the API server's lease reconciler);
- CoreDNS (built with only the plugins used here: hack/envtest-assets.sh real-node) as a host process on the
  gateway, serving CLUSTER_DOMAIN from the API server with its `kubernetes` plugin: Services
  (`<svc>.<ns>.svc.cluster.local`) and the pods of headless Services (`<hostname>.<subdomain>.<ns>.svc`, the names
  mpi-operator's launcher reaches its workers by). Pods reach it at the `kube-dns` Service (DNS_SERVICE_IP, the
  kubelet's clusterDNS). It answers nothing outside the cluster's zones: there is no upstream here.

`up` checks from this host, through kube-proxy's rules, that the DNS Service answers `kubernetes.default`.
"""

from __future__ import annotations

import json
import secrets
import struct
import subprocess
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from tests.apiserver import CLUSTER_NAME, stop_recorded
from tests.processes import free_ports

if TYPE_CHECKING:
    from tests.realnode import RealNode

BRIDGE = "gpuacc0"
POD_SUBNET = "10.244.0.0/16"
GATEWAY = "10.244.0.1"  # the bridge's address on this host: the API server and CoreDNS listen here
PREFIX = POD_SUBNET.split("/")[1]
KUBERNETES_SERVICE_IP = "10.0.0.1"  # the first address of tests.apiserver.SERVICE_CLUSTER_IP_RANGE
DNS_SERVICE_IP = "10.0.0.10"
CLUSTER_DOMAIN = "cluster.local"
DNS_NAMESPACE = "kube-system"
DNS_SERVICE = "kube-dns"
MANAGED_BY = "gpu-acceptance-real-node"  # the EndpointSlice's owner label: no controller of the cluster's touches it

CNI_CONFIG = {
    "cniVersion": "0.4.0", "name": "gpu-acceptance-real-node",
    "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}],
}


class NetworkError(RuntimeError):
    """The cluster network could not be set up."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def bridge_up() -> None:
    """The pod bridge with the gateway address, before the API server binds to it (the CNI plugin adopts it)."""
    shown = _ip("-o", "-4", "addr", "show", "dev", BRIDGE, check=False)
    if shown.returncode == 0 and f" {GATEWAY}/{PREFIX} " in shown.stdout:
        _ip("link", "set", BRIDGE, "up")
        return
    if shown.returncode == 0:  # an older real node's bridge on another subnet
        _ip("link", "del", BRIDGE)
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{GATEWAY}/{PREFIX}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def bridge_down() -> None:
    _ip("link", "del", BRIDGE, check=False)


def kubelet_settings() -> dict:
    """The kubelet's share: pods ask CoreDNS through the kube-dns Service."""
    return {"clusterDNS": [DNS_SERVICE_IP], "clusterDomain": CLUSTER_DOMAIN}


def kube_proxy_config(kubeconfig: Path, node: str, healthz: int, metrics: int) -> dict:
    """iptables mode; conntrack sysctls left alone (zeros: this sandbox may not write them); NodePorts only on the
    gateway (no Service is opened on this host's other addresses)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node, "mode": "iptables", "clusterCIDR": POD_SUBNET, "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": f"127.0.0.1:{healthz}", "metricsBindAddress": f"127.0.0.1:{metrics}",
        "nodePortAddresses": [f"{GATEWAY}/32"],
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "0s"},
    }


def corefile(kubeconfig: Path, port: int, health: int, ready: int, bind: str = GATEWAY) -> str:
    """CoreDNS's configuration: the cluster's zones from the API server, nothing else (no upstream)."""
    return f""".:{port} {{
    bind {bind}
    errors
    health 127.0.0.1:{health}
    ready 127.0.0.1:{ready}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} {CLUSTER_NAME}
        pods insecure
        ttl 5
    }}
}}
"""


def dns_objects(port: int) -> list[dict]:
    """The kube-dns Service (no selector: CoreDNS is no pod) and its EndpointSlice: the gateway, CoreDNS's port."""
    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": DNS_SERVICE, "namespace": DNS_NAMESPACE, "labels": {"k8s-app": "kube-dns"}},
        "spec": {"clusterIP": DNS_SERVICE_IP,
                 "ports": [{"name": n, "protocol": p, "port": 53, "targetPort": port} for n, p in ports]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{DNS_SERVICE}-host", "namespace": DNS_NAMESPACE,
                     "labels": {"kubernetes.io/service-name": DNS_SERVICE,
                                "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [GATEWAY], "conditions": {"ready": True}}],
        "ports": [{"name": n, "protocol": p, "port": port} for n, p in ports],
    }
    return [service, endpoints]


def dns_query(server: str, name: str, port: int = 53, timeout: float = 2.0) -> list[str]:
    """The A records `server` gives for `name` (one RFC 1035 query over UDP); [] for NXDOMAIN or no answer."""
    import socket

    qid = secrets.randbits(16)
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(packet, (server, port))
        data = s.recv(4096)
    rid, flags, _, count = struct.unpack(">HHHH", data[:8])
    if rid != qid or flags & 0xF:
        return []
    at = 12 + len(question) + 4
    found = []
    for _ in range(count):
        at = _skip_name(data, at)
        rtype, _, _, length = struct.unpack(">HHIH", data[at:at + 10])
        at += 10
        if rtype == 1 and length == 4:
            found.append(".".join(str(b) for b in data[at:at + 4]))
        at += length
    return found


def _skip_name(data: bytes, at: int) -> int:
    while data[at]:
        if data[at] & 0xC0 == 0xC0:  # a compression pointer ends the name
            return at + 2
        at += data[at] + 1
    return at + 1


class ClusterNetwork:
    """kube-proxy and CoreDNS beside a RealNode's kubelet (their logs and pid files in its folder)."""

    def __init__(self, node: RealNode):
        self.node = node

    @property
    def _state(self) -> Path:
        return self.node.dir / "network.json"

    def start(self, assets: Path, timeout: float = 60.0) -> None:
        node = self.node
        healthz, metrics, dns, health, ready = free_ports(5)
        config = node.dir / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(kube_proxy_config(node.kubeconfig, node.node, healthz, metrics)))
        self._state.write_text(json.dumps({"kube-proxy": str(assets / "kube-proxy")}))
        node._spawn("kube-proxy", [str(assets / "kube-proxy"), f"--config={config}", "--v=1"])
        (node.dir / "Corefile").write_text(corefile(node.kubeconfig, dns, health, ready))
        node._spawn("coredns", [str(assets / "coredns"), "-conf", str(node.dir / "Corefile")])
        path = node.dir / "kube-dns.yaml"
        path.write_text(yaml.safe_dump_all(dns_objects(dns)))
        node.kubectl("apply", "-f", str(path))
        node._wait(lambda: self._ready(ready), "CoreDNS to be ready (its kubernetes plugin synced)", timeout)
        name = f"kubernetes.default.svc.{CLUSTER_DOMAIN}"
        node._wait(lambda: self._resolves(name, KUBERNETES_SERVICE_IP),
                   f"{DNS_SERVICE_IP}:53 (kube-proxy's rule to CoreDNS) to resolve {name} to {KUBERNETES_SERVICE_IP}",
                   timeout)

    def _ready(self, port: int) -> bool:
        self.node._check_alive("kube-proxy", "coredns")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def _resolves(self, name: str, address: str) -> bool:
        self.node._check_alive("kube-proxy", "coredns")
        try:
            return dns_query(DNS_SERVICE_IP, name) == [address]
        except OSError:
            return False

    def stop(self) -> None:
        """Stop both and remove kube-proxy's rules (`kube-proxy --cleanup`); the bridge goes with bridge_down()."""
        for name in ("coredns", "kube-proxy"):
            stop_recorded(self.node.dir, name)
        if self._state.is_file():
            binary = json.loads(self._state.read_text())["kube-proxy"]
            subprocess.run([binary, "--cleanup", "--v=0"], capture_output=True, timeout=60)
            self._state.unlink()

