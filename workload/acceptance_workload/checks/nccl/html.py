"""checks.nccl's part of the HTML page: busbw against message size per collective (log axes, the profile's
floor, the nccl-tests reference where one was measured on the same kind of machine, html_reference.py), the
all_reduce latency, the localisation section (html_localize.py) and, at the page's end, the sweep tables."""

from __future__ import annotations

import statistics
from typing import Any

from acceptance_workload.checks.nccl import latency
from acceptance_workload.checks.nccl.html_localize import localization_section
from acceptance_workload.checks.nccl.html_reference import NCCL_TESTS_REFERENCE, NcclReference
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.html_base import escape as _e
from acceptance_workload.report.html_base import part, svg
from acceptance_workload.report.model import ONE_RANK_BUSBW, NcclSweep, ReportBase
from acceptance_workload.report.render import human_bytes

NCCL_PLOT_ID = "plot-nccl-{collective}"  # one figure per collective; the Chromium test counts them by this id
LATENCY_PLOT_ID = "plot-latency"
NODE_LINES_MAX = 8  # more nodes' sweeps than this in one plot: a band (min to max, median), failed nodes drawn each


def reference_for(report: ReportBase, sweep: NcclSweep) -> NcclReference | None:
    """The nccl-tests reference measured on this sweep's kind of machine (GPU model and ranks), if any."""
    model = (report.environment.gpu_model or "").strip().upper()
    return next((ref for ref in NCCL_TESTS_REFERENCE
                 if ref.gpu.upper() == model and ref.ranks == sweep.ranks and sweep.collective in ref.busbw), None)


def floor_for(report: ReportBase, sweep: NcclSweep) -> CheckResult | None:
    """The judged busbw result of this sweep: its threshold is the floor drawn on the plot."""
    name = f"{sweep.collective}_busbw" if sweep.scope == "job" else f"node_{sweep.collective}_busbw"
    node = None if sweep.scope == "job" else sweep.node
    return next((r for r in report.results if r.check == "nccl" and r.name == name and r.node == node
                 and r.threshold is not None and r.comparison == "ge"), None)


def no_plot_reason(sweeps: list[NcclSweep]) -> str | None:
    """Why a collective's busbw cannot be drawn on log axes (none above 0), None when it can."""
    if any(_points(s)[0] for s in sweeps):
        return None
    if all(s.ranks == 1 for s in sweeps):
        return ONE_RANK_BUSBW
    return "no busbw above 0 was measured, and log axes cannot show 0"


def _points(sweep: NcclSweep) -> tuple[list[int], list[float]]:
    rows = [r for r in sweep.rows if r.size > 0 and r.busbw_gbps > 0]  # a log axis has no 0
    return [r.size for r in rows], [r.busbw_gbps for r in rows]


def _node_band(ax: Any, sweeps: list[NcclSweep]) -> None:
    """Many nodes: their min-max band and median per size, instead of one line each."""
    by_size: dict[int, list[float]] = {}
    for sweep in sweeps:
        for size, busbw in zip(*_points(sweep), strict=True):
            by_size.setdefault(size, []).append(busbw)
    sizes = sorted(by_size)
    ax.fill_between(sizes, [min(by_size[s]) for s in sizes], [max(by_size[s]) for s in sizes], color="tab:orange",
                    alpha=0.25, label=f"{len(sweeps)} other nodes: min to max")
    ax.plot(sizes, [statistics.median(by_size[s]) for s in sizes], color="tab:orange", linewidth=1,
            label=f"{len(sweeps)} other nodes: median")


def nccl_figure(plt: Any, report: ReportBase, collective: str, sweeps: list[NcclSweep]) -> str:
    """busbw against message size, log-log: the job-wide sweep, the nodes' (failed ones each), floors, reference."""
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    many = sum(1 for s in sweeps if s.scope == "node") > NODE_LINES_MAX
    banded = [s for s in sweeps if many and s.scope == "node" and s.node not in report.failed_nodes]
    if banded:
        _node_band(ax, banded)
    for sweep in (s for s in sweeps if s not in banded):
        failed = sweep.scope == "node" and sweep.node in report.failed_nodes
        where = "job" if sweep.scope == "job" else f"node {sweep.node}" + (" (failed)" if failed else "")
        ax.plot(*_points(sweep), marker="o", markersize=3, linewidth=2 if sweep.scope == "job" else 1,
                label=f"{where} ({sweep.ranks} ranks)", **({"color": "tab:red"} if failed else {}))
    drawn_floors: set[tuple[float, str]] = set()
    for floor in (floor_for(report, s) for s in sweeps):
        if floor is not None and floor.threshold and floor.threshold > 0:
            key = (floor.threshold, "node" if floor.node else "job")
            if key not in drawn_floors:
                drawn_floors.add(key)
                ax.axhline(floor.threshold, color="tab:red", linestyle="--", linewidth=1,
                           label=f"{key[1]} floor {floor.threshold:g} GB/s" + (" (est.)" if floor.estimated else ""))
    for ref in {ref.label: ref for s in sweeps if (ref := reference_for(report, s))}.values():
        points = ref.busbw[collective]  # type: ignore[index]
        ax.plot([1 << e for e, _ in points], [v for _, v in points], color="0.45", linestyle=":", linewidth=1.5,
                label=ref.label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(collective)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: human_bytes(v) + "B" if v >= 1 else ""))
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    return svg(plt, fig, f"nccl-{collective}")


def latency_figure(plt: Any, report: ReportBase) -> str | None:
    """all_reduce time per operation from 8 B to 64 KiB (latency.py), job and nodes, with the ceilings judged."""
    sweeps = [s for s in report.nccl if s.collective == "all_reduce" and latency.window(s.rows)]
    if not sweeps:
        return None
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    for sweep in sweeps[:NODE_LINES_MAX + 1]:
        failed = sweep.scope == "node" and sweep.node in report.failed_nodes
        rows = latency.window(sweep.rows)
        ax.plot([r.size for r in rows], [r.time_us for r in rows], marker="o", markersize=3,
                label=("job" if sweep.scope == "job" else f"node {sweep.node}") + f" ({sweep.ranks} ranks)",
                linewidth=2 if sweep.scope == "job" else 1, **({"color": "tab:red"} if failed else {}))
    ceilings = {(r.threshold, r.name): r for r in report.results if r.name in latency.RESULTS and r.threshold}
    for (threshold, name), r in ceilings.items():
        ax.axhline(threshold, color="tab:red", linestyle="--" if r.node is None else ":", linewidth=1,
                   label=f"{'job' if name == latency.RESULT else 'node'} ceiling {threshold:g} us"
                   + (" (est.)" if r.estimated else ""))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time per all_reduce (us)")
    ax.set_title("all_reduce latency")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: human_bytes(v) + "B" if v >= 1 else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return svg(plt, fig, "nccl-latency")


def _nccl_section(plt: Any, report: ReportBase, problems: list[str] | None = None) -> str:
    by_collective: dict[str, list[NcclSweep]] = {}
    for s in report.nccl:
        by_collective.setdefault(s.collective, []).append(s)
    if not by_collective:
        return ""
    parts = ["<h2>NCCL: busbw against message size</h2>",
             '<p class="muted">Log axes. Dashed red: the floor the busbw result is judged against (at sizes of '
             "at least the profile's reference size). Dotted grey: nccl-tests on the same kind of machine, where "
             "one was measured (docs/benchmarks.md).</p>"]
    figures = []
    for collective, sweeps in by_collective.items():
        fig_id = NCCL_PLOT_ID.format(collective=collective)
        why = no_plot_reason(sweeps)
        figure = (f'<p class="muted">{_e(collective)}: not plotted ({_e(why)}).</p>' if why else
                  part(problems, f"the {collective} busbw plot",
                       lambda c=collective, w=sweeps: nccl_figure(plt, report, c, w)))  # type: ignore[misc]
        figures.append(f'<figure id="{fig_id}" class="plot">{figure}</figure>')
    lat = part(problems, "the all_reduce latency plot", lambda: latency_figure(plt, report))
    if lat:
        figures.append(f'<figure id="{LATENCY_PLOT_ID}" class="plot">{lat}</figure>')
    return "\n".join(parts) + f'<div class="plots">{"".join(figures)}</div>'


def _sweep_tables(report: ReportBase) -> str:
    if not report.nccl:
        return ""
    blocks = []
    for s in report.nccl:
        where = "job" if s.scope == "job" else f"node {s.node}"
        rows = "".join(f"<tr><td>{r.size}</td><td>{_e(human_bytes(r.size))}</td><td>{r.time_us:.2f}</td>"
                       f"<td>{r.algbw_gbps:.2f}</td><td>{r.busbw_gbps:.2f}</td><td>{r.wrong}</td></tr>"
                       for r in s.rows)
        blocks.append(f"<details><summary>{_e(s.collective)} ({_e(where)}, {s.ranks} ranks, {_e(s.dtype)})"
                      f"</summary><table><tr><th>size (B)</th><th>size</th><th>time (us)</th><th>algbw (GB/s)</th>"
                      f"<th>busbw (GB/s)</th><th>#wrong</th></tr>{rows}</table></details>")
    return "<h2>NCCL sweep tables</h2>" + "".join(blocks)


def plots(plt: Any, report: ReportBase, problems: list[str] | None) -> str:
    """High on the page: the busbw and latency plots, then the localisation section."""
    return "\n".join(p for p in (part(problems, "the NCCL plots", lambda: _nccl_section(plt, report, problems)),
                                 part(problems, "the localisation section", lambda: localization_section(report)))
                     if p)


def tables(_plt: Any, report: ReportBase, problems: list[str] | None) -> str:
    return part(problems, "the NCCL sweep tables", lambda: _sweep_tables(report))
