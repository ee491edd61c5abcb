"""fsdp's rows of the rule table (contract/rules.py says how a row reads): DDP's training results, then per rank
the same parameters, its share of them, its peak memory."""

from __future__ import annotations

from acceptance_workload.checks.ddp.rules import training_rows
from acceptance_workload.checks.fsdp.spec import FsdpThresholds
from acceptance_workload.contract.rules import Table, field, fixed, row

# a rank's parameter elements x shards / all elements: 1.0 when sharded evenly. FSDP2 pads dim 0 to a multiple
# of the shard count, so the first ranks hold up to one row more of each tensor; unsharded it is `shards`.
MAX_SHARD_RATIO = 1.10

RULES = Table(FsdpThresholds, [
    *training_rows("fsdp"),
    row("fsdp", "parameter_checksum", "eq", "", fixed(1.0, "the majority's parameters after the last step")),
    row("fsdp", "state_shard_ratio", "le", "", fixed(MAX_SHARD_RATIO, "sharded evenly, FSDP2's padding allowed")),
    row("fsdp", "peak_memory_ratio", "le", "", field("max_memory_ratio")),
])
