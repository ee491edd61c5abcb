"""storage's rows of the rule table (contract/rules.py says how a row reads): the shared volume per node (floors
only from the spec), the checkpoint per rank and job-wide."""

from __future__ import annotations

from acceptance_workload.checks.storage.spec import StorageThresholds
from acceptance_workload.contract.rules import Table, field, fixed, row

RULES = Table(StorageThresholds, [
    row("storage", "storage_writable", "eq", "", fixed(1.0, "the node can write the volume (before and during)")),
    row("storage", "storage_capacity", "ge", "", fixed(1.0, "free / needed bytes and inodes (the smaller) >= 1")),
    row("storage", "storage_consistency", "eq", "", fixed(1.0, "every node sees the others' files")),
    row("storage", "storage_write_gbps", "ge", "GB/s", field("min_write_gbps")),
    row("storage", "storage_read_gbps", "ge", "GB/s", field("min_read_gbps")),
    row("storage", "checkpoint_match", "eq", "", fixed(1.0, "every tensor loaded back exactly")),
    row("storage", "checkpoint_save_gbps", "ge", "GB/s", field("min_checkpoint_save_gbps"), job_wide=True),
    row("storage", "checkpoint_load_gbps", "ge", "GB/s", field("min_checkpoint_load_gbps"), job_wide=True),
    row("storage", "checkpoint_save_seconds", "le", "s", field("max_checkpoint_seconds"), job_wide=True),
    row("storage", "checkpoint_load_seconds", "le", "s", field("max_checkpoint_seconds"), job_wide=True),
])
