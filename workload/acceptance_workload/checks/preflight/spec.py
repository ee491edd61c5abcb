"""preflight's spec (spec.checks.preflight): the per-node health limits it judges every node and GPU by."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acceptance_workload.contract.wire import WireModel, byte_size, text

MigMode = Literal["disabled", "enabled"]
MAX_SHM = 2**42  # 4 TiB (bounds: contract/terms.py)
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
