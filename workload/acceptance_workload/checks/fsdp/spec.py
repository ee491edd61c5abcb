"""fsdp's spec (spec.checks.fsdp): the FSDP2 model and steps, and the thresholds it is judged by."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acceptance_workload.contract.wire import WireModel

FsdpModel = Literal["gpt"]


class FsdpThresholds(WireModel):
    """FSDP2 training: throughput, scaling, a straggler, and that sharding shrank the memory (fsdp.py)."""

    min_throughput_per_gpu: float | None = Field(None, ge=0, le=1e9, description="FSDP tokens/s per GPU.")
    min_scaling_efficiency: float | None = Field(
        None, ge=0, le=1, description="FSDP tokens/s per GPU over the baseline's: one node's FSDP alone in a "
        "multi-node run (hybrid sharding against full sharding inside the node), each GPU alone with the whole "
        "model in a one-node run.")
    max_straggler_ratio: float | None = Field(
        None, ge=1, le=100, description="Median GPU's one-GPU throughput over the slowest's; above it names the GPU.")
    max_memory_ratio: float | None = Field(
        None, ge=0.1, le=100, description="Each GPU's peak memory under FSDP over the sharding prediction "
        "(model state / GPUs sharding it + activations, both taken from the unsharded run on the same GPU); "
        "above it names the GPU: its state was not sharded as the mesh says.")


class FsdpCheck(WireModel):
    """torch FSDP2 (fully_shard) training of a GPT larger than DDP's: full sharding in a node, hybrid across nodes."""

    enabled: bool = Field(False, description="Off unless asked for: the model is larger than DDP's and takes "
                                             "about 40 s more on 8 GPUs.")
    model: FsdpModel = "gpt"
    layers: int = Field(24, ge=1, le=512, description="Transformer blocks of the gpt model.")
    d_model: int = Field(1024, ge=32, le=32_768, description="Width of the gpt model (heads of 64).")
    batch_size: int = Field(8, ge=1, le=4096, description="Per-GPU batch.")
    seq_len: int = Field(1024, ge=16, le=131_072, description="Sequence length.")
    steps: int = Field(20, ge=2, le=100_000, description="Timed steps of each phase.")
    windows: int = Field(4, ge=1, le=1000, description="Timed windows the steps are split into (medians).")
    warmup_steps: int = Field(3, ge=0, le=10_000)
    thresholds: FsdpThresholds = Field(default_factory=FsdpThresholds)

    def steps_per_window(self) -> int:
        return max(1, self.steps // self.windows)

    def window_count(self) -> int:
        return max(1, min(self.windows, self.steps))
