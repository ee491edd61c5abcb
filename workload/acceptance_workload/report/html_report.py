"""A report as one self-contained HTML page with plots (`--html FILE`), for people and vendors.

The page opens with the verdict and the nodes to blame, then shows what the
text tables cannot: busbw against message size per collective (log axes, the
profile's floor, the nccl-tests reference where one was measured on the same
kind of machine), a node x metric heatmap and the DDP throughput per rank.
Everything is inside the file (the plots are matplotlib SVG, the style is
inline), so nothing is fetched when it is opened, also offline or in a
ticket system.

Each part of the page (a plot, a section) is drawn on its own: a part that
fails is a sentence on the page saying why, and one line for the command to
print (`problems`); the page is written without it. An export never changes
the verdict (exports.py).

matplotlib is an optional extra (`pip install 'gpu-acceptance[report]'`): it
is imported only here and only when a page is made, so the workload image does
not need it. What the report means (verdict, tally, headline, failed nodes)
comes from report.py, never from here.
"""

from __future__ import annotations

import io
import re
import statistics
from collections.abc import Callable
from typing import Any

from acceptance_workload.checks.nccl import latency
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.html_base import escape as _e
from acceptance_workload.report.html_base import threshold as _threshold
from acceptance_workload.report.html_localize import localization_section
from acceptance_workload.report.html_nodes import nodes_section
from acceptance_workload.report.html_reference import NCCL_TESTS_REFERENCE, NcclReference
from acceptance_workload.report.html_soak import soak_section
from acceptance_workload.report.model import ONE_RANK_BUSBW, NcclSweep, Report
from acceptance_workload.report.render import CPU_BANNER, human_bytes, verdict_line

INSTALL_HINT = "pip install 'gpu-acceptance[report]' (or: pip install matplotlib)"
NCCL_PLOT_ID = "plot-nccl-{collective}"  # one figure per collective; the Chromium test counts them by this id
HEATMAP_ID = "plot-node-heatmap"
DDP_PLOT_ID = "plot-ddp-ranks"
LATENCY_PLOT_ID = "plot-latency"
NODE_LINES_MAX = 8  # more nodes' sweeps than this in one plot: a band (min to max, median), failed nodes drawn each
HEATMAP_MAX_NODES = 64  # more nodes than this: the heatmap shows the failed ones, then the lowest against the median
DDP_BARS_MAX = 64  # more ranks than this: points instead of bars
FULL_TABLE_MAX = 2000  # results listed one by one (folded per measurement above it; all are in --json and --junit)


class HtmlUnavailable(RuntimeError):
    """matplotlib is not installed: the message says how to install it."""


def reference_for(report: Report, sweep: NcclSweep) -> NcclReference | None:
    """The nccl-tests reference measured on this sweep's kind of machine (GPU model and ranks), if any."""
    model = (report.environment.gpu_model or "").strip().upper()
    return next((ref for ref in NCCL_TESTS_REFERENCE
                 if ref.gpu.upper() == model and ref.ranks == sweep.ranks and sweep.collective in ref.busbw), None)


def floor_for(report: Report, sweep: NcclSweep) -> CheckResult | None:
    """The judged busbw result of this sweep: its threshold is the floor drawn on the plot."""
    name = f"{sweep.collective}_busbw" if sweep.scope == "job" else f"node_{sweep.collective}_busbw"
    node = None if sweep.scope == "job" else sweep.node
    return next((r for r in report.results if r.check == "nccl" and r.name == name and r.node == node
                 and r.threshold is not None and r.comparison == "ge"), None)


# --- plots -------------------------------------------------------------------------------------------------------

def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise HtmlUnavailable(f"--html needs matplotlib, which is not installed here: {INSTALL_HINT}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _svg(plt: Any, fig: Any, salt: str) -> str:
    """The figure as inline SVG: text stays text (no font files), ids are unique per figure (hash salt)."""
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML declaration and DOCTYPE: not allowed inside HTML
    # matplotlib numbers its elements per figure (figure_1, axes_1, ...): prefix them, and what refers to them,
    # so that the ids of the page's figures stay unique.
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{salt}-{m.group(1)}"', text)
    return re.sub(r'(url\(#|href="#)([^")]+)',
                  lambda m: m.group(1) + (f"{salt}-" if m.group(2) in ids else "") + m.group(2), text)


def part(problems: list[str] | None, what: str, draw: Callable[[], str | None]) -> str:
    """One part of the page: what `draw` makes, or, where it raises, a sentence saying which part is left out and
    why (and one line in `problems`): a plot that cannot be drawn must not cost the page or the run's exit code."""
    try:
        return draw() or ""
    except Exception as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        why = f"{type(e).__name__}: {lines[0] if lines else repr(e)}"[:300]
        if problems is not None:
            problems.append(f"{what} left out: {why}")
        return f'<p class="muted part-error">{_e(what)} could not be drawn ({_e(why)}); the rest of the page is ' \
               "complete.</p>"


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


def nccl_figure(plt: Any, report: Report, collective: str, sweeps: list[NcclSweep]) -> str:
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
    return _svg(plt, fig, f"nccl-{collective}")


def latency_figure(plt: Any, report: Report) -> str | None:
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
    return _svg(plt, fig, "nccl-latency")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def node_metrics(report: Report) -> tuple[list[str], list[str], list[list[float | None]]]:
    """Nodes, metric labels and each node's value of each metric (None: not measured on that node)."""
    nodes = sorted({*report.environment.hostnames, *(r.node for r in report.results if r.node),
                    *(r.node for r in (report.gpu.rows if report.gpu else [])),
                    *(r.node for r in (report.ddp.ranks if report.ddp else []))})
    unit = report.ddp.unit if report.ddp else ""

    def busbw(node: str) -> float | None:
        judged = next((r.value for r in report.results if r.name == "node_all_reduce_busbw" and r.node == node
                       and r.value is not None), None)
        if judged is not None:
            return judged
        return max((row.busbw_gbps for s in report.nccl if s.collective == "all_reduce" and s.node == node
                    for row in s.rows), default=None)

    def gpu_median(field: str) -> Callable[[str], float | None]:
        return lambda node: _median([getattr(r, field) for r in (report.gpu.rows if report.gpu else [])
                                     if r.node == node and getattr(r, field) is not None])

    def ddp(node: str) -> float | None:
        return _median([r.ddp_throughput for r in (report.ddp.ranks if report.ddp else []) if r.node == node])

    metrics: list[tuple[str, Callable[[str], float | None]]] = [
        ("all_reduce busbw\nin the node (GB/s)", busbw),
        ("GEMM TFLOP/s\n(median GPU)", gpu_median("gemm_tflops")),
        ("HBM copy GB/s\n(median GPU)", gpu_median("hbm_gbps")),
        (f"DDP {unit or 'samples/s'}\nper GPU (median rank)", ddp),
    ]
    return nodes, [label for label, _ in metrics], [[fn(node) for _, fn in metrics] for node in nodes]


def heatmap_rows(report: Report) -> tuple[list[str], list[str], list[list[float | None]], list[list[float]], int]:
    """The heatmap's nodes, labels, values and ratios to the median node, and how many nodes there are in all.

    Over HEATMAP_MAX_NODES nodes it keeps the failed ones first, then those furthest under the median
    (a missing value counts as lowest), so the page stays readable at a thousand nodes.
    """
    nodes, labels, values = node_metrics(report)
    medians = [_median([row[j] for row in values if row[j] is not None]) for j in range(len(labels))]
    ratios = [[v / medians[j] if v is not None and medians[j] else float("nan") for j, v in enumerate(row)]
              for row in values]
    order = list(range(len(nodes)))
    if len(nodes) > HEATMAP_MAX_NODES:
        def lowest(i: int) -> tuple[bool, float]:
            finite = [r for r in ratios[i] if r == r]  # NaN != NaN: a missing value
            return nodes[i] not in report.failed_nodes, min(finite) if len(finite) == len(labels) else 0.0
        order = sorted(sorted(order, key=lowest)[:HEATMAP_MAX_NODES])
    return ([nodes[i] for i in order], labels, [values[i] for i in order], [ratios[i] for i in order], len(nodes))


def heatmap_figure(plt: Any, report: Report) -> str:
    """Nodes x metrics, coloured by each value's ratio to the metric's median node (a slow node stands out)."""
    import numpy as np

    nodes, labels, values, ratios, total = heatmap_rows(report)
    fig, ax = plt.subplots(figsize=(1.6 * len(labels) + 2, 0.35 * len(nodes) + 1.2))
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="0.85")
    image = ax.imshow(np.ma.masked_invalid(np.array(ratios, dtype=float)), cmap=cmap, vmin=0.8, vmax=1.2,
                      aspect="auto")
    ax.set_xticks(range(len(labels)), labels=labels, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(nodes)), labels=[n + (" (failed)" if n in report.failed_nodes else "") for n in nodes],
                  fontsize=8)
    for tick, node in zip(ax.get_yticklabels(), nodes, strict=True):
        if node in report.failed_nodes:
            tick.set_color("tab:red")
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            text = "missing" if v is None else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
            dark = ratios[i][j] == ratios[i][j] and abs(ratios[i][j] - 1) > 0.15  # NaN != NaN: grey, not dark
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    if total > len(nodes):
        ax.set_xlabel(f"{len(nodes)} of {total} nodes: the failed ones, then the lowest against the median",
                      fontsize=8)
    fig.colorbar(image, ax=ax, label="ratio to the median node", shrink=min(0.8, 3.0 / (0.35 * len(nodes) + 1.2)))
    return _svg(plt, fig, "heatmap")


def ddp_figure(plt: Any, report: Report) -> str:
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
    return _svg(plt, fig, "ddp")


# --- page --------------------------------------------------------------------------------------------------------

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
.verdict{font-size:1.4em;font-weight:bold;padding:.6em 1em;border-radius:6px;color:#fff}
.passed{background:#2e7d32}.failed{background:#c62828}.smoke{background:#f9a825;color:#000;padding:.4em 1em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .5em;
text-align:left;vertical-align:top}th{background:#f4f4f4}tr.fail td{background:#fdecea}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}.plots figure svg{width:100%}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:1em}.muted{color:#666;font-size:.85em}
"""


def _value(r: CheckResult) -> str:
    if r.value is None:
        return "missing"
    return human_bytes(r.value) if r.unit == "bytes" else f"{r.value:,.4g}"


def results_table(results: list[CheckResult]) -> str:
    head = "<tr><th>result</th><th>check</th><th>measurement</th><th>node</th><th>GPU</th><th>value</th>" \
           "<th>threshold</th><th>unit</th><th>detail</th></tr>"
    rows = [f'<tr class="{"pass" if r.passed else "fail"}"><td>{"pass" if r.passed else "FAIL"}</td>'
            f"<td>{_e(r.check)}</td><td>{_e(r.name)}</td><td>{_e(r.node or '-')}</td>"
            f"<td>{'-' if r.gpu is None else r.gpu}</td><td>{_e(_value(r))}</td><td>{_threshold(r)}</td>"
            f"<td>{_e(r.unit)}</td><td>{_e(r.message)}</td></tr>" for r in results]
    return f"<table>{head}{''.join(rows)}</table>"


def _passed_section(report: Report) -> str:
    """Passed results folded per measurement (count, nodes, range); each one too where there are not many."""
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for r in report.results:
        if r.passed:
            groups.setdefault((r.check, r.name), []).append(r)
    rows = []
    for (check, name), group in groups.items():
        values = [r.value for r in group if r.value is not None]
        shown = [_value(r.model_copy(update={"value": v})) for v in (min(values), max(values))] if values else []
        span = " .. ".join(dict.fromkeys(shown))  # one value when min == max
        nodes = len({r.node for r in group if r.node})
        rows.append(f"<tr><td>{_e(check)}</td><td>{_e(name)}</td><td>{len(group)}</td><td>{nodes or '-'}</td>"
                    f"<td>{_e(span)}</td><td>{_threshold(group[0])}</td><td>{_e(group[0].unit)}</td></tr>")
    passed = sum(len(g) for g in groups.values())
    out = (f"<h2>Passed results ({passed}), per measurement</h2><table><tr><th>check</th><th>measurement</th>"
           f"<th>results</th><th>nodes</th><th>values</th><th>threshold</th><th>unit</th></tr>{''.join(rows)}</table>")
    if len(report.results) <= FULL_TABLE_MAX:
        out += (f"<details><summary>Every result ({len(report.results)})</summary>"
                f"{results_table(report.results)}</details>")
    return out


def _verdict_section(report: Report, title: str, operator_verdict: str | None) -> str:
    passed = report.verdict()
    parts = [f"<h1>{_e(title)}</h1>"]
    if report.mode == "cpu-smoke":
        parts.append(f'<p class="smoke">{_e(CPU_BANNER)}</p>')
    parts.append(f'<div id="verdict" class="verdict {"passed" if passed else "failed"}">'
                 f"{_e(verdict_line(report))}</div>")
    if operator_verdict:
        parts.append(f'<p id="operator-verdict">{_e(operator_verdict)}</p>')
    nodes = ", ".join(report.failed_nodes) or "none"
    parts.append(f'<p id="failed-nodes"><b>Failed nodes:</b> {_e(nodes)}</p>')
    missing = report.missing_checks()
    if missing:
        parts.append(f"<p><b>No result at all from</b> {_e(', '.join(missing))} (fails).</p>")
    if report.error:
        parts.append(f"<p><b>The run could not complete:</b> {_e(report.error)}</p>")
    failures = [r for r in report.results if not r.passed]
    if failures:
        parts.append(f'<h2>Failures ({len(failures)})</h2><div id="failures">{results_table(failures)}</div>')
    for e in report.stage_errors:  # stage_error results: the traceback is their evidence
        parts.append(f'<details class="stage-error"><summary>Traceback of rank {e.rank} (node {_e(e.node)}, GPU '
                     f"{e.gpu}) in stage {_e(e.check)}: {_e(e.error)}</summary><pre>{_e(e.traceback)}</pre></details>")
    head = report.headline().parts()
    if head:
        parts.append(f"<p><b>Headline:</b> {_e('; '.join(head))}</p>")
    env = report.environment
    facts = [f"{k} {v}" for k, v in (("GPU", env.gpu_model), ("driver", env.driver_version),
                                      ("CUDA", env.cuda_version), ("NCCL", env.nccl_version),
                                      ("torch", env.torch_version), ("nodes", env.nodes),
                                      ("world size", env.world_size)) if v]
    if env.transports:
        facts.append("transports " + ",".join(env.transports))
    times = [f"{label} {t.isoformat(timespec='seconds')}" for label, t in (("started", report.started_at),
                                                                          ("finished", report.finished_at)) if t]
    parts.append(f'<p class="muted">{_e("; ".join(facts + times))}</p>')
    return "\n".join(parts)


def _nccl_section(plt: Any, report: Report, problems: list[str] | None = None) -> str:
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


def _sweep_tables(report: Report) -> str:
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


def render_html(report: Report, title: str = "GPU acceptance report", operator_verdict: str | None = None,
                problems: list[str] | None = None) -> str:
    """The whole page. `operator_verdict` is the operator's phase, reason and message, for a cluster run.

    Every part after the verdict is drawn on its own (part()): one that fails is a sentence on the page, and a
    line in `problems` when a list is given."""
    plt = pyplot()
    body = [_verdict_section(report, title, operator_verdict),
            part(problems, "the NCCL plots", lambda: _nccl_section(plt, report, problems)),
            part(problems, "the localisation section", lambda: localization_section(report))]
    nodes, _, _ = node_metrics(report)
    if nodes:
        heatmap = part(problems, "the node heatmap", lambda: heatmap_figure(plt, report))
        body.append(f'<h2>Nodes</h2><figure id="{HEATMAP_ID}" class="plot">{heatmap}'
                    "<figcaption>Each node's numbers, coloured by their ratio to the median node; grey: not "
                    "measured.</figcaption></figure>")
    if report.ddp and report.ddp.ranks:
        ddp = part(problems, "the DDP plot", lambda: ddp_figure(plt, report))
        body.append(f'<h2>DDP</h2><figure id="{DDP_PLOT_ID}" class="plot">{ddp}</figure>')
    body.append(part(problems, "the soak section", lambda: soak_section(report)))
    body.append(part(problems, "the passed results", lambda: _passed_section(report)))
    body.append(part(problems, "the nodes' facts", lambda: nodes_section(report)))
    if report.skipped:
        items = "".join(f"<li>{_e(s.check)} {_e(s.name)}: {_e(s.reason)}</li>" for s in report.skipped)
        body.append(f"<h2>Not measured</h2><ul>{items}</ul>")
    body.append(part(problems, "the NCCL sweep tables", lambda: _sweep_tables(report)))
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n")
    return _strip_svg_metadata(page)


def _strip_svg_metadata(page: str) -> str:
    """matplotlib's RDF metadata block: namespaces and a generator line, nothing a reader needs."""
    return re.sub(r"<metadata>.*?</metadata>", "", page, flags=re.S)
