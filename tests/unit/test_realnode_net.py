"""The real node's cluster network, its pure parts: the DNS client that checks CoreDNS at start, the kube-dns objects,
and the API server's certificate naming the address pods reach it at."""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path

from tests.pki import read_pki, write_pki
from tests.realnode_net import (
    DNS_SERVICE_IP,
    GATEWAY,
    dns_objects,
    dns_query,
)


def _answer(query: bytes, rcode: int, addresses: list[str]) -> bytes:
    """A DNS server's reply: the question echoed, a CNAME-less answer per address, names as compression pointers."""
    qid = query[:2]
    header = qid + struct.pack(">HHHHH", 0x8180 | rcode, 1, len(addresses), 0, 0)
    answers = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(a) for a in addresses)
    return header + query[12:] + answers


def _serve_once(rcode: int, addresses: list[str]) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))

    def reply() -> None:
        with sock:
            query, peer = sock.recvfrom(512)
            sock.sendto(_answer(query, rcode, addresses), peer)

    threading.Thread(target=reply, daemon=True).start()
    return sock.getsockname()[1]


def test_dns_query_reads_the_a_records_of_the_answer() -> None:
    port = _serve_once(0, ["10.0.0.1", "10.244.0.7"])
    assert dns_query("127.0.0.1", "kubernetes.default.svc.cluster.local", port=port) == ["10.0.0.1", "10.244.0.7"]


def test_dns_query_reads_nxdomain_as_no_address() -> None:
    port = _serve_once(3, [])
    assert dns_query("127.0.0.1", "absent.default.svc.cluster.local", port=port) == []


def test_kube_dns_service_and_its_endpoints_name_the_same_ports() -> None:
    service, slice_ = dns_objects(1053)
    assert service["spec"]["clusterIP"] == DNS_SERVICE_IP and "selector" not in service["spec"]
    assert {(p["name"], p["protocol"], p["port"]) for p in service["spec"]["ports"]} == {
        ("dns", "UDP", 53), ("dns-tcp", "TCP", 53)}
    assert {(p["name"], p["protocol"], p["port"]) for p in slice_["ports"]} == {
        ("dns", "UDP", 1053), ("dns-tcp", "TCP", 1053)}
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
    assert slice_["endpoints"] == [{"addresses": [GATEWAY], "conditions": {"ready": True}}]


def test_a_pki_without_the_api_servers_address_is_written_again(tmp_path: Path) -> None:
    """A cluster folder first started on loopback, then on the gateway: its serving certificate must name it."""
    write_pki(tmp_path / "pki")
    assert read_pki(tmp_path / "pki") is not None
    assert read_pki(tmp_path / "pki", GATEWAY) is None
    write_pki(tmp_path / "pki", GATEWAY)
    assert read_pki(tmp_path / "pki", GATEWAY) is not None
