"""checks.ddp under `local --quick`: fewer steps and windows."""

from __future__ import annotations

from acceptance_workload.checks.ddp.spec import DdpCheck


def quick(ddp: DdpCheck) -> DdpCheck:
    return ddp.model_copy(update={"steps": min(ddp.steps, 12), "windows": min(ddp.windows, 4),
                                  "warmup_steps": min(ddp.warmup_steps, 3)})
