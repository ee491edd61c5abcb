"""nccl's fields of the report: every sweep (report.nccl: a node's sweeps in its node's evidence shard, the job's in
the job-wide one) and the inter-node localisation (report.localization: job-wide, every pair it measured)."""

from __future__ import annotations

from acceptance_workload.report.details import Detail
from acceptance_workload.report.model import LocalizationDetail, NcclSweep

ROWS_DROPPED = "rows dropped: the shard was too large"


def sweep_node(sweep: NcclSweep) -> str | None:
    """The node a sweep belongs to (one node's intra-node sweep); None for a job-wide one."""
    return sweep.node if sweep.scope == "node" else None


def without_rows(sweeps: list[NcclSweep]) -> list[NcclSweep]:
    """A shard over its budget drops its sweeps' rows first, saying so (the results keep the judged numbers)."""
    return [s.model_copy(update={"rows": [], "timing": ROWS_DROPPED}) for s in sweeps]


DETAILS = (
    Detail("nccl", list[NcclSweep], factory=list, rows="", row_node=sweep_node, shrink=without_rows),
    Detail("localization", LocalizationDetail | None),
)
