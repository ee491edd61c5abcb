"""p2p's field of the report (report.p2p): every node's matrix of GPU pairs, each node in its own evidence shard."""

from __future__ import annotations

from pydantic import Field

from acceptance_workload.contract.wire import WireModel
from acceptance_workload.report.details import Detail


class P2pPair(WireModel):
    """One ordered pair of a node's GPUs (src -> dst): what the copies reached, and the path NVML sees between them."""

    src: int = Field(description="The GPU copied from (its index on the node).")
    dst: int = Field(description="The GPU copied to.")
    path: str = Field(description="NVML's view of the path: NVLink, PCIe switch, PCIe switches, host bridge, CPU, "
                      "CPU interconnect; on a CPU smoke run, gloo (two processes).")
    links: int | None = Field(None, description="Active NVLink links between them (through NVSwitch: the GPU's).")
    copy_gbps: float | None = Field(None, alias="copyGBps", description="src -> dst alone, GB/s.")
    bidir_gbps: float | None = Field(None, alias="bidirGBps", description="src <-> dst at once, both summed, GB/s.")
    latency_us: float | None = Field(None, description="A 4-byte copy src -> dst, microseconds.")
    error: str | None = Field(None, description="Why a figure could not be measured (a missing one fails).")


class P2pNode(WireModel):
    node: str
    gpus: int = Field(description="GPUs the node's ranks use.")
    pairs: list[P2pPair] = Field(default_factory=list)


class P2pDetail(WireModel):
    """How the pairs were measured, and every node's matrix."""

    bytes: int
    iters: int
    latency_iters: int
    nodes: list[P2pNode] = Field(default_factory=list)


DETAILS = (Detail("p2p", P2pDetail | None, rows="nodes"),)
