"""Reading the transport from NCCL's INFO log, and requiring one."""

from __future__ import annotations

from pathlib import Path

from acceptance_workload.checks.nccl.transport import (
    TransportLog,
    classify,
    configure_logging,
    judge,
    judge_intra_node,
    parse_file,
    parse_lines,
)

# Lines as NCCL 2.18-2.23 print them (host:pid:tid [dev] prefix included).
NODE_A_IB = """\
gpu-a:2101:2190 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0,mlx5_1
gpu-a:2101:2190 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.11<0>
gpu-a:2101:2190 [0] NCCL INFO Using network IB
gpu-a:2101:2201 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
gpu-a:2101:2201 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-a:2101:2201 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a:2101:2201 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1(1)/GDRDMA/Shared
gpu-a:2101:2201 [0] NCCL INFO Connected all rings
"""
NODE_B_SOCKETS = """\
gpu-b:3101:3190 [0] NCCL INFO NET/IB : No device found.
gpu-b:3101:3190 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.12<0>
gpu-b:3101:3190 [0] NCCL INFO Using network Socket
gpu-b:3101:3201 [0] NCCL INFO Channel 00/0 : 8[0] -> 9[1] via SHM/direct/direct
gpu-b:3101:3201 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [receive] via NET/Socket/0
gpu-b:3101:3201 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [send] via NET/Socket/1
"""


def test_classify_each_via_token() -> None:
    assert classify("P2P/IPC") == "P2P"
    assert classify("P2P/CUMEM/read") == "P2P"
    assert classify("SHM/direct/direct") == "SHM"
    assert classify("NET/IB/0/GDRDMA") == "IB_GDR"
    assert classify("NET/IB/0") == "IB"
    assert classify("NET/IBext_v8/2/GDRDMA") == "IB_GDR"
    assert classify("NET/Socket/0") == "SOCKET"
    assert classify("NET/AWS Libfabric/0") == "OFI"  # AWS EFA: test_efa_transport.py


def test_parse_counts_connections_networks_and_devices() -> None:
    log = parse_lines(NODE_A_IB.splitlines())
    assert dict(log.connections) == {"P2P": 2, "IB_GDR": 2}
    assert log.networks == {"IB"} and log.ib_devices == {"mlx5_0:1/IB", "mlx5_1:1/IB"}
    assert log.transports() == ["P2P", "IB_GDR"]
    b = parse_lines(NODE_B_SOCKETS.splitlines())
    assert dict(b.connections) == {"SHM": 1, "SOCKET": 2} and b.networks == {"Socket"}
    assert TransportLog.from_json(b.to_json()) == b


def test_infiniband_requirement_fails_the_node_that_fell_back_to_sockets() -> None:
    per_node = {"gpu-a": parse_lines(NODE_A_IB.splitlines()), "gpu-b": parse_lines(NODE_B_SOCKETS.splitlines())}
    results = {r.node: r for r in judge("IB_GDR", per_node, multi_node=True)}
    assert results["gpu-a"].passed and results["gpu-a"].value == 1.0
    b = results["gpu-b"]
    assert not b.passed and b.value == 0.0 and b.expected == "IB_GDR"
    assert "fell back to TCP sockets" in b.message and "using network Socket" in b.message
    assert b.observed == "SHM,SOCKET"


def test_only_the_node_whose_nccl_chose_sockets_is_named_not_its_ib_peers() -> None:
    """Node a's NCCL chose IB; its connections to b, which fell back, went through sockets on both sides."""
    a_to_b = NODE_A_IB + "gpu-a:2101:2201 [0] NCCL INFO Channel 02/0 : 0[0] -> 8[0] [send] via NET/Socket/0\n"
    per_node = {"gpu-a": parse_lines(a_to_b.splitlines()), "gpu-b": parse_lines(NODE_B_SOCKETS.splitlines()),
                "gpu-c": parse_lines(NODE_A_IB.replace("gpu-a", "gpu-c").splitlines())}
    results = {r.node: r for r in judge("IB_GDR", per_node, multi_node=True)}
    assert [n for n, r in results.items() if not r.passed] == ["gpu-b"]
    assert results["gpu-a"].value == 1.0 and "1 socket connection(s) not counted" in results["gpu-a"].message
    assert "gpu-b fell back to sockets" in results["gpu-a"].message
    # with no node on IB nothing tells them apart: every node's own connections decide
    both = {"gpu-a": parse_lines(NODE_B_SOCKETS.replace("gpu-b", "gpu-a").splitlines()),
            "gpu-b": parse_lines(NODE_B_SOCKETS.splitlines())}
    assert not any(r.passed for r in judge("IB", both, multi_node=True))


def test_ib_without_gpudirect_fails_an_ib_gdr_requirement_but_passes_ib() -> None:
    plain = parse_lines(["h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0"])
    [gdr] = judge("IB_GDR", {"n": plain}, multi_node=True)
    assert not gdr.passed and "GPUDirect RDMA not used" in gdr.message
    [ib] = judge("IB", {"n": plain}, multi_node=True)
    assert ib.passed


def test_a_requirement_without_any_log_line_fails_closed() -> None:
    [r] = judge("IB", {"n": TransportLog()}, multi_node=True)
    assert not r.passed and r.value is None
    assert "no inter-node NCCL connection" in r.message and "NCCL_DEBUG=INFO" in r.message


def test_without_a_requirement_the_transports_are_recorded() -> None:
    [r] = judge(None, {"gpu-a": parse_lines(NODE_A_IB.splitlines())}, multi_node=False)
    assert r.passed and r.comparison == "info" and r.observed == "P2P,IB_GDR"


def test_configure_logging_points_nccl_at_a_per_rank_file(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    path = configure_logging(env, 3, tmp_path)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl-rank3.log") == str(path)
    # the user's settings stay; NCCL's %h / %p are resolved to find the file
    env = {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": str(tmp_path / "n.%p.log")}
    path = configure_logging(env, 0, tmp_path)
    assert env["NCCL_DEBUG"] == "WARN" and "%p" not in str(path) and path.name.startswith("n.")
    path.write_text(NODE_B_SOCKETS)
    assert parse_file(path).transports() == ["SHM", "SOCKET"]
    assert parse_file(tmp_path / "absent.log").transports() == []


ONE_NODE_P2P_OFF = """\
vm:11:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct
vm:11:12 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct
"""
ONE_NODE_AS_TWO_HOSTS = """\
vm:11:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
vm:11:12 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[2] [send] via NET/Socket/0
"""


def test_intra_node_transport_passes_on_nvlink_and_names_a_node_that_fell_back_to_shm() -> None:
    healthy = judge_intra_node("P2P", {"node-a": parse_lines(NODE_A_IB.splitlines())}, False, 8)
    assert [(r.node, r.value, r.passed) for r in healthy] == [("node-a", 1.0, True)]
    shm = judge_intra_node("P2P", {"node-a": parse_lines(NODE_A_IB.splitlines()),
                                   "node-b": parse_lines(NODE_B_SOCKETS.splitlines())}, False, 8)
    assert [(r.node, r.passed) for r in shm] == [("node-a", True), ("node-b", False)]
    assert "NVLink" in shm[1].message and shm[1].observed == "SHM"  # the inter-node sockets are not counted here
    off = judge_intra_node("P2P", {"vm": parse_lines(ONE_NODE_P2P_OFF.splitlines())}, True, 2)
    assert off[0].value == 0.0 and not off[0].passed and "NCCL_P2P_DISABLE" in off[0].message


def test_in_a_single_node_run_a_network_connection_is_between_gpus_of_that_node() -> None:
    [r] = judge_intra_node("P2P", {"vm": parse_lines(ONE_NODE_AS_TWO_HOSTS.splitlines())}, True, 4)
    assert r.value == 0.5 and not r.passed and "NCCL_HOSTID" in r.message


def test_intra_node_transport_fails_closed_and_is_not_judged_without_a_requirement_or_a_second_gpu() -> None:
    [missing] = judge_intra_node("P2P", {"vm": TransportLog()}, True, 2)
    assert missing.value is None and not missing.passed
    assert judge_intra_node(None, {"vm": TransportLog()}, True, 8) == []
    assert judge_intra_node("P2P", {"vm": TransportLog()}, True, 1) == []
