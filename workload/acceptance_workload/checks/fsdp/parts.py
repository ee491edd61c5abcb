"""checks.fsdp's part of the reports: its text table per rank."""

from __future__ import annotations

from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.parts import ReportParts
from acceptance_workload.report.render import table


def fsdp_table(report: ReportBase) -> str:
    """checks.fsdp per rank: throughput alone and sharded, and peak memory against what sharding predicts."""
    d = report.fsdp
    if d is None:
        return ""

    def gib(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = [["RANK", "NODE", "GPU", "UNSHARDED (tok/s)", "FSDP (tok/s)", "NODE FSDP (tok/s)", "UNSHARDED PEAK (GiB)",
             "FSDP PEAK (GiB)", "PREDICTED (GiB)", "CHECKSUM"]]
    for r in d.ranks:
        rows.append([str(r.rank), r.node, str(r.gpu), f"{r.baseline_throughput:,.1f}", f"{r.fsdp_throughput:,.1f}",
                     "-" if r.node_throughput is None else f"{r.node_throughput:,.1f}",
                     gib(r.unsharded_peak_memory_gib), gib(r.peak_memory_gib), gib(r.predicted_memory_gib),
                     r.checksum or "-"])
    head = (f"# fsdp {d.model}: {d.parameters:,} parameters sharded over {d.shards} GPUs x {d.replicas} "
            f"replica(s), batch {d.batch_size} x {d.seq_len} per GPU, loss {d.first_loss} -> {d.last_loss}")
    return head + "\n" + table(rows)

PARTS = ReportParts(text=fsdp_table)
