"""signals' field of the report (report.signals): per node, what the watch saw of each GPU and each RDMA port (the
signals that moved, the XIDs, what could not be read), each node in its own evidence shard."""

from __future__ import annotations

from pydantic import Field

from acceptance_workload.contract.wire import WireModel
from acceptance_workload.report.details import Detail


class SignalsXid(WireModel):
    code: int
    meaning: str
    fails: bool = Field(description="Of the kind that fails the node (docs/signals.md); else an application's.")
    stage: str = Field(description="The check the run was in when it came.")
    t: float = Field(description="Seconds after the watch started (the preflight's start).")


class SignalsGpu(WireModel):
    gpu: int
    serial: str | None = None
    bus_id: str | None = None
    fabric: str | None = Field(None, description="The NVSwitch fabric state at the run's start (None: not offered).")
    xids: list[SignalsXid] = Field(default_factory=list)
    moved: dict[str, float] = Field(default_factory=dict, description="Each counter that grew, by how much.")
    read: list[str] = Field(default_factory=list, description="The signals read at the start and the end.")
    skipped: list[str] = Field(default_factory=list, description="The signals not offered (why: report.skipped).")


class SignalsPort(WireModel):
    device: str
    port: int
    netdev: str | None = None
    state: str | None = None
    phys_state: str | None = None
    rate: str | None = None
    moved: dict[str, float] = Field(default_factory=dict)
    problem: str | None = Field(None, description="Why the port failed or could not be read.")


class SignalsNode(WireModel):
    node: str
    gpus: list[SignalsGpu] = Field(default_factory=list)
    ports: list[SignalsPort] = Field(default_factory=list)


class SignalsDetail(WireModel):
    seconds: float = Field(0.0, description="How long the watch ran (the preflight's start to the last check's end).")
    nodes: list[SignalsNode] = Field(default_factory=list)


DETAILS = (Detail("signals", SignalsDetail | None, rows="nodes"),)
