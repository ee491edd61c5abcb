"""checks.signals' part of the reports: per node, a grid of its GPUs and RDMA ports against the signals (what moved,
the XIDs, what was skipped), as a text table and an HTML section, and the same lines in its JUnit suite's output."""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks.signals.details import SignalsDetail, SignalsGpu, SignalsNode, SignalsPort
from acceptance_workload.report.html_base import escape
from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.parts import ReportParts
from acceptance_workload.report.render import table

SIGNALS_ID = "signals"
BAD = ' class="bad" style="background:#f8d7da"'  # a row with a failed signal


def _detail(report: ReportBase) -> SignalsDetail | None:
    d = getattr(report, "signals", None)
    return d if d is not None and d.nodes else None


def _failed(report: ReportBase) -> set[tuple[str | None, int | None, str | None]]:
    """(node, gpu, port) of every failed signals result."""
    return {(r.node, r.gpu, r.observed if r.gpu is None else None) for r in report.results
            if r.check == "signals" and not r.passed}


def gpu_cells(g: SignalsGpu) -> tuple[str, str, str]:
    """(XIDs, what moved, what was skipped) of one GPU."""
    x = ", ".join(f"{x.code}@{x.stage}" + ("" if x.fails else " (app)") for x in g.xids) or "none"
    moved = ", ".join(f"{k} +{v:g}" for k, v in g.moved.items()) or ("unchanged" if g.read else "-")
    return x, moved, ", ".join(sorted(g.skipped)) or "-"


def port_cells(p: SignalsPort) -> tuple[str, str, str]:
    state = f"{p.state}/{p.phys_state}" + (f" {p.rate}" if p.rate else "")
    moved = ", ".join(f"{k} +{v:g}" for k, v in p.moved.items()) or "unchanged"
    return state, moved, p.problem or "-"


def _port(p: SignalsPort) -> str:
    return f"{p.device} port {p.port}" + (f" ({p.netdev})" if p.netdev else "")


def rows(n: SignalsNode) -> list[list[str]]:
    out = [[f"GPU {g.gpu}", *gpu_cells(g)] for g in n.gpus]
    return out + [[_port(p), *port_cells(p)] for p in n.ports]


def signals_table(report: ReportBase) -> str:
    d = _detail(report)
    if d is None:
        return ""
    out = [f"# signals: watched {d.seconds:.0f} s, from the preflight's start to the last check's end"]
    for n in d.nodes:
        out.append(f"{n.node}:\n" + table([["", "XIDs / port state", "moved", "skipped / problem"], *rows(n)]))
    return "\n".join(out)


def signals_section(plt: Any, report: ReportBase, problems: list[str] | None) -> str:
    """A grid per node: a row per GPU and RDMA port, the signals that moved; red where a signal failed."""
    d = _detail(report)
    if d is None:
        return ""
    failed = _failed(report)
    parts = [f'<h2 id="{SIGNALS_ID}">Signals</h2><p class="muted">Watched {d.seconds:.0f} s, from the preflight\'s '
             "start to the last check's end: XIDs (code@stage), the counters that grew, the fabric, the RDMA ports; "
             "red: a signal of that row failed.</p>"]
    for n in d.nodes:
        body = []
        for g in n.gpus:
            bad = (n.node, g.gpu, None) in failed
            cells = "".join(f"<td>{escape(c)}</td>" for c in (*gpu_cells(g), g.fabric or "-"))
            body.append(f"<tr{BAD if bad else ''}><th>GPU {g.gpu}</th>{cells}</tr>")
        for p in n.ports:
            bad = (n.node, None, _port(p)) in failed
            state, moved, problem = port_cells(p)
            cells = "".join(f"<td>{escape(c)}</td>" for c in (state, moved, problem, "-"))
            body.append(f"<tr{BAD if bad else ''}><th>{escape(_port(p))}</th>{cells}</tr>")
        parts.append(f'<h3>{escape(n.node)}</h3><table class="signals"><tr><th></th><th>XIDs / port state</th>'
                     f"<th>moved</th><th>skipped / problem</th><th>fabric</th></tr>{''.join(body)}</table>")
    return "".join(parts)


def signals_junit(report: ReportBase) -> str | None:
    return signals_table(report) or None


PARTS = ReportParts(text=signals_table, html_sections=signals_section, junit_out=signals_junit)
