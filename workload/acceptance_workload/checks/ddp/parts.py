"""checks.ddp's part of the reports: its text table per rank, and the HTML page's throughput per rank (a
straggler is the short pair of bars)."""

from __future__ import annotations

from typing import Any

from acceptance_workload.report.html_base import part, svg
from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.parts import ReportParts
from acceptance_workload.report.render import table

DDP_PLOT_ID = "plot-ddp-ranks"
DDP_BARS_MAX = 64  # more ranks than this: points instead of bars


def ddp_figure(plt: Any, report: ReportBase) -> str:
    """Each rank's one-GPU baseline and DDP throughput side by side: a straggler is the short pair.

    Over DDP_BARS_MAX ranks, points instead of bars (a thousand nodes have eight thousand ranks).
    """
    d = report.ddp
    assert d is not None and d.ranks
    ranks = sorted(d.ranks, key=lambda r: r.rank)
    x = [r.rank for r in ranks]
    fig, ax = plt.subplots(figsize=(min(14.0, max(7.0, 0.5 * len(ranks) + 2)), 3.6))
    if len(ranks) <= DDP_BARS_MAX:
        ax.bar([i - 0.2 for i in x], [r.baseline_throughput for r in ranks], width=0.4, label="one GPU alone",
               color="tab:gray")
        ax.bar([i + 0.2 for i in x], [r.ddp_throughput for r in ranks], width=0.4, label="in DDP", color="tab:blue")
        ax.set_xticks(x, labels=[f"{r.rank}\n{r.node}/{r.gpu}" for r in ranks], fontsize=7)
        ax.set_xlabel("rank (node/GPU)")
    else:
        ax.plot(x, [r.baseline_throughput for r in ranks], ".", markersize=2, color="tab:gray", label="one GPU alone")
        ax.plot(x, [r.ddp_throughput for r in ranks], ".", markersize=2, color="tab:blue", label="in DDP")
        ax.set_xlabel("rank")
        ax.set_ylim(bottom=0)
    ax.set_ylabel(d.unit)
    ax.set_title(f"DDP {d.model}: throughput per rank")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    return svg(plt, fig, "ddp")


def ddp_table(report: ReportBase) -> str:
    d = report.ddp
    if d is None:
        return ""
    rows = [["RANK", "NODE", "GPU", f"ONE-GPU ({d.unit})", f"DDP ({d.unit})"]]
    for r in d.ranks:
        rows.append([str(r.rank), r.node, str(r.gpu), f"{r.baseline_throughput:,.1f}", f"{r.ddp_throughput:,.1f}"])
    head = (f"# ddp {d.model}: {d.world_size} GPUs, batch {d.batch_size} per GPU, loss {d.first_loss} -> "
            f"{d.last_loss}")
    return head + "\n" + table(rows)


def ddp_section(plt: Any, report: ReportBase, problems: list[str] | None) -> str:
    if not (report.ddp and report.ddp.ranks):
        return ""
    ddp = part(problems, "the DDP plot", lambda: ddp_figure(plt, report))
    return f'<h2>DDP</h2><figure id="{DDP_PLOT_ID}" class="plot">{ddp}</figure>'


PARTS = ReportParts(text=ddp_table, html_sections=ddp_section)
