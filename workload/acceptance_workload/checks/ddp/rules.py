"""ddp's rows of the rule table (contract/rules.py says how a row reads): throughput, scaling, stragglers, loss."""

from __future__ import annotations

from acceptance_workload.checks.ddp.spec import DdpThresholds
from acceptance_workload.contract.rules import Rule, Table, field, fixed, row

MIN_LOSS_DECREASE = 0.01  # the loss must fall by at least 1% from the first steps to the last


def training_rows(check: str) -> list[Rule]:
    """The training's results, judged alike in every check that trains (ddp, fsdp): its own thresholds' fields."""
    return [
        row(check, "throughput_per_gpu", "ge", "", field("min_throughput_per_gpu")),
        row(check, "gpu_throughput", "ge", "", field("min_throughput_per_gpu")),
        row(check, "scaling_efficiency", "ge", "", field("min_scaling_efficiency")),
        row(check, "straggler_ratio", "le", "", field("max_straggler_ratio")),
        row(check, "loss_decrease", "ge", "fraction", fixed(MIN_LOSS_DECREASE, "the loss falls by 1%")),
    ]


RULES = Table(DdpThresholds, training_rows("ddp"))
