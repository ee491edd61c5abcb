"""soak's share of the profiles (contract/profiles.CheckProfile): the burn-in's thresholds every GPU profile sets
(all estimates), and the check's cut for a CPU smoke run. docs/thresholds.md says where each number comes from.
"""

from __future__ import annotations

from acceptance_workload.checks.soak.spec import SoakCheck, SoakThresholds
from acceptance_workload.contract.profiles import CheckProfile, ProfileName, RunShape

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
FLOORS: dict[ProfileName, SoakThresholds] = {name: SOAK for name in ("h100-sxm", "h200-sxm", "b200", "a100-sxm")}
ESTIMATED: dict[ProfileName, frozenset[str]] = {name: SOAK_ESTIMATED for name in FLOORS}


def defaults(profile: ProfileName, shape: RunShape, soak: SoakCheck) -> SoakThresholds:
    """The profile's thresholds, for any shape of run (each GPU is judged against itself and its node)."""
    return FLOORS.get(profile, SoakThresholds())


def estimated(profile: ProfileName, shape: RunShape, soak: SoakCheck) -> frozenset[str]:
    return ESTIMATED.get(profile, frozenset())


def smoke(soak: SoakCheck) -> SoakCheck:
    """The burn-in as asked (its length is the point), judged by nothing but what a CPU has: no NVML."""
    return SoakCheck.model_validate({"enabled": soak.enabled, "durationSeconds": soak.duration_seconds,
                                     "sampleSeconds": soak.sample_seconds})


PROFILE = CheckProfile(defaults=defaults, estimated=estimated, smoke=smoke)
