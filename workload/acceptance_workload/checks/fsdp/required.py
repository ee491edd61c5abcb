"""checks.fsdp's required results: throughput, the loss's fall, and every node's parameter checksum and shard."""

from __future__ import annotations

from acceptance_workload.contract.required import Due, Required


def required(due: Due) -> list[Required]:
    return [Required("fsdp", "throughput_per_gpu"), Required("fsdp", "loss_decrease")] + [
        Required("fsdp", name, n, "every rank's parameters and share of them") for n in sorted(due.nodes)
        for name in ("parameter_checksum", "state_shard_ratio")]
