"""preflight's rows of the rule table (contract/rules.py says how a row reads): per node and per GPU health."""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.contract.rules import (
    Run,
    Table,
    Threshold,
    field,
    fixed,
    from_run,
    required_text,
    row,
    when_flag,
)
from acceptance_workload.contract.wire import parse_bytes

MIG_MODE_VALUE: dict[str, float] = {"disabled": 0.0, "enabled": 1.0}  # mig_mode's value: 1 when MIG is on


def _pcie_link(th: Any, _r: Run) -> float | None:
    return 1.0 if th.min_pcie_generation is not None or th.min_pcie_width is not None else None


def _mig(th: Any, _r: Run) -> float | None:
    """mig_mode: 0 (disabled) or 1 (enabled) as migMode asks; None: reported, not judged."""
    return None if th.mig_mode is None else MIG_MODE_VALUE[th.mig_mode]


RULES = Table(PreflightThresholds, [
    # preflight: per node and per GPU health
    row("preflight", "gpu_count", "ge", "GPUs", from_run(lambda r: float(r.gpus_per_node), "spec.gpusPerNode")),
    row("preflight", "gpu_model", "eq", "", required_text("gpu_model"), kind="model"),
    row("preflight", "driver_version", "eq", "", required_text("min_driver_version"), kind="version"),
    row("preflight", "cuda_version", "eq", "", required_text("min_cuda_version"), kind="version"),
    row("preflight", "nccl_version", "eq", "", required_text("min_nccl_version"), kind="version"),
    row("preflight", "temperature", "le", "C", field("max_gpu_temperature_c")),
    row("preflight", "ecc_uncorrected", "le", "errors", field("max_uncorrected_ecc_errors")),
    row("preflight", "pending_row_remaps", "le", "", field("max_pending_row_remaps")),
    row("preflight", "row_remap_failure", "eq", "", fixed(1.0, "always judged: a failed remap needs service")),
    row("preflight", "gpu_in_use", "le", "MiB", field("max_gpu_memory_in_use_mib")),
    row("preflight", "pcie_generation", "ge", "", field("min_pcie_generation")),
    row("preflight", "pcie_width", "ge", "lanes", field("min_pcie_width")),
    row("preflight", "pcie_link", "ge", "", Threshold(_pcie_link, doc="1 (readable) when a PCIe floor is set")),
    row("preflight", "nvlink_active_links", "ge", "links", field("min_nvlink_active_links")),
    row("preflight", "throttle", "eq", "", when_flag("fail_on_throttle")),
    row("preflight", "shm_size", "ge", "bytes", field("min_shm_bytes", scale=lambda v: float(parse_bytes(v)))),
    row("preflight", "memlock_unlimited", "eq", "",
        when_flag("require_unlimited_memlock", run=lambda r: r.rdma, doc="1 when required and the run uses RDMA")),
    row("preflight", "ib_ports", "ge", "ports", fixed(1.0, "at least one RDMA port on a multi-node fabric")),
    row("preflight", "ib_port_state", "eq", "", from_run(lambda r: 1.0 if r.nodes > 1 else None, "1 on >1 node")),
    # An EFA device's port rate is its own share (100-400 Gb/s by generation), not the node's: the busbw floors
    # judge an EFA fabric's bandwidth.
    row("preflight", "ib_port_rate", "ge", "Gb/s", field(
        "min_ib_rate_gbps", run=lambda r: r.nodes > 1 and r.fabric != "efa",
        doc="min_ib_rate_gbps on >1 node, not on efa")),
    row("preflight", "gpu_health", "ge", "", fixed(1.0, "NVML must answer")),
    # CPU/GPU binding and the pod's limits (binding.py), MIG (mig.py)
    row("preflight", "cpu_affinity", "ge", "share", when_flag("require_numa_local_cpus")),
    row("preflight", "cpu_limit", "eq", "cores", from_run(lambda r: r.cpu_limit, "spec.resources.cpu in cores")),
    row("preflight", "memory_limit", "eq", "bytes",
        from_run(lambda r: r.memory_limit, "spec.resources.memory in bytes, whole pages")),
    row("preflight", "mig_mode", "eq", "", Threshold(_mig, "mig_mode", doc="migMode: 0 disabled, 1 enabled")),
    # the host's CPUs (hostload.py): recorded, never judged; a saturated host is named on timing failures
    row("preflight", "host_cpu_outside", "le", "share",
        from_run(lambda _r: None, "recorded, not judged: context for timing failures (docs/thresholds.md)")),
])
