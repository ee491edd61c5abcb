"""nccl's spec (spec.checks.nccl): the sweep, the localisation, the cross-check with nccl-tests, and the floors and
ceilings each collective is judged by."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from acceptance_workload.contract.terms import COLLECTIVES, MAX_BUSBW_GBPS, Collective, Transport
from acceptance_workload.contract.wire import WireModel, byte_size, parse_bytes, size_cel

DType = Literal["float32", "bfloat16", "float16"]
CudaGraphs = Literal["auto", "always", "never"]
# When the inter-node localisation stage runs (localize.py): after a job-wide failure (or when no absolute
# inter-node floor judges the job), on every multi-node run, or never.
Localize = Literal["onFailure", "always", "never"]
CUDA_GRAPH_AUTO_BELOW = 64 << 20  # bytes; at and above it an operation outlasts its launch many times over
# The cross-check against NVIDIA nccl-tests (checks.nccl.crossCheck, nccltests.py). Our sweep reads within 3% of
# nccl-tests at every size >= 64 MiB (docs/benchmarks.md: 4x H100, 2x H200, six collectives, medians of 3 runs);
# single runs of either spread a few percent more, so a healthy node passes 10% with margin while a real
# discrepancy (a wrong busbw factor, timing or transport, typically 25% and more) fails.
CROSS_CHECK_TOLERANCE = 0.10
CROSS_CHECK_MIN_BYTES = 64 << 20  # compared from here (or thresholds.referenceBytes): below, latency decides
MAX_MESSAGE = 2**35  # 32 GiB: one message of the sweep
MAX_LATENCY_US = 10_000_000.0  # 10 s for one small all_reduce: far beyond any fabric


class NcclThresholds(WireModel):
    """Lowest acceptable bus bandwidth (GB/s, 1e9 bytes) per collective.

    Judged on the best busbw among message sizes >= referenceBytes, so a threshold
    is never checked against a latency-bound small message.
    """

    reference_bytes: byte_size(MAX_MESSAGE) | None = Field(
        None, description="Smallest message size the thresholds apply to.")
    all_reduce_busbw_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="allReduceBusbwGBps")
    all_gather_busbw_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="allGatherBusbwGBps")
    reduce_scatter_busbw_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="reduceScatterBusbwGBps")
    alltoall_busbw_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="alltoallBusbwGBps")
    broadcast_busbw_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="broadcastBusbwGBps")
    sendrecv_busbw_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="sendrecvBusbwGBps")
    node_all_reduce_busbw_gbps: float | None = Field(
        None, ge=0, le=MAX_BUSBW_GBPS, alias="nodeAllReduceBusbwGBps",
        description="all_reduce busbw inside each node (its GPUs alone); names the slow node."
    )
    inter_node_ratio_to_median: float | None = Field(
        None, ge=0, le=1, alias="interNodeRatioToMedian",
        description="Localisation: each node's inter-node all_reduce busbw (its best pair) over the median of the "
        "other nodes'; below it names the node.",
    )
    cross_check_tolerance: float | None = Field(
        None, ge=0, le=10, description="crossCheck: the largest |ours / nccl-tests' - 1| of a collective's best "
        "busbw on a node, as a fraction; default 0.10 (10%) for every profile.",
    )
    all_reduce_latency_us: float | None = Field(
        None, gt=0, le=MAX_LATENCY_US, alias="allReduceLatencyUs",
        description="Ceiling of the job-wide all_reduce time per operation (microseconds, out-of-place, as "
        "nccl-tests prints it) at every swept size from 8 B to 64 KiB: NVLink in one node, the network between "
        "nodes (all_reduce_latency).",
    )
    node_all_reduce_latency_us: float | None = Field(
        None, gt=0, le=MAX_LATENCY_US, alias="nodeAllReduceLatencyUs",
        description="The same ceiling for each node's GPUs alone (NVLink); names the slow node "
        "(node_all_reduce_latency).",
    )
    intra_node_transport: Literal["P2P", "SHM"] | None = Field(
        None, description="Transport NCCL must use between GPUs of one node: P2P (NVLink/PCIe peer-to-peer; "
        "the SXM profiles require it) or SHM. SHM or network connections inside a node then fail, naming it."
    )

    def cross_check_limit(self) -> float:
        """The cross-check's tolerance: the spec's, else the one default every profile shares."""
        return CROSS_CHECK_TOLERANCE if self.cross_check_tolerance is None else self.cross_check_tolerance


class NcclCheck(WireModel):
    # minBytes <= maxBytes at admission too (the API server has applied both defaults when it checks).
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": f"!has(self.minBytes) || !has(self.maxBytes) || {size_cel('self.minBytes')} <= "
                f"{size_cel('self.maxBytes')}",
        "message": "minBytes must not exceed maxBytes", "fieldPath": ".minBytes"}]})

    enabled: bool = True
    collectives: list[Collective] = Field(default_factory=lambda: list(COLLECTIVES), min_length=1,
                                          max_length=len(COLLECTIVES))
    min_bytes: byte_size(MAX_MESSAGE, 1) = Field(8, description="First message size of the sweep.")
    max_bytes: byte_size(MAX_MESSAGE) = Field("4Gi", description="Last message size of the sweep.")
    step_factor: int = Field(2, ge=2, le=1024, description="Each size is the previous one times this.")
    warmup_iters: int = Field(5, ge=0, le=1000)
    iters: int = Field(10, ge=1, le=10_000, description="Timed operations per window.")
    windows: int = Field(
        3, ge=1, le=100, description="Timed windows of `iters` operations per size; the row's time is their median, "
        "so one disturbed window does not decide.")
    cuda_graphs: CudaGraphs = Field(
        "auto", description="Launch the timed operations as a captured CUDA graph (nccl-tests' -G): auto for "
        "sizes below 64 MiB, where launching each operation from Python would cost more than it moves.")
    dtype: DType = "float32"
    per_node: bool = Field(True, description="Also sweep each node's GPUs alone, to name a slow node.")
    require_transport: Transport | None = Field(
        None,
        description="Transport NCCL must use between nodes; default: IB_GDR or IB from spec.network "
        "for multi-node tests on infiniband or roce, OFI (libfabric, the aws-ofi-nccl plugin) on efa.",
    )
    localize: Localize = Field(
        "onFailure", description="Inter-node localisation after the job-wide sweep: pairs of nodes, each suspect "
        "paired with a known-good node, many pairs at once. onFailure: when the job-wide sweep failed or no "
        "absolute inter-node floor judges it; always: on every multi-node run; never.",
    )
    cross_check: bool = Field(
        False, description="Also run NVIDIA nccl-tests (all_reduce_perf, ...) on each node over its GPUs, one "
        "process, and fail a collective whose best busbw differs from ours by more than "
        "thresholds.crossCheckTolerance. The binaries come from $GPU_ACCEPTANCE_NCCL_TESTS_DIR (the workload "
        "image: /opt/nccl-tests/bin); a missing one fails.",
    )
    collective_timeout_seconds: int = Field(
        300, ge=10, le=86_400, description="A collective that takes longer means a hung or dead rank: the run ends."
    )
    thresholds: NcclThresholds = Field(default_factory=NcclThresholds)

    @model_validator(mode="after")
    def _sizes_in_order(self) -> NcclCheck:
        if parse_bytes(self.min_bytes) < 1:
            raise ValueError("minBytes must be at least 1")
        if parse_bytes(self.min_bytes) > parse_bytes(self.max_bytes):
            raise ValueError(f"minBytes ({self.min_bytes}) must not exceed maxBytes ({self.max_bytes})")
        return self

    def uses_cuda_graph(self, size_bytes: int) -> bool:
        return self.cuda_graphs == "always" or (self.cuda_graphs == "auto" and size_bytes < CUDA_GRAPH_AUTO_BELOW)

    def timing(self) -> str:
        """How the sweep's times were taken, for the report."""
        graphs = {"auto": f"CUDA graphs below {CUDA_GRAPH_AUTO_BELOW >> 20}Mi, eager launches above",
                  "always": "CUDA graphs", "never": "eager launches"}[self.cuda_graphs]
        return f"median of {self.windows} windows of {self.iters} operations after {self.warmup_iters} warmup; {graphs}"

    def sizes(self) -> list[int]:
        """Message sizes of the sweep in bytes, as nccl-tests' -b/-e/-f walk them."""
        size, last, out = parse_bytes(self.min_bytes), parse_bytes(self.max_bytes), []
        while size <= last:
            out.append(size)
            size *= self.step_factor
        return out

    def cross_check_floor(self) -> int:
        """Smallest size the cross-check compares: thresholds.referenceBytes, else 64 MiB (bandwidth-bound)."""
        ref = self.thresholds.reference_bytes
        return parse_bytes(ref) if ref is not None else CROSS_CHECK_MIN_BYTES

    def cross_check_sizes(self) -> list[int]:
        """The sweep's sizes the cross-check compares (nccl-tests runs exactly these)."""
        return [s for s in self.sizes() if s >= self.cross_check_floor()]
