"""checks.p2p's part of the reports: each node's matrix as a compact text table and an HTML heat map (a pair's copy
against the median of its node's pairs of the same path), and one JUnit testcase per GPU."""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks.p2p.details import P2pNode
from acceptance_workload.checks.p2p.judge import pair_ratios
from acceptance_workload.report.html_base import escape
from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.parts import ReportParts
from acceptance_workload.report.render import human_bytes, table

P2P_ID = "p2p"


def _paths(n: P2pNode) -> str:
    seen: dict[str, int] = {}
    for p in n.pairs:
        key = p.path + (f" x{p.links}" if p.links else "")
        seen[key] = seen.get(key, 0) + 1
    return ", ".join(f"{k} ({v} pairs)" for k, v in sorted(seen.items()))


def p2p_table(report: ReportBase) -> str:
    """Per node, GB/s one way from each GPU (rows) to each GPU (columns); '!' where the pair failed to measure."""
    d = getattr(report, "p2p", None)
    if d is None or not any(n.pairs for n in d.nodes):
        return ""
    out = [f"# p2p: {human_bytes(d.bytes)}B copies between a node's GPUs, GB/s one way (from row to column)"]
    for n in (n for n in d.nodes if n.pairs):
        cells = {(p.src, p.dst): p for p in n.pairs}
        rows = [["", *(f"->{j}" for j in range(n.gpus))]]
        for i in range(n.gpus):
            rows.append([f"GPU {i}", *("-" if i == j else _cell(cells.get((i, j))) for j in range(n.gpus))])
        out.append(f"{n.node}: {_paths(n)}\n{table(rows)}")
    return "\n".join(out)


def _cell(p: Any) -> str:
    if p is None or p.copy_gbps is None:
        return "!"
    return f"{p.copy_gbps:.4g}"


def _color(ratio: float | None) -> str:
    """Red below half the path's median, through yellow, to green at the median and above."""
    if ratio is None:
        return "#b00020"
    x = max(0.0, min(1.0, (ratio - 0.5) / 0.5))
    return f"hsl({int(120 * x)}, 70%, 80%)"


def p2p_section(plt: Any, report: ReportBase, problems: list[str] | None) -> str:
    """The heat map of every node: a cell per ordered pair, its colour the pair's ratio to its path's median."""
    d = getattr(report, "p2p", None)
    if d is None or not any(n.pairs for n in d.nodes):
        return ""
    parts = [f'<h2 id="{P2P_ID}">GPU pairs</h2><p class="muted">{escape(human_bytes(d.bytes))}B copies, '
             f"{d.iters} timed each way; a cell is GB/s from its row's GPU to its column's, coloured by the pair "
             "against the median of its node's pairs of the same path (red: half or less, or not measured).</p>"]
    for n in (n for n in d.nodes if n.pairs):
        ratios, cells = pair_ratios(n), {(p.src, p.dst): p for p in n.pairs}
        head = "".join(f"<th>{j}</th>" for j in range(n.gpus))
        body = []
        for i in range(n.gpus):
            row = []
            for j in range(n.gpus):
                p = cells.get((i, j))
                if i == j or p is None:
                    row.append("<td></td>")
                    continue
                tip = escape(f"{p.path}{f' x{p.links}' if p.links else ''}: " + (
                    f"{p.copy_gbps} GB/s one way, {p.bidir_gbps} both ways, {p.latency_us} us"
                    if p.error is None else p.error))
                row.append(f'<td title="{tip}" style="background:{_color(ratios.get((i, j)))}">{_cell(p)}</td>')
            body.append(f"<tr><th>{i}</th>{''.join(row)}</tr>")
        parts.append(f"<h3>{escape(n.node)}</h3><p class=\"muted\">{escape(_paths(n))}</p>"
                     f'<table class="p2p"><tr><th></th>{head}</tr>{"".join(body)}</table>')
    return "".join(parts)


PARTS = ReportParts(text=p2p_table, html_sections=p2p_section, junit_per_gpu=True)
