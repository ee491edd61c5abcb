"""preflight's share of the profiles (contract/profiles.CheckProfile): each GPU model's node health limits.

The limits are facts of the part and its node (NVIDIA's driver minimums, the PCIe and NVLink an SXM board has, the
generation's NIC rate), so none is an estimate and none depends on the run's shape. docs/thresholds.md lists them.
"""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks.preflight.spec import PreflightCheck, PreflightThresholds
from acceptance_workload.contract.profiles import CPU_SMOKE, CheckProfile, ProfileName, RunShape

# A GPU nobody uses shows a few MiB in use to NVML (docs/thresholds.md); another job's CUDA context alone holds
# ~500 MiB, and anything it allocates comes on top.
GPU_MEMORY_IN_USE_MIB = 1024


def _sxm(gpu: str, driver: str, ib_rate: float, pcie_gen: int, nvlinks: int) -> PreflightThresholds:
    """The limits of an SXM node of the GPU `gpu` (NVML's name contains it) on NVSwitch, one NIC per GPU."""
    return PreflightThresholds(
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


FLOORS: dict[ProfileName, PreflightThresholds] = {
    "h100-sxm": _sxm("H100", "535.54", ib_rate=400, pcie_gen=5, nvlinks=18),
    "h200-sxm": _sxm("H200", "550.54", ib_rate=400, pcie_gen=5, nvlinks=18),
    "b200": _sxm("B200", "570.86", ib_rate=400, pcie_gen=5, nvlinks=18),
    "a100-sxm": _sxm("A100", "470.57", ib_rate=200, pcie_gen=4, nvlinks=12),
    # CPU smoke: each rank's threads within its even share of the pod's CPUs (docs/thresholds.md); nothing else.
    CPU_SMOKE: PreflightThresholds(require_numa_local_cpus=True),
}


def defaults(profile: ProfileName, shape: RunShape, preflight: Any) -> PreflightThresholds:
    """The profile's limits, the same for any shape of run (custom: none)."""
    return FLOORS.get(profile, PreflightThresholds())


def smoke(preflight: PreflightCheck) -> PreflightCheck:
    """On CPU processes: the CPU binding alone (as the cpu-smoke profile's limits)."""
    return PreflightCheck.model_validate({"enabled": preflight.enabled,
                                          "thresholds": {"requireNumaLocalCpus": True}})


PROFILE = CheckProfile(defaults=defaults, smoke=smoke)
