"""The report the workload delivers (its evidence ConfigMaps; the operator copies the status part into
status.report), and what it means.

What a report means lives here and nowhere else: the verdict, the counts
(`Report.tally`), the missing checks, the headline numbers (`Report.headline`)
and the nodes to blame. The workload's termination message and tables
(render.py), its progress lines, the local CLI and the operator's
status.summary (verdict.py) all read them from here, so they cannot disagree.

Fail closed: a report with an error, with no results for an enabled check, or
with any failed result, has not passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from acceptance_workload.contract.results import (
    CheckName,
    CheckResult,
)
from acceptance_workload.contract.terms import Collective, Transport
from acceptance_workload.contract.wire import Timestamp, WireModel
from acceptance_workload.report.details import Detail

REPORT_VERSION = "v1"
# Names of the headline results, as the checks write them (job-wide: no node).
ALL_REDUCE_BUSBW = "all_reduce_busbw"
THROUGHPUT_PER_GPU = "throughput_per_gpu"
SCALING_EFFICIENCY = "scaling_efficiency"


# Why a run of one rank has no bus bandwidth and no scaling: a skip's reason, never a 0.0 that looks measured.
ONE_RANK_BUSBW = "one rank: a collective moves no bytes between GPUs, so it has no bus bandwidth"
ONE_RANK_SCALING = "one rank: DDP does not scale across GPUs, so there is no scaling efficiency"


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


class PairRow(WireModel):
    """One group of the localisation stage: a pair of nodes (or a block of the bisection) and its all_reduce."""

    round: int
    kind: Literal["pair", "block"] = "pair"
    nodes: list[str]
    parent: int | None = Field(None, description="Bisection: index of the row whose block this half was split from.")
    busbw_gbps: float | None = Field(None, alias="busbwGBps")
    time_us: float | None = Field(None, alias="timeUs", description="Mean time per all_reduce over the group's ranks.")


class LocalizationDetail(WireModel):
    """The inter-node localisation stage: how it judged, how long it took, and every group it measured."""

    bytes: int = Field(description="all_reduce message size of every group.")
    ratio: float | None = Field(None, description="interNodeRatioToMedian the nodes were judged by.")
    floor_gbps: float | None = Field(None, alias="floorGBps", description="Inter-node busbw floor, where one applies.")
    rounds: int
    seconds: float
    pairs: list[PairRow] = Field(default_factory=list)


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


class FsdpRank(WireModel):
    """One rank's FSDP numbers: throughput alone and sharded, and its memory against the sharding prediction."""

    rank: int
    node: str
    gpu: int
    baseline_throughput: float = Field(description="This GPU alone with the whole model, unsharded.")
    fsdp_throughput: float = Field(description="This rank inside FSDP.")
    node_throughput: float | None = Field(None, description="Multi-node: this rank in its node's FSDP alone.")
    peak_memory_gib: float | None = Field(None, alias="peakMemoryGiB", description="Peak allocated under FSDP.")
    unsharded_peak_memory_gib: float | None = Field(None, alias="unshardedPeakMemoryGiB")
    predicted_memory_gib: float | None = Field(
        None, alias="predictedMemoryGiB", description="Unsharded model state / shards + unsharded activations.")
    checksum: str | None = Field(None, description="Checksum of every parameter after the last step.")


class FsdpDetail(WireModel):
    model: str
    world_size: int
    shards: int = Field(description="GPUs each parameter is sharded over (one node's in a multi-node run).")
    replicas: int = Field(description="Copies of the sharded model (nodes, with hybrid sharding).")
    parameters: int
    batch_size: int
    seq_len: int
    window_efficiency: list[float] = Field(default_factory=list)
    first_loss: float | None = None
    last_loss: float | None = None
    ranks: list[FsdpRank] = Field(default_factory=list)


class StorageNode(WireModel):
    node: str
    sees: list[str] = Field(default_factory=list, description="Nodes whose file this node read back intact.")
    problems: list[str] = Field(default_factory=list, description="What this node could not read or found changed.")
    write_gbps: float | None = Field(None, alias="writeGBps")
    read_gbps: float | None = Field(None, alias="readGBps")
    direct_io: bool | None = Field(None, alias="directIO", description="O_DIRECT was used (else buffered).")
    free_bytes: int | None = Field(None, description="Bytes free to this node's writes on the volume before the check.")
    free_inodes: int | None = Field(None, description="Inodes free before the check (null: the filesystem has none).")
    write_error: str | None = Field(None, description="Why the volume could not be written from this node.")


class StorageDetail(WireModel):
    path: str
    needed_bytes: int | None = Field(None, description="What the check writes at most: storage_capacity's need.")
    needed_inodes: int | None = None
    nodes: list[StorageNode] = Field(default_factory=list)
    checkpoint_bytes: int | None = None
    checkpoint_save_seconds: float | None = None
    checkpoint_load_seconds: float | None = None


class SoakEvent(WireModel):
    """Something that happened to a GPU during the burn-in, with its time: an XID, a throttle, an error count."""

    t: float = Field(description="Seconds since the load started.")
    kind: str = Field(description="xid, throttle, ecc_uncorrected, pending_row_remap, nvlink, pcie_replay, slowdown.")
    text: str


class SoakSeries(WireModel):
    """One GPU's series, downsampled to at most soakjudge.MAX_POINTS points (means of each bin; temperatures and
    power their bins' maxima); null where NVML could not read it (or on a CPU smoke run)."""

    t: list[float] = Field(default_factory=list, description="Each point's end, seconds since the load started.")
    sm_clock_mhz: list[float | None] = Field(default_factory=list, alias="smClockMHz")
    mem_clock_mhz: list[float | None] = Field(default_factory=list, alias="memClockMHz")
    power_w: list[float | None] = Field(default_factory=list, alias="powerW")
    gpu_temp_c: list[float | None] = Field(default_factory=list, alias="gpuTempC")
    mem_temp_c: list[float | None] = Field(default_factory=list, alias="memTempC")
    tflops_t: list[float] = Field(default_factory=list, description="End of each TFLOP/s window, seconds.")
    tflops: list[float | None] = Field(default_factory=list, description="GEMM TFLOP/s of the load per window.")


class SoakGpu(WireModel):
    """One GPU's burn-in: its TFLOP/s minute by minute, its series, its events, what NVML could not read."""

    rank: int
    node: str
    gpu: int
    series: SoakSeries = Field(default_factory=SoakSeries)
    events: list[SoakEvent] = Field(default_factory=list)
    events_omitted: int = 0
    unsupported: dict[str, str] = Field(default_factory=dict, description="NVML reading -> why it could not be read.")


class SoakDetail(WireModel):
    duration_seconds: float
    sample_seconds: float
    gemm_size: int
    all_reduce_bytes: int
    all_reduces: int = Field(0, description="all_reduce operations each rank ran beside its GEMMs.")
    nvml: bool = Field(description="False on a CPU smoke run: nothing was watched.")
    note: str | None = Field(None, description="Why the series are missing, where the evidence had to drop them.")
    gpus: list[SoakGpu] = Field(default_factory=list)


class GpuRow(WireModel):
    """One GPU's measurements (each the median of the check's windows); null where not measured."""

    rank: int
    node: str
    gpu: int
    gemm_tflops: float | None = Field(None, description="bf16 (float32 on a CPU smoke run) matmul TFLOP/s.")
    hbm_gbps: float | None = Field(None, alias="hbmGBps", description="Device copy, GB/s read plus written.")
    h2d_gbps: float | None = Field(None, alias="h2dGBps", description="Host-to-device copy from pinned memory.")
    d2h_gbps: float | None = Field(None, alias="d2hGBps", description="Device-to-host copy into pinned memory.")
    spread: float | None = Field(
        None, description="Largest (max - min) / median over the windows of any one measurement: the noise seen."
    )
    error: str | None = Field(None, description="Why a measurement could not be taken on this GPU.")
    again: dict[str, float | None] | None = Field(
        None, description="Values measured a second time, by field (gemm_tflops, hbm_gbps, h2d_gbps, d2h_gbps), "
        "when some GPU of the job fell below the ratio to its node's median: every GPU measures that again, "
        "and a GPU is named only when slow both times.")


class GpuDetail(WireModel):
    """How the per-GPU check measured, and every GPU's numbers."""

    gemm_size: int
    hbm_bytes: int
    host_bytes: int
    windows: int
    iters: int
    rows: list[GpuRow] = Field(default_factory=list)


class StageError(WireModel):
    """An exception a rank raised inside a check's stage (stages.py): its failed `stage_error` result names it;
    this keeps the traceback, the evidence."""

    check: CheckName
    rank: int
    node: str
    gpu: int
    step: str = Field("", description="The step the rank had entered last.")
    error: str = Field(description="The error's type and the first line of its message.")
    traceback: str = ""


class Environment(WireModel):
    gpu_model: str | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    world_size: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    nccl_version: str | None = None
    torch_version: str | None = None
    workload_version: str | None = Field(None, description="gpu-acceptance version of the workload image that "
                                         "wrote the report (absent in reports of images before it was recorded).")
    hostnames: list[str] = Field(default_factory=list)
    transports: list[Transport] = Field(default_factory=list, description="Transports NCCL reported using.")


class GpuIdentity(WireModel):
    """One GPU as a technician finds it in the rack and in nvidia-smi; None where NVML does not say."""

    gpu: int = Field(description="The GPU index results use on its node (the rank's local GPU).")
    uuid: str | None = None
    serial: str | None = Field(None, description="The board serial number (printed on the GPU).")
    bus_id: str | None = Field(None, description="PCI bus id, e.g. 00000000:1B:00.0.")
    vbios: str | None = Field(None, alias="vbiosVersion")
    inforom: str | None = Field(None, alias="inforomVersion", description="InfoROM image version.")

    def label(self) -> str:
        """'serial 1652922012345, bus 00000000:1B:00.0' ('unknown' where NVML did not say)."""
        return f"serial {self.serial or 'unknown'}, bus {self.bus_id or 'unknown'}"


class Nic(WireModel):
    """A network adapter of a node: an RDMA device (sysfs fw_ver) or a network interface's PCI device."""

    name: str
    firmware: str | None = None
    board_id: str | None = None
    pci: str | None = Field(None, description="PCI address of the adapter.")
    driver: str | None = None


class HostProcess(WireModel):
    """A process outside the run that kept the host's CPUs busy."""

    pid: int
    command: str = Field(description="Its command name (comm).")
    cpus: float = Field(description="CPUs' worth of time it used over the window (1.0: one CPU all the time).")


class HostLoad(WireModel):
    """How busy the CPUs this run may use were over a window, and how much of that was outside the run."""

    stage: str = Field(description="When: preflight (a short window of its own), or the check it spans.")
    seconds: float
    cpus: float = Field(description="CPUs the run may use (the container's cpuset, capped by its CPU quota).")
    host_cpus: int | None = None
    load1: float | None = Field(None, description="1-minute load average of the host.")
    busy: float = Field(description="Share of those CPUs' time that was not idle.")
    steal: float = Field(0.0, description="Share taken by the hypervisor (steal).")
    outside: float = Field(description="Share used outside the run: busy time less the run's own processes'.")
    outside_processes: int = Field(0, description="Processes outside the run using >= 10% of a CPU (visible ones).")
    busiest: list[HostProcess] = Field(default_factory=list)
    saturated: bool = False


class NodeFacts(WireModel):
    """One node as a technician finds it: versions, adapters' firmware, each GPU's identity, the host's load."""

    node: str
    driver_version: str | None = None
    cuda_version: str | None = None
    cuda_driver_version: str | None = None
    nccl_version: str | None = None
    nics: list[Nic] = Field(default_factory=list)
    gpus: list[GpuIdentity] = Field(default_factory=list)
    host_load: list[HostLoad] = Field(default_factory=list)


@dataclass(frozen=True)
class Tally:
    """How many checks passed and failed; an enabled check with no result counts as one failed check."""

    passed: int
    failed: int
    missing: tuple[CheckName, ...]

    @property
    def total(self) -> int:
        return self.passed + self.failed


@dataclass(frozen=True)
class Headline:
    """The numbers a person looks at first; None where the run did not produce one."""

    all_reduce_busbw_gbps: float | None = None
    ddp_throughput_per_gpu: float | None = None
    ddp_throughput_unit: str | None = None
    scaling_efficiency: float | None = None

    def parts(self) -> list[str]:
        """'all_reduce busbw 371.2 GB/s', 'ddp 41,000 tokens/s per GPU', 'scaling efficiency 0.95'."""
        out = []
        if self.all_reduce_busbw_gbps is not None:
            out.append(f"all_reduce busbw {self.all_reduce_busbw_gbps:.1f} GB/s")
        if self.ddp_throughput_per_gpu is not None:
            out.append(f"ddp {self.ddp_throughput_per_gpu:,.1f} {self.ddp_throughput_unit or ''} per GPU"
                       .replace("  ", " "))
        if self.scaling_efficiency is not None:
            out.append(f"scaling efficiency {self.scaling_efficiency:.3f}")
        return out


class ReportBase(WireModel):
    """What every report holds, whichever checks ran. Each check's detail fields (report.gpu, report.nccl, ...)
    come from the registry: checks/report_model.py assembles the Report, this model with every check's details
    (checks.contract.Check.details) in run order, which is what runs and readers build and parse; `DETAILS` lists
    them for the evidence (evidence.py), which splits and joins each as its Detail says."""

    DETAILS: ClassVar[tuple[Detail, ...]] = ()
    version: str = REPORT_VERSION
    mode: Literal["gpu", "cpu-smoke"] = "gpu"
    generation: int | None = Field(None, description="metadata.generation of the AcceptanceTest this ran for.")
    uid: str | None = Field(None, description="metadata.uid of the AcceptanceTest this ran for.")
    run: str | None = Field(None, description="status.run.id of the run this is for (absent: the generation's first).")
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    passed: bool = False
    error: str | None = Field(None, description="Why the run could not complete; a report with one fails.")
    checks_run: list[CheckName] = Field(default_factory=list, description="Checks that were enabled.")
    results: list[CheckResult] = Field(default_factory=list)
    skipped: list[Skip] = Field(default_factory=list)
    failed_nodes: list[str] = Field(default_factory=list)
    environment: Environment = Field(default_factory=Environment)
    nodes: list[NodeFacts] = Field(default_factory=list, description="Each node's identity facts and host load.")
    stage_errors: list[StageError] = Field(default_factory=list, description="Exceptions raised in checks' stages.")

    def gpu_identity(self, node: str | None, gpu: int | None) -> GpuIdentity | None:
        """The identity of GPU `gpu` on `node`, where the preflight read it."""
        facts = next((n for n in self.nodes if n.node == node), None)
        return None if facts is None or gpu is None else next((g for g in facts.gpus if g.gpu == gpu), None)

    def missing_checks(self) -> list[CheckName]:
        """Enabled checks that produced no result at all."""
        measured = {r.check for r in self.results}
        return [c for c in self.checks_run if c not in measured]

    def tally(self) -> Tally:
        """Results passed / failed, with each missing check as one more failure."""
        missing = tuple(self.missing_checks())
        passed = sum(1 for r in self.results if r.passed)
        return Tally(passed=passed, failed=len(self.results) - passed + len(missing), missing=missing)

    def _job_wide(self, check: CheckName, name: str) -> CheckResult | None:
        return next((r for r in self.results
                     if r.check == check and r.name == name and r.node is None and r.value is not None), None)

    def headline(self) -> Headline:
        """all_reduce busbw (the judged job-wide result, else the best row of the job-wide sweep of 2+ ranks: one
        rank moves no bytes), DDP numbers."""
        sweeps: list[NcclSweep] = getattr(self, "nccl", [])  # nccl's and ddp's details (the registry's checks)
        ddp: DdpDetail | None = getattr(self, "ddp", None)
        busbw_result = self._job_wide("nccl", ALL_REDUCE_BUSBW)
        busbw = busbw_result.value if busbw_result is not None else max(
            (row.busbw_gbps for s in sweeps if s.collective == "all_reduce" and s.scope == "job" and s.ranks > 1
             for row in s.rows), default=None)
        throughput = self._job_wide("ddp", THROUGHPUT_PER_GPU)
        efficiency = self._job_wide("ddp", SCALING_EFFICIENCY)
        value = throughput.value if throughput else None
        unit = (throughput.unit or None) if throughput else None
        if value is None and ddp and ddp.ranks:
            value = sum(r.ddp_throughput for r in ddp.ranks) / len(ddp.ranks)
        if unit is None and ddp:
            unit = ddp.unit
        return Headline(all_reduce_busbw_gbps=busbw, ddp_throughput_per_gpu=value,
                        ddp_throughput_unit=unit if value is not None else None,
                        scaling_efficiency=efficiency.value if efficiency else None)

    def verdict(self) -> bool:
        return (
            self.error is None
            and bool(self.checks_run)
            and not self.missing_checks()
            and all(r.passed for r in self.results)
        )

    def blamed_nodes(self) -> list[str]:
        return sorted({r.node for r in self.results if not r.passed and r.node})

    def finalize(self) -> ReportBase:
        """Set passed and failedNodes from the results, so the stored fields cannot disagree with them."""
        self.passed = self.verdict()
        self.failed_nodes = self.blamed_nodes()
        return self

