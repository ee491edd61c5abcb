"""checks.nccl's part of the reports: the sweeps as nccl-tests prints them and the localisation's groups (text,
and the JUnit nccl suite's output: the evidence behind each node's inter_node_busbw testcase); the HTML page's
busbw and latency plots, localisation section and sweep tables (checks/nccl/html.py)."""

from __future__ import annotations

import statistics

from acceptance_workload.checks.nccl import html, localize
from acceptance_workload.report.model import NcclSweep, ReportBase
from acceptance_workload.report.parts import ReportParts
from acceptance_workload.report.render import human_bytes, table


def nccl_table(sweep: NcclSweep) -> str:
    """The sweep as nccl-tests prints it (out-of-place columns)."""
    where = f"node {sweep.node}" if sweep.scope == "node" else "job"
    short = {"float32": "float", "bfloat16": "bfloat16", "float16": "half"}.get(sweep.dtype, sweep.dtype)
    lines = [
        f"# {sweep.collective} ({where}, {sweep.ranks} ranks, {sweep.dtype})",
        f"#{'size':>12} {'count':>12} {'type':>8} {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}",
        f"#{'(B)':>12} {'(elements)':>12} {'':>8} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}",
    ]
    for r in sweep.rows:
        lines.append(f" {r.size:>12} {r.count:>12} {short:>8} {r.time_us:>10.2f} {r.algbw_gbps:>8.2f} "
                     f"{r.busbw_gbps:>8.2f} {r.wrong:>7}")
    if sweep.rows:
        lines.append(f"# Avg bus bandwidth    : {statistics.fmean(r.busbw_gbps for r in sweep.rows):.3f}")
    return "\n".join(lines)


def localization_table(report: ReportBase) -> str:
    """The localisation stage: every group it measured, round by round, beside what it was compared with.

    The named nodes are marked; a report cut to some nodes (`report NAME --node N`) keeps their groups.
    """
    d = report.localization
    if d is None:
        return ""
    named, judged = localize.named_and_judged(report.results)
    rows = [["ROUND", "KIND", "NODES", "BUSBW (GB/s)", "COMPARED WITH", "RATIO", "TIME (us)", "NAMED"]]
    for v in localize.group_views(d, named):
        p = v.row
        if judged and not judged & set(p.nodes):
            continue
        nodes = ", ".join(p.nodes[:4]) + (f" +{len(p.nodes) - 4}" if len(p.nodes) > 4 else "")
        ratio = localize.ratio_of(p.busbw_gbps, v.reference)
        against = "-" if v.reference is None else f"{v.reference:.4g} " + ("median" if p.kind == "pair" else "half")
        rows.append([str(p.round), p.kind, nodes, "-" if p.busbw_gbps is None else f"{p.busbw_gbps:.4g}", against,
                     "-" if ratio is None else f"{ratio:.2f}", "-" if p.time_us is None else f"{p.time_us:.1f}",
                     ", ".join(v.named)])
    judged_by = [f"below {d.ratio:g} of the other nodes' median" if d.ratio is not None else "",
                 f"below the floor {d.floor_gbps:g} GB/s" if d.floor_gbps is not None else ""]
    rule = " or ".join(j for j in judged_by if j) or "not judged (no ratio, no floor)"
    head = (f"# localize: {d.rounds} round(s) in {d.seconds:.1f}s, all_reduce {human_bytes(d.bytes)} per group; "
            f"a node's best pair {rule} names it (median: of the nodes' best pairs; half: the other half)")
    return head + "\n" + table(rows)


def nccl_text(report: ReportBase) -> str:
    """Every sweep, then the localisation's groups."""
    parts = [nccl_table(s) for s in report.nccl]
    if report.localization:
        parts.append(localization_table(report))
    return "\n\n".join(parts)


def junit_out(report: ReportBase) -> str | None:
    return localization_table(report) if report.localization is not None else None


PARTS = ReportParts(text=nccl_text, html_plots=html.plots, html_tables=html.tables, junit_out=junit_out)
