"""AWS EFA (network.fabric efa): NCCL must use its libfabric network (the aws-ofi-nccl plugin, transport OFI)
between nodes; a node whose NCCL fell back to TCP sockets fails, named. Judged from NCCL log fixtures whose lines
have the shape of public EFA logs (fixtures/efa/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from acceptance_workload.checks import table as rules
from acceptance_workload.checks.nccl.transport import classify, judge, parse_file, parse_lines
from acceptance_workload.checks.preflight.preflight import ib_checks
from acceptance_workload.checks.preflight.profile import FLOORS as PREFLIGHT
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig

from tests.workload.test_transport import NODE_A_IB

FIXTURES = Path(__file__).parent / "fixtures" / "efa"


def log(name: str):
    """A fixture log, parsed afresh (each node its own copy)."""
    return parse_file(FIXTURES / name)


def efa_required() -> str | None:
    """The inter-node transport the rule table expects of a two-node efa run."""
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=2, fabric="efa")
    return rules.expected("nccl", "transport", config.checks.nccl.thresholds, rules.Run.of(config))


def test_an_efa_run_requires_nccls_libfabric_network():
    assert efa_required() == "OFI"
    one = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=1, fabric="efa")
    assert one.required_transport() is None  # one node sends nothing over the fabric


@pytest.mark.parametrize("token", ["NET/Libfabric/0/GDRDMA", "NET/Libfabric/1/GDRDMA/Shared",
                                   "NET/AWS Libfabric/0", "NET/AWS Libfabric/1/GDRDMA/Shared"])
def test_libfabric_connections_are_ofi(token: str):
    assert classify(token) == "OFI"
    assert classify("NET/Socket/0") == "SOCKET" and classify("NET/IB/0/GDRDMA") == "IB_GDR"


@pytest.mark.parametrize("fixture, network", [("p5-libfabric.log", "Libfabric"),
                                              ("p4d-aws-libfabric.log", "AWS Libfabric")])
def test_both_plugin_spellings_are_read(fixture: str, network: str):
    parsed = log(fixture)
    assert parsed.networks == {network}
    assert parsed.connections["OFI"] >= 3 and parsed.connections["P2P"] >= 1
    assert "SOCKET" not in parsed.connections and not parsed.other_nets
    assert parsed.transports() == ["P2P", "OFI"]


def test_libfabric_on_every_node_passes():
    per_node = {"p5-a": log("p5-libfabric.log"), "p5-b": log("p5-libfabric.log"),
                "p4d-c": log("p4d-aws-libfabric.log")}
    results = judge(efa_required(), per_node, multi_node=True)
    assert [r.node for r in results] == ["p5-a", "p5-b", "p4d-c"]
    for r in results:
        assert r.passed and r.value == 1.0 and r.expected == "OFI" and r.threshold == 1.0, r.message
        assert "OFI required between nodes" in r.message


def test_a_node_that_fell_back_to_sockets_fails_named():
    """p5-b's plugin found no efa provider; its NCCL chose sockets. p5-a chose libfabric: its socket connections
    to p5-b are p5-b's fault, not counted against it."""
    a = log("p5-libfabric.log")
    a.connections["SOCKET"] += 2  # a's side of its connections to b, which fell back
    per_node = {"p5-a": a, "p5-b": log("p5-socket-fallback.log"), "p5-c": log("p5-libfabric.log")}
    results = {r.node: r for r in judge(efa_required(), per_node, multi_node=True)}
    assert [n for n, r in results.items() if not r.passed] == ["p5-b"]
    b = results["p5-b"]
    assert b.value == 0.0 and b.observed == "P2P,SOCKET" and b.expected == "OFI"
    assert "NCCL fell back to TCP sockets" in b.message and "vpc.amazonaws.com/efa" in b.message
    assert "--check-install --efa" in b.message and "using network Socket" in b.message
    assert results["p5-a"].value == 1.0
    assert "2 socket connection(s) not counted: this node's NCCL chose OFI, and p5-b fell back" in (
        results["p5-a"].message)


def test_every_node_on_sockets_fails_every_node():
    per_node = {"p5-a": log("p5-socket-fallback.log"), "p5-b": log("p5-socket-fallback.log")}
    results = judge(efa_required(), per_node, multi_node=True)
    assert [(r.node, r.passed) for r in results] == [("p5-a", False), ("p5-b", False)]


def test_infiniband_on_an_efa_run_is_not_libfabric():
    """An InfiniBand log does not pass an EFA requirement (nor libfabric an IB one)."""
    results = judge("OFI", {"gpu-a": parse_lines(NODE_A_IB.splitlines())}, multi_node=True)
    assert not results[0].passed and results[0].value == 0.0
    results = judge("IB_GDR", {"p5-a": log("p5-libfabric.log")}, multi_node=True)
    assert not results[0].passed and results[0].value == 0.0


def test_no_log_line_fails_closed():
    empty = parse_file(FIXTURES / "absent.log")
    (result,) = judge(efa_required(), {"p5-a": empty}, multi_node=True)
    assert not result.passed and result.value is None and "p5-a" in result.message


def fake_efa_port(root: Path, dev: str, state: str, rate: str = "100 Gb/sec (4X EDR)") -> None:
    port = root / "sys" / "class" / "infiniband" / dev / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    (port / "rate").write_text(rate + "\n")
    (port / "link_layer").write_text("Unspecified\n")


def test_efa_ports_must_be_active_but_are_not_held_to_the_ib_rate(tmp_path: Path):
    """An EFA device carries a share of its node's bandwidth: the 400 Gb/s IB port floor would fail every healthy
    p5; its state is judged, a DOWN device named."""
    th = PREFLIGHT["h100-sxm"]
    fake_efa_port(tmp_path, "rdmap79s0", "4: ACTIVE")
    fake_efa_port(tmp_path, "rdmap80s0", "1: DOWN")
    results, _ = ib_checks(th, "p5-a", fabric="efa", nodes=2, sys_root=tmp_path)
    by = {(r.name, r.observed.split()[0]): r for r in results}
    assert by[("ib_port_rate", "rdmap79s0:1")].passed and by[("ib_port_rate", "rdmap79s0:1")].threshold is None
    assert by[("ib_port_state", "rdmap79s0:1")].passed
    down = by[("ib_port_state", "rdmap80s0:1")]
    assert not down.passed and down.node == "p5-a"
    ib, _ = ib_checks(th, "gpu-a", fabric="infiniband", nodes=2, sys_root=tmp_path)
    assert not next(r for r in ib if r.name == "ib_port_rate").passed  # the same port on IB: held to 400 Gb/s


def test_an_efa_pod_without_devices_says_to_request_them(tmp_path: Path):
    (result,), _ = ib_checks(PREFLIGHT["h100-sxm"], "p5-a", fabric="efa", nodes=2, sys_root=tmp_path)
    assert not result.passed and "network.efaDevices: vpc.amazonaws.com/efa" in result.message
