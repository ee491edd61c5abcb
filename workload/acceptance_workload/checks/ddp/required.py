"""checks.ddp's required results: throughput and the loss's fall, and the scaling efficiency where judged."""

from __future__ import annotations

from acceptance_workload.checks.ddp.rules import RULES
from acceptance_workload.contract.required import Due, Required


def required(due: Due) -> list[Required]:
    ddp = due.config.checks.ddp
    out = [Required("ddp", "throughput_per_gpu"), Required("ddp", "loss_decrease")]
    if RULES.threshold("scaling_efficiency", ddp.thresholds) is not None:
        out.append(Required("ddp", "scaling_efficiency"))
    return out
