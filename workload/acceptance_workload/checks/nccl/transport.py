"""Which transport NCCL actually used, read from its INFO log.

NCCL prints one line per connection it sets up, e.g.
  `NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`           (NVLink / PCIe peer-to-peer)
  `NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct` (through host shared memory)
  `NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA`  (InfiniBand/RoCE, GPUDirect RDMA)
  `NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0`     (TCP sockets)
  `NCCL INFO Channel 03/0 : 19[201d0] -> 26[201c0] [send] via NET/AWS Libfabric/0/GDRDMA`
      (AWS EFA through the aws-ofi-nccl plugin; newer plugins name the network "Libfabric")
An InfiniBand or EFA test whose inter-node connections went through sockets has not
tested the fabric: it fails with that reason, naming the node whose NCCL fell back. The log goes to a per-rank file
(NCCL_DEBUG_FILE), set before the first communicator exists.
"""

from __future__ import annotations

import os
import re
import socket
from collections import Counter
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from acceptance_workload.checks.nccl.rules import RULES
from acceptance_workload.contract import rules
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.terms import Transport

# The plugin's network name may hold a space ("AWS Libfabric"): the only one known to, so it is spelled out.
_VIA = re.compile(r"NCCL INFO Channel \d+(?:/\d+)?\s*:\s*\d+\[\w+\]\s*->\s*\d+\[\w+\].*?\bvia "
                  r"(NET/AWS Libfabric\S*|\S+)")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (AWS Libfabric|\S+)")
_IB_DEVICES = re.compile(r"NCCL INFO NET/IB\S* : Using (.+?)(?: ; OOB|$)")
NET_TRANSPORTS: frozenset[Transport] = frozenset({"IB", "IB_GDR", "OFI", "SOCKET"})
# The network plugin names NCCL reports for each RDMA transport family ("Using network IB", "... Libfabric").
RDMA_NETWORKS: dict[str, tuple[str, ...]] = {"IB": ("ib",), "OFI": ("aws libfabric", "libfabric", "ofi")}
# What to check when a node's NCCL fell back to sockets, by the transport required.
FALLBACK_HINTS: dict[str, str] = {
    "IB": "check the RDMA devices in the pod, NCCL_IB_HCA and memlock",
    "OFI": "check that the pod got its vpc.amazonaws.com/efa devices, that the image has the aws-ofi-nccl plugin "
           "and libfabric's efa provider (python -m acceptance_workload --check-install --efa) and FI_PROVIDER=efa",
}
LOCAL_TRANSPORTS: frozenset[Transport] = frozenset({"P2P", "SHM"})


def classify(via: str) -> Transport | None:
    """The transport of one `via ...` token; None for a network plugin that is neither IB nor sockets."""
    parts = via.split("/")
    kind = parts[0]
    if kind == "P2P":
        return "P2P"
    if kind == "SHM":
        return "SHM"
    if kind == "NET" and len(parts) > 1:
        net = parts[1].lower()
        if net.startswith("socket"):
            return "SOCKET"
        if net.startswith("ib"):  # IB, IBext, IBext_v8: the verbs transport (InfiniBand and RoCE)
            return "IB_GDR" if "GDRDMA" in parts[2:] else "IB"
        if net.startswith(RDMA_NETWORKS["OFI"]):  # AWS Libfabric, Libfabric: the aws-ofi-nccl plugin (EFA)
            return "OFI"
    return None


@dataclass
class TransportLog:
    """What one or more NCCL logs say about the connections made."""

    connections: Counter[str] = field(default_factory=Counter)  # Transport -> connections
    networks: set[str] = field(default_factory=set)  # "Using network IB" / "Socket"
    ib_devices: set[str] = field(default_factory=set)
    other_nets: set[str] = field(default_factory=set)  # e.g. an EFA plugin

    def transports(self) -> list[Transport]:
        order: list[Transport] = ["P2P", "SHM", "IB_GDR", "IB", "OFI", "SOCKET"]
        return [t for t in order if self.connections.get(t)]

    def net(self) -> Counter[str]:
        return Counter({t: n for t, n in self.connections.items() if t in NET_TRANSPORTS})

    def local(self) -> Counter[str]:
        return Counter({t: n for t, n in self.connections.items() if t in LOCAL_TRANSPORTS})

    def merge(self, other: TransportLog) -> TransportLog:
        return TransportLog(self.connections + other.connections, self.networks | other.networks,
                            self.ib_devices | other.ib_devices, self.other_nets | other.other_nets)

    def to_json(self) -> dict:
        return {"connections": dict(self.connections), "networks": sorted(self.networks),
                "ib_devices": sorted(self.ib_devices), "other_nets": sorted(self.other_nets)}

    @classmethod
    def from_json(cls, d: dict) -> TransportLog:
        return cls(Counter(d["connections"]), set(d["networks"]), set(d["ib_devices"]), set(d["other_nets"]))


def parse_lines(lines: Iterable[str]) -> TransportLog:
    log = TransportLog()
    for line in lines:
        if m := _VIA.search(line):
            kind = classify(m.group(1))
            if kind is None:
                log.other_nets.add(m.group(1))
            else:
                log.connections[kind] += 1
        elif m := _USING_NETWORK.search(line):
            log.networks.add(m.group(1))
        elif m := _IB_DEVICES.search(line):
            log.ib_devices.update(re.findall(r"\[\d+\](\S+)", m.group(1)))
    return log


def parse_file(path: str | os.PathLike) -> TransportLog:
    try:
        with open(path, errors="replace") as f:
            return parse_lines(f)
    except FileNotFoundError:
        return TransportLog()


def configure_logging(environ: MutableMapping[str, str], rank: int, directory: str | os.PathLike) -> Path:
    """Point NCCL's INFO log at a per-rank file (before NCCL starts) and return that file's path.

    A user's NCCL_DEBUG / NCCL_DEBUG_SUBSYS / NCCL_DEBUG_FILE are kept; without
    INFO level, no transport can be seen and a required one fails.
    """
    environ.setdefault("NCCL_DEBUG", "INFO")
    environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
    if "NCCL_DEBUG_FILE" not in environ:
        Path(directory).mkdir(parents=True, exist_ok=True)
        environ["NCCL_DEBUG_FILE"] = str(Path(directory) / f"nccl-rank{rank}.log")
    host = socket.gethostname().split(".")[0]
    return Path(environ["NCCL_DEBUG_FILE"].replace("%h", host).replace("%p", str(os.getpid())))


def _describe(counts: Counter[str]) -> str:
    return ", ".join(f"{n} via {t}" for t, n in sorted(counts.items())) or "none"


def judge(required: Transport | None, per_node: dict[str, TransportLog], multi_node: bool) -> list[CheckResult]:
    """One result per node when a transport is required (share of connections that used it), else one info."""
    if required is None:
        total = TransportLog()
        for log in per_node.values():
            total = total.merge(log)
        seen = total.transports()
        return [RULES.judged("transport", sum(total.connections.values()), None, unit="connections",
                             observed=",".join(seen) or "none",
                             message="transports NCCL used: " + (_describe(total.connections) or "none"))]
    results = []
    inter = required in NET_TRANSPORTS
    family = rdma_family(required)
    fell_back = fallen_to_sockets(per_node, family) if family else []
    for node, log in per_node.items():
        relevant = log.net() if inter else log.local()
        excused = (bool(fell_back) and node not in fell_back and chose_network(log, family)
                   and relevant.get("SOCKET", 0) > 0)
        if excused:  # this node's NCCL chose IB; its socket connections are to the nodes that fell back
            relevant = Counter({t: n for t, n in relevant.items() if t != "SOCKET"})
        allowed = {"IB": {"IB", "IB_GDR"}}.get(required, {required})
        used = sum(n for t, n in relevant.items() if t in allowed)
        total = sum(relevant.values())
        if total == 0:
            what = "inter-node" if inter else "intra-node"
            hint = (" (a single-node run has none)" if inter and not multi_node
                    else "; NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including INIT is needed to see them")
            msg = f"no {what} NCCL connection found in the log of node {node}{hint}"
            value = None
        else:
            value = used / total
            msg = f"{required} required between {'nodes' if inter else 'GPUs of a node'}; saw {_describe(relevant)}"
            if "SOCKET" in relevant and required != "SOCKET":
                msg += f"; NCCL fell back to TCP sockets: {FALLBACK_HINTS.get(family or 'IB')}"
            elif required == "IB_GDR" and "IB" in relevant:
                msg += "; GPUDirect RDMA not used: check nvidia-peermem / dma-buf and NCCL_NET_GDR_LEVEL"
        if log.networks and inter:
            msg += f" (NCCL: using network {', '.join(sorted(log.networks))})"
        if excused:
            msg += (f"; its {log.net()['SOCKET']} socket connection(s) not counted: this node's NCCL chose "
                    f"{family}, and {', '.join(fell_back[:5])} fell back to sockets")
        results.append(RULES.judged("transport", value, rules.transport_threshold(required),
                                    observed=",".join(log.transports()) or "none", expected=required,
                                    message=msg, node=node))
    return results


def rdma_family(required: Transport | None) -> str | None:
    """The RDMA network family a required transport belongs to (IB for IB and IB_GDR, OFI), or None."""
    return {"IB": "IB", "IB_GDR": "IB", "OFI": "OFI"}.get(required or "")


def chose_network(log: TransportLog, family: str | None = "IB") -> bool:
    """NCCL on this node said `Using network IB` (or an IB plugin; `... Libfabric` for OFI): its own side of the
    fabric works."""
    names = RDMA_NETWORKS.get(family or "", ())
    return bool(names) and any(n.lower().startswith(names) for n in log.networks)


def fallen_to_sockets(per_node: dict[str, TransportLog], family: str = "IB") -> list[str]:
    """Nodes whose NCCL chose sockets while other nodes' chose the RDMA network (IB, or libfabric for OFI): the
    ones to name for a socket fallback.

    A socket connection between an RDMA node and a fallen node shows in both logs;
    only the node whose own NCCL gave up on the RDMA network is the culprit. When no
    node chose it, nothing tells them apart and every node's own connections decide.
    """
    if not any(chose_network(log, family) for log in per_node.values()):
        return []
    return sorted(n for n, log in per_node.items() if log.networks and not chose_network(log, family))


INTRA_NODE_HINTS: dict[str, str] = {
    "SHM": "GPUs of one node went through host shared memory instead of NVLink peer-to-peer: P2P is disabled "
           "(NCCL_P2P_DISABLE / NCCL_P2P_LEVEL in the pod's env) or broken (check `nvidia-smi topo -m`, "
           "`nvidia-smi nvlink -s` and the fabric manager)",
    "NET": "GPUs of one node went through the network stack instead of NVLink: NCCL does not see them as "
           "one host (NCCL_HOSTID, separate containers without a shared IPC namespace) or P2P and SHM are off",
}


def judge_intra_node(required: Transport | None, per_node: dict[str, TransportLog], single_node: bool,
                     gpus_per_node: int) -> list[CheckResult]:
    """One result per node: the share of connections between its own GPUs that used the required transport.

    In a single-node run every connection is between GPUs of that node, so a
    network connection counts too; with several nodes, only P2P and SHM are
    known to stay inside a node.
    """
    if required is None or gpus_per_node < 2:
        return []
    results = []
    for node, log in per_node.items():
        inside = log.local() + (log.net() if single_node else Counter())
        total = sum(inside.values())
        used = inside.get(required, 0)
        value = used / total if total else None
        if value is None:
            msg = (f"no connection between the GPUs of node {node} found in NCCL's log; NCCL_DEBUG=INFO with "
                   "NCCL_DEBUG_SUBSYS including INIT is needed to see them")
        else:
            msg = f"{required} required between the GPUs of node {node}; saw {_describe(inside)}"
            wrong = [t for t in inside if t != required]
            if wrong:
                kind = "NET" if any(t in NET_TRANSPORTS for t in wrong) else wrong[0]
                msg += f": {INTRA_NODE_HINTS.get(kind, '')}"
        results.append(RULES.judged("intra_node_transport", value, rules.transport_threshold(required),
                                    observed=",".join(t for t in log.transports() if t in inside) or "none",
                                    expected=required, message=msg, node=node))
    return results
