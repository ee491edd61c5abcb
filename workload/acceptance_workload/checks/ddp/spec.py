"""ddp's spec (spec.checks.ddp): the model it trains, the steps and windows, and the thresholds it is judged by."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acceptance_workload.contract.wire import WireModel

DdpModel = Literal["gpt", "resnet50"]
DEFAULT_BATCH: dict[str, int] = {"gpt": 32, "resnet50": 128}


class DdpThresholds(WireModel):
    min_throughput_per_gpu: float | None = Field(
        None, ge=0, le=1e9, description="tokens/s per GPU for gpt, images/s per GPU for resnet50."
    )
    min_scaling_efficiency: float | None = Field(
        None, ge=0, le=1, description="DDP throughput / (world size x mean one-GPU throughput)."
    )
    max_straggler_ratio: float | None = Field(
        None, ge=1, le=100, description="Median rank throughput over the slowest rank's; above it names the straggler."
    )


class DdpCheck(WireModel):
    enabled: bool = True
    model: DdpModel = "gpt"
    batch_size: int | None = Field(
        None, ge=1, le=4096, description="Per-GPU batch; default 32 (gpt) or 128 (resnet50): large enough that a "
        "step keeps the GPU busy rather than waiting for the host to launch kernels.")
    seq_len: int = Field(1024, ge=16, le=131_072, description="Sequence length of the gpt model.")
    steps: int = Field(30, ge=2, le=100_000, description="Timed steps, each for the one-GPU baseline and for DDP.")
    windows: int = Field(
        5, ge=1, le=1000, description="The timed steps are split into this many windows, alternating one-GPU and "
        "DDP windows, so drift lands on both; throughput and efficiency are medians over windows.")
    warmup_steps: int = Field(5, ge=0, le=10_000)
    thresholds: DdpThresholds = Field(default_factory=DdpThresholds)

    def effective_batch_size(self) -> int:
        return self.batch_size or DEFAULT_BATCH[self.model]

    def steps_per_window(self) -> int:
        """Timed steps in each window (at least one; a step count below the windows gives fewer windows)."""
        return max(1, self.steps // self.windows)

    def window_count(self) -> int:
        return max(1, min(self.windows, self.steps))
