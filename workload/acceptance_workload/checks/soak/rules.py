"""soak's rows of the rule table (contract/rules.py says how a row reads): every GPU minute by minute under GEMM and
all_reduce load (soakjudge.py), watched through NVML."""

from __future__ import annotations

from acceptance_workload.checks.soak.spec import SoakThresholds
from acceptance_workload.contract.rules import Table, Threshold, field, fixed, from_run, row

RULES = Table(SoakThresholds, [
    row("soak", "tflops", "ge", "TFLOP/s", from_run(lambda _r: None, "recorded: the GPU's median minute")),
    row("soak", "tflops_ratio_to_first_minutes", "ge", "", field("min_ratio_to_first_minutes")),
    row("soak", "tflops_ratio_to_node_median", "ge", "", field("min_ratio_to_node_median")),
    row("soak", "throttle", "le", "s", Threshold(lambda th, _r: 0.0 if th.fail_on_throttle else None,
                                                 "fail_on_throttle", doc="0 seconds when failOnThrottle")),
    row("soak", "gpu_temperature", "le", "C", field("max_gpu_temperature_c")),
    row("soak", "memory_temperature", "le", "C", field("max_memory_temperature_c")),
    row("soak", "nvlink_errors", "le", "per minute", field("max_nvlink_errors_per_minute")),
    row("soak", "pcie_replays", "le", "per minute", field("max_pcie_replays_per_minute")),
    row("soak", "ecc_uncorrected", "le", "errors", fixed(0.0, "no uncorrected ECC error during the load")),
    row("soak", "pending_row_remaps", "le", "rows", fixed(0.0, "no new pending row remap during the load")),
    row("soak", "xid", "le", "events", fixed(0.0, "no critical XID event during the load")),
    row("soak", "nvml", "eq", "", fixed(1.0, "NVML read every measurement the judgement needs")),
])
