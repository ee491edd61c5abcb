"""What each check measures, with which parameters, and the thresholds it is judged by.

These models are part of the AcceptanceTest API (spec.checks) and are also the
configuration the workload receives. A threshold left unset in a spec comes from
the profile (profiles.py); one set in the spec wins, field by field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from acceptance_workload.contract.wire import WireModel, byte_size, parse_bytes, text

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"]
COLLECTIVES: tuple[Collective, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv",
)
# How NCCL moved data, as its INFO log says: NVLink/PCIe peer-to-peer, shared
# memory, InfiniBand/RoCE verbs with or without GPUDirect RDMA, libfabric through the aws-ofi-nccl plugin (OFI:
# AWS EFA), or TCP sockets.
Transport = Literal["P2P", "SHM", "IB", "IB_GDR", "OFI", "SOCKET"]
DType = Literal["float32", "bfloat16", "float16"]
MigMode = Literal["disabled", "enabled"]
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
DdpModel = Literal["gpt", "resnet50"]
DEFAULT_BATCH: dict[str, int] = {"gpt": 32, "resnet50": 128}

# Bounds of every parameter: far beyond any real run, near enough that no spec asks for days of work or an
# allocation no GPU has. Admission refuses what crosses them (the CRD carries them).
MAX_MESSAGE = 2**35  # 32 GiB: one message of the sweep
MAX_SHM = 2**42  # 4 TiB
MAX_BUSBW_GBPS = 100_000.0
MAX_TFLOPS = 1_000_000.0
MAX_LATENCY_US = 10_000_000.0  # 10 s for one small all_reduce: far beyond any fabric
MAX_GPU_COPY = 2**36  # 64 GiB: one buffer of the per-GPU copies
VersionText = text(64)


class PreflightThresholds(WireModel):
    """Per-node health limits; every one applies to every GPU of every node."""

    gpu_model: text(128) | None = Field(None, description="Text the NVML GPU name must contain, e.g. H100.")
    min_driver_version: VersionText | None = Field(None, description="Lowest NVIDIA driver version, e.g. 535.104.")
    min_cuda_version: VersionText | None = Field(None, description="Lowest CUDA runtime version torch was built for.")
    min_nccl_version: VersionText | None = Field(None, description="Lowest NCCL version, e.g. 2.18.")
    max_gpu_temperature_c: float | None = Field(None, ge=0, le=200, description="Hottest a GPU may be at start, in C.")
    max_uncorrected_ecc_errors: int | None = Field(None, ge=0, le=2**31, description="Volatile uncorrected ECC errors.")
    max_pending_row_remaps: int | None = Field(None, ge=0, le=2**31, description="Row remaps waiting for a GPU reset.")
    min_pcie_generation: int | None = Field(None, ge=1, le=16, description="Current PCIe link generation.")
    min_pcie_width: int | None = Field(None, ge=1, le=64, description="Current PCIe link width (lanes).")
    min_nvlink_active_links: int | None = Field(None, ge=0, le=64, description="Active NVLink links per GPU.")
    min_ib_rate_gbps: float | None = Field(None, ge=0, le=100_000, description="Rate of each InfiniBand port, Gb/s.")
    min_shm_bytes: byte_size(MAX_SHM) | None = Field(None, description="Size of /dev/shm.")
    require_unlimited_memlock: bool | None = Field(
        None, description="RLIMIT_MEMLOCK of the workload process must be unlimited (RDMA needs it)."
    )
    fail_on_throttle: bool | None = Field(
        None, description="Fail when a GPU reports hardware, thermal or power-brake slowdown."
    )
    max_gpu_memory_in_use_mib: int | None = Field(
        None, ge=0, le=2**24, alias="maxGpuMemoryInUseMiB",
        description="GPU memory (MiB) already in use on each GPU before the workload touches it, i.e. held by "
        "other processes (gpu_in_use). Above it the GPU is busy: its numbers would be another job's too.",
    )
    # CPU/GPU binding and MIG (binding.py, mig.py)
    require_numa_local_cpus: bool | None = Field(
        None, alias="requireNumaLocalCpus",
        description="Each rank's CPU affinity must lie within its GPU's NUMA-local CPUs (NVML); on CPU runs within "
        "its even share of the pod's CPUs (cpu_affinity). A rank on a remote NUMA node fails, naming it.",
    )
    mig_mode: MigMode | None = Field(
        None, description="MIG mode every GPU must be in (mig_mode): disabled or enabled. A GPU without MIG "
        "support counts as disabled; one whose mode cannot be read fails.",
    )


class PreflightCheck(WireModel):
    enabled: bool = True
    thresholds: PreflightThresholds = Field(default_factory=PreflightThresholds)


class GpuThresholds(WireModel):
    """Per-GPU floors, each also judged against the median GPU of the same node.

    The absolute floors find a GPU (or a node) below what its model does; the
    ratio finds the one GPU slower than its neighbours even when the floor is
    loose, and names it.
    """

    min_gemm_tflops: float | None = Field(
        None, ge=0, le=MAX_TFLOPS, alias="minGemmTflops", description="bf16 dense matmul TFLOP/s of each GPU."
    )
    min_hbm_gbps: float | None = Field(
        None, ge=0, le=MAX_BUSBW_GBPS, alias="minHbmGBps",
        description="Device-to-device copy bandwidth of each GPU, GB/s counting bytes read plus bytes written.",
    )
    min_h2d_gbps: float | None = Field(
        None, ge=0, le=MAX_BUSBW_GBPS, alias="minH2dGBps",
        description="Host-to-device copy bandwidth from pinned memory, GB/s."
    )
    min_d2h_gbps: float | None = Field(
        None, ge=0, le=MAX_BUSBW_GBPS, alias="minD2hGBps",
        description="Device-to-host copy bandwidth into pinned memory, GB/s."
    )
    min_ratio_to_node_median: float | None = Field(
        None, ge=0, le=1, alias="minRatioToNodeMedian",
        description="Each GPU's GEMM and HBM value over the median of its node's GPUs; below it names the GPU.",
    )
    min_host_copy_ratio_to_node_median: float | None = Field(
        None, ge=0, le=1, alias="minHostCopyRatioToNodeMedian",
        description="Each GPU's host-to-device and device-to-host bandwidth over the median of its node's GPUs; "
        "below it names the GPU. Looser than minRatioToNodeMedian: host copies of healthy GPUs spread more.",
    )


class GpuCheck(WireModel):
    """Each GPU alone: bf16 GEMM, HBM copy, host-to-device and device-to-host copies.

    Each value is the median of `windows` timed windows of `iters` operations,
    so one hiccup does not decide; GEMM and HBM run on all GPUs at once, host
    copies one GPU of each host at a time (GPUs can share a PCIe switch's uplink).
    """

    enabled: bool = True
    gemm_size: int = Field(8192, ge=64, le=65536, description="M = N = K of the bf16 matmul.")
    hbm_bytes: byte_size(MAX_GPU_COPY) = Field("1Gi", description="Buffer copied device to device (at least 1Mi).")
    host_bytes: byte_size(MAX_GPU_COPY) = Field(
        "256Mi", description="Pinned host buffer copied to and from each GPU (at least 1Mi).")
    windows: int = Field(7, ge=3, le=101, description="Timed windows; each measurement is their median.")
    iters: int = Field(20, ge=1, le=10_000, description="Operations per timed window.")
    warmup_iters: int = Field(10, ge=0, le=10_000, description="Untimed operations before the windows.")
    gemm_warmup_seconds: float = Field(
        2.0, ge=0, le=60,
        description="GEMM runs untimed at least this long first: a GPU holds its first-burst boost clock for "
        "~0.1 s and settles under its power limit after ~1 s, and the windows must all see the settled clock.",
    )
    thresholds: GpuThresholds = Field(default_factory=GpuThresholds)

    @model_validator(mode="after")
    def _sizes_large_enough(self) -> GpuCheck:
        for name, alias in (("hbm_bytes", "hbmBytes"), ("host_bytes", "hostBytes")):
            if parse_bytes(getattr(self, name)) < MIN_GPU_COPY_BYTES:
                raise ValueError(f"{alias} must be at least 1Mi (a smaller copy measures latency, not bandwidth)")
        return self


MIN_GPU_COPY_BYTES = 1 << 20


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
    enabled: bool = True
    collectives: list[Collective] = Field(default_factory=lambda: list(COLLECTIVES), min_length=1,
                                          max_length=len(COLLECTIVES))
    min_bytes: byte_size(MAX_MESSAGE) = Field(8, description="First message size of the sweep.")
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


class DdpThresholds(WireModel):
    min_throughput_per_gpu: float | None = Field(
        None, ge=0, le=1e9, description="tokens/s per GPU for gpt, images/s per GPU for resnet50."
    )
    min_scaling_efficiency: float | None = Field(
        None, ge=0, le=1, description="DDP throughput / (world size x mean one-GPU throughput)."
    )
    max_straggler_ratio: float | None = Field(
        None, ge=1, le=100, description="Median rank throughput over the slowest rank's; above it names the straggler."
    )


class DdpCheck(WireModel):
    enabled: bool = True
    model: DdpModel = "gpt"
    batch_size: int | None = Field(
        None, ge=1, le=4096, description="Per-GPU batch; default 32 (gpt) or 128 (resnet50): large enough that a "
        "step keeps the GPU busy rather than waiting for the host to launch kernels.")
    seq_len: int = Field(1024, ge=16, le=131_072, description="Sequence length of the gpt model.")
    steps: int = Field(30, ge=2, le=100_000, description="Timed steps, each for the one-GPU baseline and for DDP.")
    windows: int = Field(
        5, ge=1, le=1000, description="The timed steps are split into this many windows, alternating one-GPU and "
        "DDP windows, so drift lands on both; throughput and efficiency are medians over windows.")
    warmup_steps: int = Field(5, ge=0, le=10_000)
    thresholds: DdpThresholds = Field(default_factory=DdpThresholds)

    def effective_batch_size(self) -> int:
        return self.batch_size or DEFAULT_BATCH[self.model]

    def steps_per_window(self) -> int:
        """Timed steps in each window (at least one; a step count below the windows gives fewer windows)."""
        return max(1, self.steps // self.windows)

    def window_count(self) -> int:
        return max(1, min(self.windows, self.steps))


FsdpModel = Literal["gpt"]
MAX_STORAGE_BYTES = 2**40  # 1 TiB: one node's throughput file


class FsdpThresholds(WireModel):
    """FSDP2 training: throughput, scaling, a straggler, and that sharding shrank the memory (fsdp.py)."""

    min_throughput_per_gpu: float | None = Field(None, ge=0, le=1e9, description="FSDP tokens/s per GPU.")
    min_scaling_efficiency: float | None = Field(
        None, ge=0, le=1, description="FSDP tokens/s per GPU over the baseline's: one node's FSDP alone in a "
        "multi-node run (hybrid sharding against full sharding inside the node), each GPU alone with the whole "
        "model in a one-node run.")
    max_straggler_ratio: float | None = Field(
        None, ge=1, le=100, description="Median GPU's one-GPU throughput over the slowest's; above it names the GPU.")
    max_memory_ratio: float | None = Field(
        None, ge=0.1, le=100, description="Each GPU's peak memory under FSDP over the sharding prediction "
        "(model state / GPUs sharding it + activations, both taken from the unsharded run on the same GPU); "
        "above it names the GPU: its state was not sharded as the mesh says.")


class FsdpCheck(WireModel):
    """torch FSDP2 (fully_shard) training of a GPT larger than DDP's: full sharding in a node, hybrid across nodes."""

    enabled: bool = Field(False, description="Off unless asked for: the model is larger than DDP's and takes "
                                             "about 40 s more on 8 GPUs.")
    model: FsdpModel = "gpt"
    layers: int = Field(24, ge=1, le=512, description="Transformer blocks of the gpt model.")
    d_model: int = Field(1024, ge=32, le=32_768, description="Width of the gpt model (heads of 64).")
    batch_size: int = Field(8, ge=1, le=4096, description="Per-GPU batch.")
    seq_len: int = Field(1024, ge=16, le=131_072, description="Sequence length.")
    steps: int = Field(20, ge=2, le=100_000, description="Timed steps of each phase.")
    windows: int = Field(4, ge=1, le=1000, description="Timed windows the steps are split into (medians).")
    warmup_steps: int = Field(3, ge=0, le=10_000)
    thresholds: FsdpThresholds = Field(default_factory=FsdpThresholds)

    def steps_per_window(self) -> int:
        return max(1, self.steps // self.windows)

    def window_count(self) -> int:
        return max(1, min(self.windows, self.steps))


class StorageThresholds(WireModel):
    """Floors of the shared volume; none by default (a filesystem's speed is the cluster's choice): reported."""

    min_write_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="minWriteGBps",
                                         description="Sequential write of each node, GB/s.")
    min_read_gbps: float | None = Field(None, ge=0, le=MAX_BUSBW_GBPS, alias="minReadGBps",
                                        description="Sequential read of each node, GB/s.")
    min_checkpoint_save_gbps: float | None = Field(
        None, ge=0, le=MAX_BUSBW_GBPS, alias="minCheckpointSaveGBps",
        description="Distributed checkpoint save, GB/s of checkpoint over the whole job.")
    min_checkpoint_load_gbps: float | None = Field(
        None, ge=0, le=MAX_BUSBW_GBPS, alias="minCheckpointLoadGBps",
        description="Distributed checkpoint load, GB/s of checkpoint over the whole job.")
    max_checkpoint_seconds: float | None = Field(
        None, ge=0, le=86_400, description="Longest the save or the load of the checkpoint may take, seconds.")


class StorageCheck(WireModel):
    """The shared volume (spec.storage): cross-node consistency, throughput per node, a distributed checkpoint."""

    enabled: bool = Field(False, description="Needs spec.storage (the volume); gpu-acceptance local: --storage DIR.")
    consistency_bytes: byte_size(MAX_STORAGE_BYTES) = Field(
        "16Mi", description="Random bytes each node writes under its name for the others to read and compare.")
    throughput_bytes: byte_size(MAX_STORAGE_BYTES) = Field(
        "4Gi", description="File each node writes, then reads, sequentially (at least 16Mi).")
    block_bytes: byte_size(1 << 30) = Field("16Mi", description="Size of each write and read (at least 1Mi).")
    direct_io: bool = Field(True, description="O_DIRECT where the filesystem allows it (else buffered, with "
                                              "fsync and the page cache dropped, as the result says).")
    checkpoint: bool = Field(True, description="Save the FSDP model (checks.fsdp's shape) with "
                                               "torch.distributed.checkpoint and load it into a fresh one.")
    thresholds: StorageThresholds = Field(default_factory=StorageThresholds)

    @model_validator(mode="after")
    def _sizes(self) -> StorageCheck:
        if parse_bytes(self.block_bytes) < 1 << 20:
            raise ValueError("blockBytes must be at least 1Mi")
        if parse_bytes(self.throughput_bytes) < 16 << 20:
            raise ValueError("throughputBytes must be at least 16Mi (less measures latency, not throughput)")
        if parse_bytes(self.consistency_bytes) < 1:
            raise ValueError("consistencyBytes must be at least 1")
        return self


class SoakThresholds(WireModel):
    """The burn-in's limits (soakjudge.py), each judged minute by minute on every GPU; docs/thresholds.md."""

    min_ratio_to_first_minutes: float | None = Field(
        None, ge=0, le=1, description="Each GPU's GEMM TFLOP/s in every minute over its own settled first minutes' "
        "median; below it names the GPU, the minute it started and its temperature then.")
    min_ratio_to_node_median: float | None = Field(
        None, ge=0, le=1, description="Each GPU's GEMM TFLOP/s in every minute over its node's median GPU that "
        "minute; below it names the GPU and the minute.")
    fail_on_throttle: bool | None = Field(
        None, description="Fail a GPU that reports hardware slowdown, hardware or software thermal slowdown or "
        "power brake (a software power cap at the power limit is normal under GEMM and never fails).")
    max_gpu_temperature_c: float | None = Field(None, ge=0, le=200, description="Hottest a GPU may get, C.")
    max_memory_temperature_c: float | None = Field(None, ge=0, le=200, description="Hottest its HBM may get, C.")
    max_nvlink_errors_per_minute: float | None = Field(
        None, ge=0, le=1e9, description="Growth of any one NVLink error counter (CRC flit, CRC data, replay, "
        "recovery) of one link in one minute.")
    max_pcie_replays_per_minute: float | None = Field(
        None, ge=0, le=1e9, description="Growth of a GPU's PCIe replay counter in one minute.")


class SoakCheck(WireModel):
    """Burn-in: every GPU at full GEMM load while the ranks keep all_reduce traffic, watched through NVML."""

    enabled: bool = Field(False, description="Off unless asked for: it runs for durationSeconds after the other "
                                             "checks.")
    duration_seconds: int = Field(3600, ge=10, le=7 * 86_400, description="How long the load runs, seconds.")
    sample_seconds: float = Field(1.0, ge=0.1, le=60, description="NVML sampling period of each GPU, seconds.")
    thresholds: SoakThresholds = Field(default_factory=SoakThresholds)


HEARTBEAT_TIMEOUT_SECONDS = 60  # default: a healthy rank beats every second, so 60 silent seconds is a frozen process


class ChecksSpec(WireModel):
    heartbeat_timeout_seconds: int = Field(
        HEARTBEAT_TIMEOUT_SECONDS, ge=10, le=3600,
        description="A rank whose heartbeat (beaten every second from a thread of its own) is silent this long is "
        "frozen or dead: the run ends naming its node, GPU, rank and step, in any stage and whatever "
        "nccl.collectiveTimeoutSeconds says (that one bounds a collective hung with every rank alive).",
    )
    preflight: PreflightCheck = Field(default_factory=PreflightCheck)
    gpu: GpuCheck = Field(default_factory=GpuCheck)
    nccl: NcclCheck = Field(default_factory=NcclCheck)
    ddp: DdpCheck = Field(default_factory=DdpCheck)
    fsdp: FsdpCheck = Field(default_factory=FsdpCheck)
    storage: StorageCheck = Field(default_factory=StorageCheck)
    soak: SoakCheck = Field(default_factory=SoakCheck)
