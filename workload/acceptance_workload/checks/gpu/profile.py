"""gpu's share of the profiles (contract/profiles.CheckProfile): each GPU model's per-GPU floors, which of them are
estimates, the sizes they hold for, and the check's cut for a CPU smoke run. docs/thresholds.md says where each
number comes from.
"""

from __future__ import annotations

from acceptance_workload.checks.gpu.spec import GpuCheck, GpuThresholds
from acceptance_workload.contract.profiles import CPU_SMOKE, CheckProfile, ProfileName, RunShape
from acceptance_workload.contract.wire import parse_bytes

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
# CPU smoke: relative floors only (CPU cores are shared, so loose ones): each process's matmul and copy rate
# against the median process's.
CPU_RATIO_TO_MEDIAN = 0.5


def _gpu_floors(gemm: float | None = None, hbm: float | None = None, host: float | None = None) -> GpuThresholds:
    return GpuThresholds(min_gemm_tflops=gemm, min_hbm_gbps=hbm, min_h2d_gbps=host, min_d2h_gbps=host,
                         min_ratio_to_node_median=GPU_RATIO_TO_NODE_MEDIAN,
                         min_host_copy_ratio_to_node_median=GPU_HOST_COPY_RATIO_TO_NODE_MEDIAN)


FLOORS: dict[ProfileName, GpuThresholds] = {
    "h100-sxm": _gpu_floors(gemm=560, hbm=2_500, host=40),
    "h200-sxm": _gpu_floors(gemm=560, hbm=3_650, host=40),
    "b200": _gpu_floors(),  # unmeasured: the ratios to the node's median alone
    "a100-sxm": _gpu_floors(),
    CPU_SMOKE: GpuThresholds(min_ratio_to_node_median=CPU_RATIO_TO_MEDIAN),
}
ESTIMATED: dict[ProfileName, frozenset[str]] = {
    "h100-sxm": GPU_HOST_ESTIMATED,
    "h200-sxm": GPU_HOST_ESTIMATED,
    "b200": GPU_ESTIMATED,
    "a100-sxm": GPU_ESTIMATED,
}


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


def defaults(profile: ProfileName, shape: RunShape, gpu: GpuCheck) -> GpuThresholds:
    """The profile's floors for the spec's sizes; any shape of run (each GPU is measured on its own)."""
    return _gpu_defaults(FLOORS.get(profile, GpuThresholds()), gpu)


def estimated(profile: ProfileName, shape: RunShape, gpu: GpuCheck) -> frozenset[str]:
    return ESTIMATED.get(profile, frozenset())


def smoke(gpu: GpuCheck) -> GpuCheck:
    """A small matmul and small copies, few windows, no warm-up: judged against the median process alone."""
    return GpuCheck.model_validate({
        "enabled": gpu.enabled, "gemmSize": 512, "hbmBytes": "32Mi", "hostBytes": "1Mi", "windows": 5, "iters": 5,
        "warmupIters": 2, "gemmWarmupSeconds": 0, "thresholds": {"minRatioToNodeMedian": CPU_RATIO_TO_MEDIAN}})


PROFILE = CheckProfile(defaults=defaults, estimated=estimated, smoke=smoke)
