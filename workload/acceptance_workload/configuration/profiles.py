"""Threshold defaults per GPU model; docs/thresholds.md says where each number comes from.

Bandwidth thresholds assume 8 GPUs a node on NVSwitch and, between nodes, one
NIC per GPU at the generation's usual rate (NDR 400G for H100/H200/B200, HDR
200G for A100); they sit about 8-10% under the ring all_reduce busbw such
systems reach with nccl-tests, so a healthy system passes with margin and a
degraded link does not. NVLink SHARP (NVLS) can add ~30% in one node; the
defaults do not count on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from acceptance_workload.checks.ddp.spec import DdpCheck, DdpModel, DdpThresholds
from acceptance_workload.checks.fsdp.spec import FsdpCheck, FsdpThresholds
from acceptance_workload.checks.gpu.spec import GpuCheck, GpuThresholds
from acceptance_workload.checks.nccl.spec import CROSS_CHECK_TOLERANCE, NcclThresholds
from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.checks.soak.spec import SoakThresholds
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.contract.profiles import CPU_SMOKE, PROFILE_GPUS_PER_NODE, ProfileName
from acceptance_workload.contract.wire import WireModel, parse_bytes

CPU_MAX_BYTES = 1 << 20
CPU_RATIO_TO_MEDIAN = 0.5
CPU_INTER_NODE_RATIO = 0.35  # localisation on gloo: healthy nodes measured down to 0.46 of the median, stalled 0.25


@dataclass(frozen=True)
class Profile:
    """Threshold defaults of one GPU model.

    `estimated` lists the defaults that are estimates rather than floors set
    from measured distributions, as "check.wireName" (e.g. "gpu.minGemmTflops");
    a result judged by one of them says so (CheckResult.estimated), and so does
    docs/thresholds.md.
    """

    name: ProfileName
    preflight: PreflightThresholds = field(default_factory=PreflightThresholds)
    gpu: GpuThresholds = field(default_factory=GpuThresholds)
    nccl_single_node: NcclThresholds = field(default_factory=NcclThresholds)
    nccl_multi_node: NcclThresholds = field(default_factory=NcclThresholds)
    ddp: dict[DdpModel, DdpThresholds] = field(default_factory=dict)
    fsdp: FsdpThresholds = field(default_factory=FsdpThresholds)
    soak: SoakThresholds = field(default_factory=SoakThresholds)
    estimated: frozenset[str] = frozenset()
    estimated_by_model: dict[DdpModel, frozenset[str]] = field(default_factory=dict)

    def is_estimated(self, check: str, threshold: str, model: DdpModel | None = None) -> bool:
        """Whether the profile's default for checks.<check>.thresholds.<threshold> (wire name) is an estimate.

        `model`: DDP's floors differ per model, and so does what was measured.
        """
        key = f"{check}.{threshold}"
        return key in self.estimated or (model is not None and key in self.estimated_by_model.get(model, ()))


# Per-GPU floors (checks.gpu). Measured with the check itself, 10 full + 10 quick runs each
# (docs/thresholds.md): 2x H200 sustained bf16 GEMM 633-674 TFLOP/s (a burst reaches 769-798 before
# the power limit settles the clock), HBM copy 4,200-4,260 GB/s counting read + write; 4x H100
# GEMM 648-700 TFLOP/s, HBM 2,984-3,013 GB/s; every GEMM and HBM value within 3.5% of its node's
# median GPU. Host copies: 51-55.5 GB/s on both, one GPU of a node at a time, but 4x H100 showed
# single GPUs down to 0.93 of their node's median (H200: 0.999), so the host-copy ratio has its own,
# looser floor: a link trained at Gen4 or x8 reaches about half. The floors sit ~15% under GEMM and
# HBM and at 40 GB/s for host copies (Azure's H100 gate: 48 GB/s H2D). The host-copy floors stay
# estimates until 8-GPU nodes (two CPU sockets, GPUs behind several PCIe switches) are measured.
GPU_RATIO_TO_NODE_MEDIAN = 0.90
GPU_HOST_COPY_RATIO_TO_NODE_MEDIAN = 0.80
GPU_HOST_ESTIMATED = frozenset(
    f"gpu.{name}" for name in ("minH2dGBps", "minD2hGBps", "minHostCopyRatioToNodeMedian")
)
GPU_ESTIMATED = GPU_HOST_ESTIMATED | {"gpu.minGemmTflops", "gpu.minHbmGBps", "gpu.minRatioToNodeMedian"}
# The busbw floors describe 8 GPUs a node and one NIC per GPU; the GPU machine here had 2 and 4 GPUs of one
# host (2x H200 325-348 GB/s all_reduce at >= 1 GiB, 4x H100 362-364, against the 2-7 GPU floor of 299), so
# every busbw floor stays an estimate until 8-GPU nodes and a real fabric are measured.
LATENCY_KEYS = frozenset({"nccl.allReduceLatencyUs", "nccl.nodeAllReduceLatencyUs"})  # 4 GPUs measured, not 8
NCCL_ESTIMATED = frozenset(
    f"nccl.{name}" for name in ("allReduceBusbwGBps", "allGatherBusbwGBps", "reduceScatterBusbwGBps",
                                "nodeAllReduceBusbwGBps", "interNodeRatioToMedian")
) | LATENCY_KEYS
# DDP efficiency and straggler floors measured on one NVLink node (H100, H200); across nodes the gradients
# cross the network, which this project has not measured, and other GPU models are not measured at all.
DDP_RELATIVE_ESTIMATED = frozenset({"ddp.minScalingEfficiency", "ddp.maxStragglerRatio",
                                    "fsdp.minScalingEfficiency"})
# Localisation: a node whose best pair reaches less than this share of the other nodes' median is named.
# Relative, so it holds for any fabric and GPU count; an estimate until pairs of real nodes are measured
# (a node slowed by a GPU hog, or fallen back to sockets from IB, is several times slower, not 25%).
INTER_NODE_RATIO_TO_MEDIAN = 0.75


# Small-message all_reduce ceilings (microseconds per operation, the worst swept size from 8 B to 64 KiB;
# latency.py, docs/thresholds.md). NVLink: 15.9-34.6 us over 4x H100 (7 runs) and 10.1-13.3 over 2 in this
# project's saved sweeps (bench/latency_from_reports.py); the ceiling leaves room for 8 GPUs (more ring steps)
# and a loaded host. Between nodes over IB/RoCE: an estimate (no real fabric measured here); over ethernet (NCCL's
# sockets) reported, not judged. CPU smoke (gloo on shared cores): loose.
NVLINK_LATENCY_US = 100.0
NETWORK_LATENCY_US: dict[str, float | None] = {"infiniband": 250.0, "roce": 250.0, "ethernet": None, "efa": None}
# AWS EFA (network.fabric efa) between 8-GPU nodes: p5 (H100) and p5e (H200) have 32 EFA devices, 3200 Gb/s = 400 GB/s
# a node, the line rate of 8x NDR 400G; EFA's SRD reaches less than InfiniBand in the public runs (docs/thresholds.md),
# so the all_reduce floor is an estimate well under the IB one: a node with half its EFA devices (~200) fails it, a
# healthy p5 pair is expected above it. Other profiles (p4d's 4 x 100 Gb/s, p6) have no EFA floor: reported, not judged.
EFA_NET_BUSBW: dict[str, float] = {"h100-sxm": 250.0, "h200-sxm": 250.0}
CPU_LATENCY_US = 200_000.0


def latency_for(table: NcclThresholds, nodes: int, gpus_per_node: int, fabric: str) -> NcclThresholds:
    """The latency ceilings of a run: NVLink inside a node (2+ GPUs), the fabric's between nodes."""
    if table.node_all_reduce_latency_us is None:  # a profile without ceilings (custom, cpu-smoke)
        return table
    node = table.node_all_reduce_latency_us if gpus_per_node >= 2 else None
    job = NETWORK_LATENCY_US.get(fabric) if nodes > 1 else node
    return table.model_copy(update={"node_all_reduce_latency_us": node, "all_reduce_latency_us": job})


# FSDP (checks.fsdp, default shape: gpt 24 x 1024, batch 8 x 1024 tokens): docs/thresholds.md. Measured on 4x H100
# (bench/playbook_gpu.sh, 32 runs): peak memory per GPU 0.957 of the sharding prediction in every run; sharded
# against unsharded tokens/s per GPU 0.286-0.462, the lowest in a --quick run of 8 steps (FSDP2's per-block hooks,
# not the GPUs or NVLink, take most of the step: bench/fsdp_optimizer.py); the unsharded baseline's median GPU /
# slowest 1.00-1.23. Across nodes (the hybrid run against the node's FSDP alone) and the throughput floor:
# estimates until a real fabric is measured.
FSDP_MAX_MEMORY_RATIO = 1.25
FSDP_NODE_EFFICIENCY = 0.20
FSDP_EFFICIENCY = 0.80
FSDP_STRAGGLER = 1.5
FSDP_ESTIMATED = frozenset({"fsdp.minThroughputPerGpu"})
# Measured on H100 only: with faster GPUs the same per-block work of FSDP2 is a larger share of the step.
FSDP_RELATIVE_ESTIMATED = frozenset({"fsdp.minScalingEfficiency", "fsdp.maxStragglerRatio"})


def over_sockets(nodes: int, fabric: str) -> bool:
    """DDP's and FSDP's floors between nodes (scaling efficiency, tokens/s per GPU) assume an RDMA fabric: over
    `ethernet` (NCCL's sockets, the simulated nodes of `local`: 4x H100 as 2 nodes, DDP 0.42 and 157-159k tokens/s
    per GPU) they are reported, not judged, unless the spec sets them."""
    return nodes > 1 and fabric == "ethernet"


def fsdp_thresholds(tokens: float | None) -> FsdpThresholds:
    return FsdpThresholds(min_throughput_per_gpu=tokens, min_scaling_efficiency=FSDP_EFFICIENCY,
                          max_straggler_ratio=FSDP_STRAGGLER, max_memory_ratio=FSDP_MAX_MEMORY_RATIO)


# A GPU nobody uses shows a few MiB in use to NVML (docs/thresholds.md); another job's CUDA context alone holds
# ~500 MiB, and anything it allocates comes on top.
GPU_MEMORY_IN_USE_MIB = 1024


# Burn-in (checks.soak, soakjudge.py): all estimates until the soak is measured on H100/H200 nodes
# (docs/thresholds.md). The GEMM ratios sit where the one-shot per-GPU check's do (healthy GPUs within 3.5% of
# their node's median; a minute of sustained load spreads more); the temperatures under NVIDIA's slowdown points
# (GPU ~87-90 C, HBM3 ~95 C); the PCIe replay rate at what DCGM's health watch treats as too many (8 a minute);
# healthy NVLink links count no CRC or replay errors at all, so 10 a minute on one link is already a bad one.
SOAK = SoakThresholds(min_ratio_to_first_minutes=0.90, min_ratio_to_node_median=0.90, fail_on_throttle=True,
                      max_gpu_temperature_c=87, max_memory_temperature_c=92, max_nvlink_errors_per_minute=10,
                      max_pcie_replays_per_minute=8)
SOAK_ESTIMATED = frozenset({"soak.minRatioToFirstMinutes", "soak.minRatioToNodeMedian", "soak.maxGpuTemperatureC",
                            "soak.maxMemoryTemperatureC", "soak.maxNvlinkErrorsPerMinute",
                            "soak.maxPcieReplaysPerMinute"})


def _hopper_like(name: ProfileName, gpu: str, driver: str, node_busbw: float, net_busbw: float,
                 ib_rate: float, pcie_gen: int, nvlinks: int,
                 gpt_tokens: float | None, resnet_images: float | None,
                 per_gpu: GpuThresholds | None = None, fsdp_tokens: float | None = None,
                 estimated: frozenset[str] = GPU_ESTIMATED,
                 estimated_by_model: dict[DdpModel, frozenset[str]] | None = None) -> Profile:
    preflight = PreflightThresholds(
        gpu_model=gpu,
        min_driver_version=driver,
        min_nccl_version="2.18",
        max_gpu_temperature_c=85,
        max_uncorrected_ecc_errors=0,
        max_pending_row_remaps=0,
        min_pcie_generation=pcie_gen,
        min_pcie_width=16,
        min_nvlink_active_links=nvlinks,
        min_ib_rate_gbps=ib_rate,
        min_shm_bytes="1Gi",
        require_unlimited_memlock=True,
        fail_on_throttle=True,
        max_gpu_memory_in_use_mib=GPU_MEMORY_IN_USE_MIB,
        require_numa_local_cpus=True,
        mig_mode="disabled",
    )
    collective_share = 0.9  # all_gather / reduce_scatter reach about what all_reduce does
    single = NcclThresholds(
        reference_bytes="1Gi",
        all_reduce_busbw_gbps=node_busbw,
        all_gather_busbw_gbps=round(node_busbw * collective_share),
        reduce_scatter_busbw_gbps=round(node_busbw * collective_share),
        node_all_reduce_busbw_gbps=node_busbw,
        intra_node_transport="P2P",
        cross_check_tolerance=CROSS_CHECK_TOLERANCE,
        all_reduce_latency_us=NVLINK_LATENCY_US,
        node_all_reduce_latency_us=NVLINK_LATENCY_US,
    )
    multi = NcclThresholds(
        reference_bytes="1Gi",
        all_reduce_busbw_gbps=net_busbw,
        all_gather_busbw_gbps=round(net_busbw * collective_share),
        reduce_scatter_busbw_gbps=round(net_busbw * collective_share),
        node_all_reduce_busbw_gbps=node_busbw,
        inter_node_ratio_to_median=INTER_NODE_RATIO_TO_MEDIAN,
        intra_node_transport="P2P",
        cross_check_tolerance=CROSS_CHECK_TOLERANCE,
        all_reduce_latency_us=NETWORK_LATENCY_US["infiniband"],
        node_all_reduce_latency_us=NVLINK_LATENCY_US,
    )
    ddp = {
        "gpt": DdpThresholds(min_throughput_per_gpu=gpt_tokens, min_scaling_efficiency=0.90,
                             max_straggler_ratio=1.10),
        "resnet50": DdpThresholds(min_throughput_per_gpu=resnet_images, min_scaling_efficiency=0.90,
                                  max_straggler_ratio=1.10),
    }
    per_gpu = per_gpu or _gpu_floors()
    return Profile(name=name, preflight=preflight, gpu=per_gpu, nccl_single_node=single, nccl_multi_node=multi,
                   ddp=ddp, fsdp=fsdp_thresholds(fsdp_tokens), soak=SOAK,
                   estimated=NCCL_ESTIMATED | estimated | FSDP_ESTIMATED | SOAK_ESTIMATED,
                   estimated_by_model=estimated_by_model or {})


def _gpu_floors(gemm: float | None = None, hbm: float | None = None, host: float | None = None) -> GpuThresholds:
    return GpuThresholds(min_gemm_tflops=gemm, min_hbm_gbps=hbm, min_h2d_gbps=host, min_d2h_gbps=host,
                         min_ratio_to_node_median=GPU_RATIO_TO_NODE_MEDIAN,
                         min_host_copy_ratio_to_node_median=GPU_HOST_COPY_RATIO_TO_NODE_MEDIAN)


PROFILES: dict[ProfileName, Profile] = {
    # DDP floors (default shapes: gpt batch 32, resnet50 batch 128) take 85% of the measured DDP
    # throughput per GPU (docs/thresholds.md): 2x H200 404,000-405,000 tokens/s and 2,120 images/s;
    # 4x H100 361,000-365,000 tokens/s (20 runs). H100 resnet50 (not measured) is an estimate at
    # 75% of H200's. b200 and a100 stay unset until measured.
    "h100-sxm": _hopper_like("h100-sxm", "H100", "535.54", node_busbw=340, net_busbw=340, ib_rate=400,
                             pcie_gen=5, nvlinks=18, gpt_tokens=305_000, resnet_images=1_600,
                             per_gpu=_gpu_floors(gemm=560, hbm=2_500, host=40), estimated=GPU_HOST_ESTIMATED,
                             estimated_by_model={"resnet50": frozenset({"ddp.minThroughputPerGpu"})}),
    "h200-sxm": _hopper_like("h200-sxm", "H200", "550.54", node_busbw=340, net_busbw=340, ib_rate=400,
                             pcie_gen=5, nvlinks=18, gpt_tokens=340_000, resnet_images=1_800,
                             per_gpu=_gpu_floors(gemm=560, hbm=3_650, host=40),
                             estimated=GPU_HOST_ESTIMATED | FSDP_RELATIVE_ESTIMATED),
    "b200": _hopper_like("b200", "B200", "570.86", node_busbw=650, net_busbw=340, ib_rate=400,
                         pcie_gen=5, nvlinks=18, gpt_tokens=None, resnet_images=None,
                         estimated=GPU_ESTIMATED | DDP_RELATIVE_ESTIMATED | FSDP_RELATIVE_ESTIMATED),
    "a100-sxm": _hopper_like("a100-sxm", "A100", "470.57", node_busbw=210, net_busbw=170, ib_rate=200,
                             pcie_gen=4, nvlinks=12, gpt_tokens=None, resnet_images=None,
                             estimated=GPU_ESTIMATED | DDP_RELATIVE_ESTIMATED | FSDP_RELATIVE_ESTIMATED),
    "custom": Profile(name="custom"),
    # Relative floors only (CPU cores are shared, so loose ones): each process's matmul and copy rate against the
    # median process's, and localisation's pairs against the others' median.
    CPU_SMOKE: Profile(name=CPU_SMOKE, gpu=GpuThresholds(min_ratio_to_node_median=CPU_RATIO_TO_MEDIAN),
                       preflight=PreflightThresholds(require_numa_local_cpus=True),
                       nccl_single_node=NcclThresholds(inter_node_ratio_to_median=CPU_INTER_NODE_RATIO,
                                                       all_reduce_latency_us=CPU_LATENCY_US,
                                                       node_all_reduce_latency_us=CPU_LATENCY_US),
                       nccl_multi_node=NcclThresholds(inter_node_ratio_to_median=CPU_INTER_NODE_RATIO,
                                                      all_reduce_latency_us=CPU_LATENCY_US,
                                                      node_all_reduce_latency_us=CPU_LATENCY_US)),
}

M = TypeVar("M", bound=WireModel)


def profile_for_gpu(gpu_name: str) -> ProfileName | None:
    """The profile whose GPU this is (NVML/CUDA name), or None: PCIe and NVL parts have other links and limits."""
    name = gpu_name.upper()
    if "PCIE" in name or " NVL" in name:
        return None
    for marker, profile in (("H200", "h200-sxm"), ("H100", "h100-sxm"), ("B200", "b200"), ("A100", "a100-sxm")):
        if marker in name:
            return profile
    return None


def _overlay(defaults: M, overrides: M) -> M:
    """Profile defaults with every field the spec set replacing the default."""
    return defaults.model_copy(update=overrides.model_dump(exclude_none=True))


def _default_ddp_workload(ddp: DdpCheck) -> bool:
    default = DdpCheck(model=ddp.model)
    return ddp.effective_batch_size() == default.effective_batch_size() and (
        ddp.model != "gpt" or ddp.seq_len == default.seq_len
    )


def _less_ddp_work_than_default(ddp: DdpCheck) -> bool:
    """A smaller step than the default's: the GPU waits on kernel launches and efficiency drops and wanders."""
    default = DdpCheck(model=ddp.model)
    return ddp.effective_batch_size() < default.effective_batch_size() or (
        ddp.model == "gpt" and ddp.seq_len < default.seq_len
    )


def _gpu_defaults(profile: GpuThresholds, gpu: GpuCheck) -> GpuThresholds:
    """The profile's per-GPU floors that hold for this check's sizes: a smaller matmul or copy reaches less.

    The ratio to the node's median compares GPUs measured alike, so it holds at any size.
    """
    default = GpuCheck()
    keep = {
        "min_gemm_tflops": gpu.gemm_size >= default.gemm_size,
        "min_hbm_gbps": parse_bytes(gpu.hbm_bytes) >= parse_bytes(default.hbm_bytes),
        "min_h2d_gbps": parse_bytes(gpu.host_bytes) >= parse_bytes(default.host_bytes),
        "min_d2h_gbps": parse_bytes(gpu.host_bytes) >= parse_bytes(default.host_bytes),
    }
    return profile.model_copy(update={name: None for name, ok in keep.items() if not ok})


def estimated_thresholds(checks: ChecksSpec, profile: ProfileName, nodes: int = 1) -> list[str]:
    """The profile's estimated defaults this spec leaves in place (it sets none of them itself).

    Per DDP model (a model measured on one GPU type, the other not), and DDP's relative floors
    across nodes, where no fabric has been measured.
    """
    p = PROFILES[profile]
    keys = p.estimated | p.estimated_by_model.get(checks.ddp.model, frozenset())
    if nodes > 1 and profile != "custom":
        keys |= DDP_RELATIVE_ESTIMATED
    out = []
    for key in sorted(keys):
        check, threshold = key.split(".", 1)
        thresholds = getattr(checks, check).thresholds
        if thresholds.model_dump(by_alias=True).get(threshold) is None:
            out.append(key)
    return out


# A node with fewer GPUs on the same NVSwitch fabric reaches a little less all_reduce busbw
# than eight (2x H200 measured 340-348 GB/s at >= 1 GiB, 4x 351-363, 8x ~370): its floor is
# this share of the 8-GPU one, still far above what a node without working NVLink reaches
# (SHM: 25 GB/s) and below a node that lost a third of its links.
FEWER_GPUS_NODE_SHARE = 0.88


def nccl_for_gpu_count(table: NcclThresholds, nodes: int, gpus_per_node: int) -> NcclThresholds:
    """The NCCL table for a node of `gpus_per_node` GPUs.

    Inside a node on NVSwitch, all_reduce busbw barely depends on the GPU count,
    so the node's floor (a share of it below 8 GPUs) and its transport apply to
    any count of 2 or more. The other collectives' floors, and every floor
    between nodes (which depends on NICs per GPU), describe 8 GPUs a node: with
    another count they are reported but not judged, unless the spec sets them.
    """
    if gpus_per_node == PROFILE_GPUS_PER_NODE:
        return table
    ratio = table.inter_node_ratio_to_median  # relative: holds for any GPU count
    latency = {"all_reduce_latency_us": table.all_reduce_latency_us,  # latency.py: per fabric, any count
               "node_all_reduce_latency_us": table.node_all_reduce_latency_us}
    if gpus_per_node < 2:
        return NcclThresholds(reference_bytes=table.reference_bytes, inter_node_ratio_to_median=ratio, **latency)
    node = table.node_all_reduce_busbw_gbps
    node = None if node is None else round(node * FEWER_GPUS_NODE_SHARE)
    return NcclThresholds(reference_bytes=table.reference_bytes, node_all_reduce_busbw_gbps=node,
                          all_reduce_busbw_gbps=node if nodes == 1 else None, inter_node_ratio_to_median=ratio,
                          intra_node_transport=table.intra_node_transport,
                          cross_check_tolerance=table.cross_check_tolerance,  # ours against nccl-tests: any count
                          **latency)


def resolve_checks(checks: ChecksSpec, profile: ProfileName, nodes: int,
                   gpus_per_node: int = PROFILE_GPUS_PER_NODE, fabric: str = "infiniband") -> ChecksSpec:
    """The checks with every threshold the spec left unset taken from the profile.

    The per-GPU floors hold for the default matmul and copy sizes or larger.
    """
    p = PROFILES[profile]
    nccl_defaults = nccl_for_gpu_count(p.nccl_multi_node if nodes > 1 else p.nccl_single_node, nodes, gpus_per_node)
    nccl_defaults = latency_for(nccl_defaults, nodes, gpus_per_node, fabric)
    if fabric == "efa" and nodes > 1:
        nccl_defaults = efa_floors(nccl_defaults, profile, gpus_per_node)
    ddp_defaults = p.ddp.get(checks.ddp.model, DdpThresholds())
    gpu_defaults = _gpu_defaults(p.gpu, checks.gpu)
    if not _default_ddp_workload(checks.ddp):
        # The profile's throughput floor was measured on the default model shape only.
        ddp_defaults = ddp_defaults.model_copy(update={"min_throughput_per_gpu": None})
    if over_sockets(nodes, fabric):
        ddp_defaults = ddp_defaults.model_copy(update={"min_scaling_efficiency": None, "min_throughput_per_gpu": None})
    if nodes * gpus_per_node == 1:  # one rank: DDP has nothing to scale over (a skip, ddp.py), no floor to hold
        ddp_defaults = ddp_defaults.model_copy(update={"min_scaling_efficiency": None})
    if _less_ddp_work_than_default(checks.ddp):
        # Measured at 0.80-0.99 run to run at a quarter of the default gpt batch: no floor to hold it to.
        ddp_defaults = ddp_defaults.model_copy(update={"min_scaling_efficiency": None})
    return checks.model_copy(
        update={
            "preflight": checks.preflight.model_copy(
                update={"thresholds": _overlay(p.preflight, checks.preflight.thresholds)}
            ),
            "gpu": checks.gpu.model_copy(update={"thresholds": _overlay(gpu_defaults, checks.gpu.thresholds)}),
            "nccl": checks.nccl.model_copy(
                update={"thresholds": _overlay(nccl_defaults, checks.nccl.thresholds)}
            ),
            "ddp": checks.ddp.model_copy(update={"thresholds": _overlay(ddp_defaults, checks.ddp.thresholds)}),
            "fsdp": checks.fsdp.model_copy(update={"thresholds": _overlay(
                _fsdp_defaults(p.fsdp, checks.fsdp, nodes, fabric), checks.fsdp.thresholds)}),
            "soak": checks.soak.model_copy(update={"thresholds": _overlay(p.soak, checks.soak.thresholds)}),
        }
    )


def efa_floors(table: NcclThresholds, profile: ProfileName, gpus_per_node: int) -> NcclThresholds:
    """The job-wide busbw floors of a multi-node run over EFA: EFA_NET_BUSBW for 8-GPU p5/p5e nodes, none else."""
    net = EFA_NET_BUSBW.get(profile) if gpus_per_node == PROFILE_GPUS_PER_NODE else None
    share = 0.9  # all_gather / reduce_scatter reach about what all_reduce does (as _hopper_like)
    return table.model_copy(update={
        "all_reduce_busbw_gbps": net,
        "all_gather_busbw_gbps": None if net is None else float(round(net * share)),
        "reduce_scatter_busbw_gbps": None if net is None else float(round(net * share))})


def _fsdp_defaults(profile: FsdpThresholds, fsdp: FsdpCheck, nodes: int = 1,
                   fabric: str = "infiniband") -> FsdpThresholds:
    """The profile's FSDP floors; the throughput floor holds for the default model shape only.

    The scaling efficiency means two things: in one node, sharded against unsharded per GPU (measured, low:
    FSDP's hooks cost more than its collectives at this size); across nodes, the hybrid run against the node's
    FSDP alone, a floor that assumes an RDMA fabric.
    """
    default = FsdpCheck()
    same = (fsdp.layers, fsdp.d_model, fsdp.batch_size, fsdp.seq_len) == (
        default.layers, default.d_model, default.batch_size, default.seq_len)
    sockets = over_sockets(nodes, fabric)
    update: dict[str, float | None] = {} if same and not sockets else {"min_throughput_per_gpu": None}
    if profile.min_scaling_efficiency is not None:
        update["min_scaling_efficiency"] = (FSDP_NODE_EFFICIENCY if nodes == 1 else
                                            None if sockets else profile.min_scaling_efficiency)
    return profile.model_copy(update=update)


def cpu_smoke_checks(checks: ChecksSpec) -> ChecksSpec:
    """The checks shrunk to a CPU smoke run: tiny sizes and steps, and no GPU thresholds.

    The one threshold left is relative: each process's matmul and copy rate
    against the median process's (CPU_RATIO_TO_MEDIAN, loose: CPU cores are shared).
    `gpu-acceptance local --cpu` and `spec.profile: cpu-smoke` both run these.
    """
    nccl = checks.nccl
    max_bytes = min(parse_bytes(nccl.max_bytes), CPU_MAX_BYTES)
    smoke = ChecksSpec.model_validate({
        "heartbeatTimeoutSeconds": checks.heartbeat_timeout_seconds,
        "preflight": {"enabled": checks.preflight.enabled, "thresholds": {"requireNumaLocalCpus": True}},
        "gpu": {"enabled": checks.gpu.enabled, "gemmSize": 512, "hbmBytes": "32Mi", "hostBytes": "1Mi", "windows": 5,
                "iters": 5, "warmupIters": 2, "gemmWarmupSeconds": 0,
                "thresholds": {"minRatioToNodeMedian": CPU_RATIO_TO_MEDIAN}},
        "nccl": {"enabled": nccl.enabled, "collectives": list(nccl.collectives), "minBytes": 16,
                 "maxBytes": max_bytes, "stepFactor": 4, "warmupIters": 1, "iters": 3, "dtype": nccl.dtype,
                 "perNode": False, "windows": 1, "localize": nccl.localize, "crossCheck": nccl.cross_check,
                 "thresholds": {"interNodeRatioToMedian": CPU_INTER_NODE_RATIO,
                                "allReduceLatencyUs": CPU_LATENCY_US, "nodeAllReduceLatencyUs": CPU_LATENCY_US,
                                "crossCheckTolerance": nccl.thresholds.cross_check_tolerance if nccl.cross_check
                                else None},
                 "collectiveTimeoutSeconds": min(nccl.collective_timeout_seconds, 60)},
        "ddp": {"enabled": checks.ddp.enabled, "model": checks.ddp.model, "batchSize": 4, "seqLen": 64,
                "steps": 6, "windows": 3, "warmupSteps": 1},
        "fsdp": {"enabled": checks.fsdp.enabled, "layers": 2, "dModel": 64, "batchSize": 4, "seqLen": 64,
                 "steps": 6, "windows": 3, "warmupSteps": 1,
                 "thresholds": {"maxMemoryRatio": checks.fsdp.thresholds.max_memory_ratio}},
        "storage": {**checks.storage.model_dump(by_alias=True, exclude_none=True),
                    "consistencyBytes": "64Ki", "throughputBytes": "16Mi", "blockBytes": "1Mi"},
        # the burn-in as asked (its length is the point), judged by nothing but what a CPU has: no NVML
        "soak": {"enabled": checks.soak.enabled, "durationSeconds": checks.soak.duration_seconds,
                 "sampleSeconds": checks.soak.sample_seconds},
    })
    if smoke.nccl.cross_check:
        # No CPU sweep reaches the cross-check's 64 MiB: nccl-tests' stand-in is compared at the sweep's top size.
        thresholds = smoke.nccl.thresholds.model_copy(update={"reference_bytes": smoke.nccl.sizes()[-1]})
        smoke = smoke.model_copy(update={"nccl": smoke.nccl.model_copy(update={"thresholds": thresholds})})
    return smoke
