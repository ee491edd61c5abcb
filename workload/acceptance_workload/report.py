"""The report the workload writes into status.report, and how a verdict follows from it.

Fail closed: a report with an error, with no results for an enabled check, or
with any failed result, has not passed. The operator judges the report with the
same functions the workload uses, so both sides agree on what passed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from acceptance_workload.checks import Collective, Transport
from acceptance_workload.wire import WireModel

CheckName = Literal["preflight", "nccl", "ddp"]
CHECK_NAMES: tuple[CheckName, ...] = ("preflight", "nccl", "ddp")
Comparison = Literal["ge", "le", "eq", "info"]
REPORT_VERSION = "v1"


class CheckResult(WireModel):
    """One measurement judged against one threshold, on one node/GPU or on the whole job."""

    check: CheckName
    name: str = Field(description="What was measured, e.g. gpu_count, all_reduce_busbw, throughput_per_gpu.")
    value: float | None = Field(None, description="The measurement; null when it could not be taken.")
    unit: str = ""
    threshold: float | None = None
    comparison: Comparison = Field("ge", description="ge: value >= threshold; le: <=; eq: ==; info: not judged.")
    observed: str | None = Field(None, description="Textual evidence, e.g. the GPU name NVML reported.")
    expected: str | None = None
    passed: bool
    message: str = ""
    node: str | None = Field(None, description="Node the measurement belongs to; null for the whole job.")
    gpu: int | None = Field(None, description="GPU index on that node, where one GPU is to blame.")


def judge(value: float | None, threshold: float | None, comparison: Comparison) -> bool:
    """Pass/fail of one measurement; a missing measurement never passes."""
    if value is None:
        return False
    if threshold is None or comparison == "info":
        return True
    if comparison == "ge":
        return value >= threshold
    if comparison == "le":
        return value <= threshold
    return value == threshold


class Skip(WireModel):
    """A measurement deliberately not taken (e.g. a collective gloo cannot run); never a pass."""

    check: CheckName
    name: str
    reason: str


class NcclRow(WireModel):
    """One row of an nccl-tests table (out-of-place)."""

    size: int = Field(description="Message size in bytes as nccl-tests counts it.")
    count: int = Field(description="Elements per rank buffer.")
    time_us: float = Field(alias="timeUs", description="Mean time per operation across ranks, microseconds.")
    algbw_gbps: float = Field(alias="algbwGBps")
    busbw_gbps: float = Field(alias="busbwGBps")
    wrong: int = Field(description="Elements that differed from the expected result (any fails).")


class NcclSweep(WireModel):
    collective: Collective
    scope: Literal["job", "node"]
    node: str | None = None
    ranks: int
    dtype: str
    timing: str | None = Field(None, description="How the times were taken (windows, CUDA graphs or eager).")
    rows: list[NcclRow] = Field(default_factory=list)


class DdpRank(WireModel):
    rank: int
    node: str
    gpu: int
    baseline_throughput: float = Field(description="One-GPU throughput of this GPU alone.")
    ddp_throughput: float = Field(description="Throughput of this rank inside DDP.")


class DdpDetail(WireModel):
    model: str
    unit: str
    world_size: int
    batch_size: int
    windows: int | None = Field(None, description="Timed windows of each phase (one-GPU, DDP), alternating.")
    steps_per_window: int | None = None
    window_efficiency: list[float] = Field(
        default_factory=list, description="Scaling efficiency of each window; the result is their median.")
    first_loss: float | None = None
    last_loss: float | None = None
    ranks: list[DdpRank] = Field(default_factory=list)


class Environment(WireModel):
    gpu_model: str | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    world_size: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    nccl_version: str | None = None
    torch_version: str | None = None
    hostnames: list[str] = Field(default_factory=list)
    transports: list[Transport] = Field(default_factory=list, description="Transports NCCL reported using.")


class Report(WireModel):
    version: str = REPORT_VERSION
    mode: Literal["gpu", "cpu-smoke"] = "gpu"
    generation: int | None = Field(None, description="metadata.generation of the AcceptanceTest this ran for.")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    passed: bool = False
    error: str | None = Field(None, description="Why the run could not complete; a report with one fails.")
    checks_run: list[CheckName] = Field(default_factory=list, description="Checks that were enabled.")
    results: list[CheckResult] = Field(default_factory=list)
    skipped: list[Skip] = Field(default_factory=list)
    failed_nodes: list[str] = Field(default_factory=list)
    environment: Environment = Field(default_factory=Environment)
    nccl: list[NcclSweep] = Field(default_factory=list)
    ddp: DdpDetail | None = None

    def missing_checks(self) -> list[CheckName]:
        """Enabled checks that produced no result at all."""
        measured = {r.check for r in self.results}
        return [c for c in self.checks_run if c not in measured]

    def verdict(self) -> bool:
        return (
            self.error is None
            and bool(self.checks_run)
            and not self.missing_checks()
            and all(r.passed for r in self.results)
        )

    def blamed_nodes(self) -> list[str]:
        return sorted({r.node for r in self.results if not r.passed and r.node})

    def finalize(self) -> Report:
        """Set passed and failedNodes from the results, so the stored fields cannot disagree with them."""
        self.passed = self.verdict()
        self.failed_nodes = self.blamed_nodes()
        return self
