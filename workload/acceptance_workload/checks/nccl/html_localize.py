"""The HTML report's localisation section: how the inter-node stage judged, each node beside the median of the
others' best pairs, every group round by round (checks/nccl/html.py places it after the NCCL plots)."""

from __future__ import annotations

from acceptance_workload.checks.nccl import localize
from acceptance_workload.report.html_base import escape as _e
from acceptance_workload.report.html_base import threshold as _threshold
from acceptance_workload.report.model import ReportBase
from acceptance_workload.report.render import human_bytes

LOCALIZE_NODES_MAX = 64  # more nodes than this: the named ones, then the lowest against the median
LOCALIZE_GROUPS_OPEN = 64  # more groups than this: the round-by-round table starts folded
LOCALIZATION_ID = "localization"


def _gbps(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _localization_nodes(report: ReportBase, named: set[str]) -> str:
    """One row per node the report judged: its best pair beside the median of the other nodes', the outlier marked."""
    d = report.localization
    assert d is not None
    results = {r.node: r for r in report.results if r.check == "nccl" and r.name == localize.RESULT and r.node}
    everyone = sorted({n for p in d.pairs for n in p.nodes} | set(results))
    judged = localize.judge_values(localize.node_values(d.pairs, everyone), d.ratio, d.floor_gbps)
    nodes = [n for n in everyone if n in results] or everyone

    def order(node: str) -> tuple[bool, float]:
        ratio = localize.ratio_of(judged[node].value, judged[node].reference)
        return node not in named, -1.0 if ratio is None else ratio
    shown = sorted(nodes, key=order)[:LOCALIZE_NODES_MAX]
    rows = []
    for node in shown:
        j, r = judged[node], results.get(node)
        pairs = ", ".join(f"with {next(m for m in p.nodes if m != node)} {_gbps(p.busbw_gbps)} (round {p.round})"
                          for p in d.pairs if p.kind == "pair" and node in p.nodes) or "in no pair"
        failed = node in named
        verdict = "FAIL: outlier" if failed else "pass"
        rows.append(f'<tr class="{"fail" if failed else "pass"}"><td>{_e(node)}</td><td>{_gbps(j.value)}</td>'
                    f"<td>{_gbps(j.reference)}</td><td>{_ratio(localize.ratio_of(j.value, j.reference))}</td>"
                    f"<td>{_threshold(r) if r else ''}</td><td>{verdict}</td><td>{_e(pairs)}</td></tr>")
    note = (f'<p class="muted">{len(shown)} of {len(nodes)} nodes: the named ones, then the lowest against the '
            "median.</p>") if len(nodes) > len(shown) else ""
    return (f'<table id="{LOCALIZATION_ID}-nodes"><tr><th>node</th><th>best pair (GB/s)</th>'
            "<th>median of the other nodes (GB/s)</th><th>ratio</th><th>threshold</th><th>result</th>"
            f"<th>pairs (GB/s)</th></tr>{''.join(rows)}</table>{note}")


def _localization_groups(report: ReportBase, named: set[str], nodes: set[str]) -> str:
    """Every group of the stage, round by round, beside what it was compared with; a group with an outlier marked."""
    d = report.localization
    assert d is not None
    views = [v for v in localize.group_views(d, named) if nodes & set(v.row.nodes)]
    rows = []
    for v in views:
        members = ", ".join(f"<b>{_e(n)} (outlier)</b>" if n in v.named else _e(n) for n in v.row.nodes[:8])
        if len(v.row.nodes) > 8:
            members += f" and {len(v.row.nodes) - 8} more"
        against = "the nodes' median" if v.row.kind == "pair" else "the other half"
        time_us = "-" if v.row.time_us is None else f"{v.row.time_us:,.1f}"
        rows.append(f'<tr class="{"fail" if v.slow else "pass"}"><td>{v.row.round}</td><td>{_e(v.row.kind)}</td>'
                    f"<td>{members}</td><td>{_gbps(v.row.busbw_gbps)}</td><td>{_gbps(v.reference)} ({against})</td>"
                    f"<td>{_ratio(localize.ratio_of(v.row.busbw_gbps, v.reference))}</td><td>{time_us}</td></tr>")
    table = (f'<table id="{LOCALIZATION_ID}-groups"><tr><th>round</th><th>kind</th><th>nodes</th>'
             "<th>busbw (GB/s)</th><th>compared with (GB/s)</th><th>ratio</th><th>time (us)</th></tr>"
             f"{''.join(rows)}</table>")
    opened = " open" if len(views) <= LOCALIZE_GROUPS_OPEN else ""
    return f"<details{opened}><summary>Groups, round by round ({len(views)})</summary>{table}</details>"


def localization_section(report: ReportBase) -> str:
    """The inter-node localisation stage: how it judged, each node beside the median, every group it measured."""
    d = report.localization
    if d is None:
        return ""
    named, judged = localize.named_and_judged(report.results)
    rule = [f"below {d.ratio:g} of the median of the other nodes' best pairs" if d.ratio is not None else "",
            f"below the floor {d.floor_gbps:g} GB/s" if d.floor_gbps is not None else ""]
    how = " or ".join(x for x in rule if x) or "not judged (no ratio, no floor)"
    head = (f'<h2 id="{LOCALIZATION_ID}">Localisation between nodes</h2><p class="muted">{d.rounds} round(s) in '
            f"{d.seconds:.1f} s, all_reduce {_e(human_bytes(d.bytes))}B per group (pairs of nodes; halves of a "
            f"bisection). A node whose best pair is {_e(how)} is named.</p>")
    nodes = judged or {n for p in d.pairs for n in p.nodes}
    return head + _localization_nodes(report, named) + _localization_groups(report, named, nodes)
