"""The one shape every check's results take, and how one is judged: the contract between the checks, the rule
table (rules.py) that judges them and the report (report/model.py) that gathers them.

Here rather than in the report so that the rule table, which the operator's re-judging shares, needs nothing of
the report but this: the spec family stays below the report family.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acceptance_workload.contract.wire import WireModel

CheckName = Literal["preflight", "gpu", "nccl", "ddp", "fsdp", "storage", "soak"]
CHECK_NAMES: tuple[CheckName, ...] = (  # the order they run in
    "preflight", "gpu", "nccl", "ddp", "fsdp", "storage", "soak")
Comparison = Literal["ge", "le", "eq", "info"]


class CheckResult(WireModel):
    """One measurement judged against one threshold, on one node/GPU or on the whole job."""

    check: CheckName
    name: str = Field(description="What was measured, e.g. gpu_count, all_reduce_busbw, throughput_per_gpu.")
    value: float | None = Field(None, description="The measurement; null when it could not be taken.")
    unit: str = ""
    threshold: float | None = None
    comparison: Comparison = Field("ge", description="ge: value >= threshold; le: <=; eq: ==; info: not judged.")
    observed: str | None = Field(None, description="Textual evidence, e.g. the GPU name NVML reported.")
    expected: str | None = None
    passed: bool
    message: str = ""
    node: str | None = Field(None, description="Node the measurement belongs to; null for the whole job.")
    gpu: int | None = Field(None, description="GPU index on that node, where one GPU is to blame.")
    estimated: bool | None = Field(
        None, description="True when the threshold is the profile's estimate, not yet a measured floor."
    )


ESTIMATED_SUFFIX = " [estimated threshold]"


def judge(value: float | None, threshold: float | None, comparison: Comparison) -> bool:
    """Pass/fail of one measurement; a missing measurement never passes."""
    if value is None:
        return False
    if threshold is None or comparison == "info":
        return True
    if comparison == "ge":
        return value >= threshold
    if comparison == "le":
        return value <= threshold
    return value == threshold
