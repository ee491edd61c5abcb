"""A report as one self-contained HTML page with plots (`--html FILE`), for people and vendors.

The page opens with the verdict and the nodes to blame, then shows what the
text tables cannot: each check's plots and sections (its parts, report/parts.py:
busbw against message size and the localisation from checks/nccl, the DDP
throughput per rank, the soak's GPUs) in the places the layout gives them, and
between them a node x metric heatmap (each node's median GPU, its all_reduce
busbw and its DDP throughput against the median node). Everything is inside
the file (the plots are matplotlib SVG, the style is inline), so nothing is
fetched when it is opened, also offline or in a ticket system.

Each part of the page (a plot, a section) is drawn on its own: a part that
fails is a sentence on the page saying why, and one line for the command to
print (`problems`); the page is written without it. An export never changes
the verdict (exports.py).

matplotlib is an optional extra, imported only when a page is made
(report/html_base.pyplot), so the workload image does not need it. What the
report means (verdict, tally, headline, failed nodes) comes from report/model.py,
never from here.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from typing import Any

from acceptance_workload.checks.registry import CHECKS
from acceptance_workload.checks.report_model import Report
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.html_base import escape as _e
from acceptance_workload.report.html_base import part, pyplot
from acceptance_workload.report.html_base import svg as _svg
from acceptance_workload.report.html_base import threshold as _threshold
from acceptance_workload.report.html_nodes import nodes_section
from acceptance_workload.report.render import CPU_BANNER, human_bytes, verdict_line

HEATMAP_ID = "plot-node-heatmap"
HEATMAP_MAX_NODES = 64  # more nodes than this: the heatmap shows the failed ones, then the lowest against the median
FULL_TABLE_MAX = 2000  # results listed one by one (folded per measurement above it; all are in --json and --junit)


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


def render_html(report: Report, title: str = "GPU acceptance report", operator_verdict: str | None = None,
                problems: list[str] | None = None) -> str:
    """The whole page. `operator_verdict` is the operator's phase, reason and message, for a cluster run.

    Every part after the verdict is drawn on its own (part()): one that fails is a sentence on the page, and a
    line in `problems` when a list is given."""
    plt = pyplot()

    def checks_parts(slot: str) -> list[str]:
        """Each check's part in this slot, drawn on its own: one that raises is a sentence, not a lost page."""
        what = {"html_plots": "plots", "html_sections": "section", "html_tables": "tables"}[slot]
        return [part(problems, f"the {c.name} check's {what}", lambda d=draw: d(plt, report, problems))
                for c in CHECKS if (draw := getattr(c.parts, slot))]

    body = [_verdict_section(report, title, operator_verdict), *checks_parts("html_plots")]
    nodes, _, _ = node_metrics(report)
    if nodes:
        heatmap = part(problems, "the node heatmap", lambda: heatmap_figure(plt, report))
        body.append(f'<h2>Nodes</h2><figure id="{HEATMAP_ID}" class="plot">{heatmap}'
                    "<figcaption>Each node's numbers, coloured by their ratio to the median node; grey: not "
                    "measured.</figcaption></figure>")
    body += checks_parts("html_sections")
    body.append(part(problems, "the passed results", lambda: _passed_section(report)))
    body.append(part(problems, "the nodes' facts", lambda: nodes_section(report)))
    if report.skipped:
        items = "".join(f"<li>{_e(s.check)} {_e(s.name)}: {_e(s.reason)}</li>" for s in report.skipped)
        body.append(f"<h2>Not measured</h2><ul>{items}</ul>")
    body += checks_parts("html_tables")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n")
    return _strip_svg_metadata(page)


def _strip_svg_metadata(page: str) -> str:
    """matplotlib's RDF metadata block: namespaces and a generator line, nothing a reader needs."""
    return re.sub(r"<metadata>.*?</metadata>", "", page, flags=re.S)
