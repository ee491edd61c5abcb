"""The report for people, what every check shares: the verdict table, the nodes' facts, the values and thresholds
as text, a table's layout, and the termination message's summary. Each check's own tables are in its package
(checks/<name>/parts.py); writers/text.py puts the whole text report together.

Failed results are listed one by one (they name node and GPU); passed ones are
folded per measurement so an 8 x 8 GPU cluster's report still fits a screen.
"""

from __future__ import annotations

from collections import defaultdict

from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.wire import format_bytes
from acceptance_workload.report.model import ReportBase

CPU_BANNER = "CPU SMOKE RUN (gloo on CPU, tiny sizes): NOT a GPU acceptance verdict"
TERMINATION_LOG_LIMIT = 4000  # Kubernetes keeps 4096 bytes of a termination message


def human_bytes(n: float) -> str:
    """1536 -> '1.5Ki', 25276502016 -> '23.5Gi' (format_bytes is exact, this is for reading)."""
    for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if abs(n) >= factor:
            return f"{n / factor:.4g}{suffix}"
    return f"{n:.0f}"


def value_text(r: CheckResult) -> str:
    """The value as the tables show it ('328.2', '23.5Gi', 'missing')."""
    if r.value is None:
        return "missing"
    if r.unit == "bytes":
        return human_bytes(r.value)
    if r.unit == "" and r.observed:  # a yes/no item: what was seen says more than 1 or 0
        return r.observed
    v = r.value
    return f"{v:.0f}" if v == int(v) and abs(v) < 1e15 else f"{v:.4g}" if abs(v) < 100 else f"{v:,.1f}"


def threshold_text(r: CheckResult) -> str:
    """'>= 340', '>= 299 (est.)', '' when not judged."""
    if r.threshold is None or r.comparison == "info":
        return ""
    sign = {"ge": ">=", "le": "<=", "eq": "=="}[r.comparison]
    t = format_bytes(int(r.threshold)) if r.unit == "bytes" else f"{r.threshold:g}"
    return f"{sign} {t}" + (" (est.)" if r.estimated else "")


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def verdict_table(report: ReportBase) -> str:
    lines = []
    if report.mode == "cpu-smoke":
        lines += [f"*** {CPU_BANNER} ***", ""]
    rows = [["RESULT", "CHECK", "MEASUREMENT", "NODE", "GPU", "VALUE", "THRESHOLD", "UNIT", "DETAIL"]]
    for r in report.results:
        if not r.passed:
            rows.append(["FAIL", r.check, r.name, r.node or "-", "-" if r.gpu is None else str(r.gpu), value_text(r),
                         threshold_text(r), r.unit, r.message])
    folded: dict[tuple[str, str], list[CheckResult]] = defaultdict(list)
    for r in report.results:
        if r.passed:
            folded[(r.check, r.name)].append(r)
    for (check, name), group in folded.items():
        values = [r.value for r in group if r.value is not None]
        first = group[0]
        if len(group) == 1:
            value, detail, node = value_text(first), first.message, first.node or "-"
        else:
            low, high = min(values), max(values)
            value = value_text(first.model_copy(update={"value": low}))
            if high != low:
                value += ".." + value_text(first.model_copy(update={"value": high}))
            nodes = {r.node for r in group if r.node}
            detail, node = f"{len(group)} measurements passed", f"{len(nodes)} nodes" if len(nodes) > 1 else (
                next(iter(nodes)) if nodes else "-")
        rows.append(["pass", check, name, node, "-" if first.gpu is None or len(group) > 1 else str(first.gpu),
                     value, threshold_text(first), first.unit, detail])
    lines.append(table(rows))
    for s in report.skipped:
        lines.append(f"skipped  {s.check} {s.name}: {s.reason}")
    missing = report.missing_checks()
    if missing:
        lines.append(f"missing  no result at all from: {', '.join(missing)} (fails)")
    if report.error:
        lines.append(f"ERROR    {report.error}")
    env = report.environment
    facts = [f"{k}={v}" for k, v in (("gpu", env.gpu_model), ("driver", env.driver_version), ("cuda", env.cuda_version),
                                     ("nccl", env.nccl_version), ("torch", env.torch_version)) if v]
    if env.transports:
        facts.append("transports=" + ",".join(env.transports))
    if facts:
        lines.append("environment  " + " ".join(facts))
    head = report.headline().parts()
    if head:
        lines.append("headline     " + "; ".join(head))
    lines.append("")
    lines.append("VERDICT: " + verdict_line(report, " (CPU smoke run)" if report.mode == "cpu-smoke" else "")
                 + (f"; failed nodes: {', '.join(report.failed_nodes)}" if report.failed_nodes else ""))
    return "\n".join(lines)


def verdict_line(report: ReportBase, label: str = "") -> str:
    """'FAILED: 1/2 checks passed': the verdict and the report's own tally (the operator's summary counts)."""
    t = report.tally()
    return f"{'PASSED' if report.verdict() else 'FAILED'}{label}: {t.passed}/{t.total} checks passed"


def nodes_table(report: ReportBase) -> str:
    """Each node's versions and adapters, each GPU as a technician finds it, and the host's load by stage."""
    if not report.nodes:
        return ""
    rows = [["NODE", "DRIVER", "CUDA", "NCCL", "ADAPTERS (firmware)"]]
    gpus = [["NODE", "GPU", "SERIAL", "BUS ID", "UUID", "VBIOS", "INFOROM"]]
    loads = [["NODE", "STAGE", "SECONDS", "CPUS", "BUSY", "OUTSIDE", "STEAL", "LOAD", "SATURATED", "BUSIEST OUTSIDE"]]
    for n in report.nodes:
        nics = ", ".join(f"{a.name} {a.firmware}" if a.firmware else a.name for a in n.nics)
        rows.append([n.node, n.driver_version or "-", n.cuda_version or "-", n.nccl_version or "-", nics or "-"])
        gpus += [[n.node, str(g.gpu), g.serial or "-", g.bus_id or "-", g.uuid or "-", g.vbios or "-", g.inforom or "-"]
                 for g in n.gpus]
        loads += [[n.node, h.stage, f"{h.seconds:.1f}", f"{h.cpus:g}", f"{h.busy:.0%}", f"{h.outside:.0%}",
                   f"{h.steal:.0%}", "-" if h.load1 is None else f"{h.load1:.1f}", "YES" if h.saturated else "no",
                   ", ".join(f"{p.pid} {p.command} ({p.cpus:.1f})" for p in h.busiest[:3]) or "-"]
                  for h in n.host_load]
    parts = ["# nodes: versions and network adapters\n" + table(rows)]
    if len(gpus) > 1:
        parts.append("# GPUs as a technician finds them\n" + table(gpus))
    if len(loads) > 1:
        parts.append("# host load: the CPUs the run may use, and the share used outside the run\n" + table(loads))
    return "\n\n".join(parts)


def summary(report: ReportBase) -> str:
    """A few lines for the container's termination message (kubectl describe pod shows it)."""
    failed = [r for r in report.results if not r.passed]
    head = verdict_line(report)
    if report.mode == "cpu-smoke":
        head = "CPU SMOKE RUN " + head
    lines = [head, *report.headline().parts()]
    missing = report.missing_checks()
    if missing:
        lines.append(f"missing: no result at all from {', '.join(missing)}")
    if report.error:
        lines.append(f"error: {report.error}")
    if report.failed_nodes:
        lines.append("failed nodes: " + ", ".join(report.failed_nodes))
    for r in failed[:10]:
        where = f" [{r.node}" + (f" gpu {r.gpu}" if r.gpu is not None else "") + "]" if r.node else ""
        lines.append(f"FAIL {r.check}/{r.name}{where}: {r.message}")
    if len(failed) > 10:
        lines.append(f"... and {len(failed) - 10} more failures (see status.report)")
    text = "\n".join(lines)
    return text if len(text) <= TERMINATION_LOG_LIMIT else text[: TERMINATION_LOG_LIMIT - 4] + "\n..."
