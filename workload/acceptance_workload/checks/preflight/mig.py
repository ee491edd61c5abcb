"""MIG mode of each GPU (preflight `mig_mode`), judged against thresholds.migMode.

A GPU split into MIG instances shows a fraction of its SMs and memory to each
instance: a benchmark on it measures an instance, not the GPU, and NVLink/P2P
between instances does not exist. The profiles expect MIG disabled. A GPU that
cannot report a mode (no MIG support, e.g. consumer or pre-Ampere cards, or a
driver without the call) has no MIG and counts as disabled; any other read
error fails closed with its reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.preflight.rules import MIG_MODE_VALUE, RULES
from acceptance_workload.contract.results import CheckResult

if TYPE_CHECKING:
    from acceptance_workload.checks.preflight.spec import MigMode, PreflightThresholds

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NO_MIG = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)


def read_mode(nvml: Any, handle: Any) -> tuple[MigMode | None, str]:
    """('disabled' | 'enabled', what NVML said), or (None, the error) when the mode could not be read."""
    try:
        current, pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception as e:
        if getattr(e, "value", None) in NO_MIG:
            return "disabled", f"no MIG support ({e}): counts as disabled"
        return None, f"cannot read the MIG mode: {type(e).__name__}: {e}"
    mode: MigMode = "enabled" if current else "disabled"
    text = mode
    if pending != current:
        text += f" (pending {'enabled' if pending else 'disabled'} after a GPU reset)"
    return mode, text


def mig_result(mode: MigMode | None, said: str, th: PreflightThresholds, node: str, gpu: int) -> CheckResult:
    threshold = RULES.threshold("mig_mode", th)
    want = None if threshold is None else ("enabled" if threshold else "disabled")
    value = None if mode is None else MIG_MODE_VALUE[mode]
    out = RULES.judged("mig_mode", value, threshold, node=node, gpu=gpu,
                       observed=said if mode is not None else None, expected=want,
                       message=f"GPU {gpu} on node {node}: MIG {said}")
    if not out.passed and mode is not None:
        out.message += (f"; the test needs MIG {want} (nvidia-smi -i {gpu} -mig {int(threshold or 0)} on a drained "
                        "node, or the GPU operator's MIG manager)")
    return out


def judge_mig(nvml: Any, handle: Any, th: PreflightThresholds, node: str, gpu: int) -> CheckResult:
    mode, said = read_mode(nvml, handle)
    return mig_result(mode, said, th, node, gpu)
