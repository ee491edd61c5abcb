"""checks.storage's part of the reports: its text table per node, and the checkpoint."""

from __future__ import annotations

from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.parts import ReportParts
from acceptance_workload.report.render import human_bytes, table


def storage_table(report: ReportBase) -> str:
    """checks.storage per node: what it sees of the others' files and its sequential GB/s; the checkpoint."""
    d = report.storage
    if d is None:
        return ""
    rows = [["NODE", "FREE", "SEES", "WRITE (GB/s)", "READ (GB/s)", "I/O", "PROBLEMS"]]
    for n in d.nodes:
        rows.append([n.node, "-" if n.free_bytes is None else human_bytes(n.free_bytes), str(len(n.sees)),
                     "-" if n.write_gbps is None else f"{n.write_gbps:.3g}",
                     "-" if n.read_gbps is None else f"{n.read_gbps:.3g}",
                     "-" if n.direct_io is None else ("direct" if n.direct_io else "buffered"),
                     "; ".join([*([n.write_error] if n.write_error else []), *n.problems][:2])])
    head = f"# storage {d.path}" + (f" (the check needs {human_bytes(d.needed_bytes)} free)" if d.needed_bytes else "")
    if d.checkpoint_bytes:
        head += (f": checkpoint {human_bytes(d.checkpoint_bytes)} saved in {d.checkpoint_save_seconds} s, "
                 f"loaded in {d.checkpoint_load_seconds} s")
    return head + "\n" + table(rows)

PARTS = ReportParts(text=storage_table)
