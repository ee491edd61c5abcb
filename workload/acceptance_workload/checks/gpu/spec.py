"""gpu's spec (spec.checks.gpu): the per-GPU GEMM and copy parameters and the floors each GPU is judged by."""

from __future__ import annotations

from pydantic import Field, model_validator

from acceptance_workload.contract.terms import MAX_BUSBW_GBPS
from acceptance_workload.contract.wire import WireModel, byte_size, parse_bytes

MAX_TFLOPS = 1_000_000.0
MAX_GPU_COPY = 2**36  # 64 GiB: one buffer of the per-GPU copies
MIN_GPU_COPY_BYTES = 1 << 20  # a smaller copy measures latency, not bandwidth


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
    hbm_bytes: byte_size(MAX_GPU_COPY, MIN_GPU_COPY_BYTES) = Field(
        "1Gi", description="Buffer copied device to device (at least 1Mi).")
    host_bytes: byte_size(MAX_GPU_COPY, MIN_GPU_COPY_BYTES) = Field(
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

