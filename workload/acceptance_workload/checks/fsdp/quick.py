"""checks.fsdp under `local --quick`: fewer steps and windows."""

from __future__ import annotations

from acceptance_workload.checks.fsdp.spec import FsdpCheck


def quick(fsdp: FsdpCheck) -> FsdpCheck:
    return fsdp.model_copy(update={"steps": min(fsdp.steps, 8), "windows": min(fsdp.windows, 2),
                                   "warmup_steps": min(fsdp.warmup_steps, 2)})
