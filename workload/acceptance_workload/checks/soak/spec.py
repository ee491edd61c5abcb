"""soak's spec (spec.checks.soak): how long the burn-in runs, how often NVML is read, and the limits it is judged by."""

from __future__ import annotations

from pydantic import Field

from acceptance_workload.contract.wire import WireModel


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
