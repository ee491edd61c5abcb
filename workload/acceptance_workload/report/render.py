"""The report for people: the verdict table, nccl-tests-shaped sweep tables and a one-line summary.

Failed results are listed one by one (they name node and GPU); passed ones are
folded per measurement so an 8 x 8 GPU cluster's report still fits a screen.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from acceptance_workload.checks.nccl import localize
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.wire import format_bytes
from acceptance_workload.report.model import NcclSweep, Report

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


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def verdict_table(report: Report) -> str:
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
    lines.append(_table(rows))
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


def verdict_line(report: Report, label: str = "") -> str:
    """'FAILED: 1/2 checks passed': the verdict and the report's own tally (the operator's summary counts)."""
    t = report.tally()
    return f"{'PASSED' if report.verdict() else 'FAILED'}{label}: {t.passed}/{t.total} checks passed"


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


def ddp_table(report: Report) -> str:
    d = report.ddp
    if d is None:
        return ""
    rows = [["RANK", "NODE", "GPU", f"ONE-GPU ({d.unit})", f"DDP ({d.unit})"]]
    for r in d.ranks:
        rows.append([str(r.rank), r.node, str(r.gpu), f"{r.baseline_throughput:,.1f}", f"{r.ddp_throughput:,.1f}"])
    head = (f"# ddp {d.model}: {d.world_size} GPUs, batch {d.batch_size} per GPU, loss {d.first_loss} -> "
            f"{d.last_loss}")
    return head + "\n" + _table(rows)


def fsdp_table(report: Report) -> str:
    """checks.fsdp per rank: throughput alone and sharded, and peak memory against what sharding predicts."""
    d = report.fsdp
    if d is None:
        return ""

    def gib(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = [["RANK", "NODE", "GPU", "UNSHARDED (tok/s)", "FSDP (tok/s)", "NODE FSDP (tok/s)", "UNSHARDED PEAK (GiB)",
             "FSDP PEAK (GiB)", "PREDICTED (GiB)", "CHECKSUM"]]
    for r in d.ranks:
        rows.append([str(r.rank), r.node, str(r.gpu), f"{r.baseline_throughput:,.1f}", f"{r.fsdp_throughput:,.1f}",
                     "-" if r.node_throughput is None else f"{r.node_throughput:,.1f}",
                     gib(r.unsharded_peak_memory_gib), gib(r.peak_memory_gib), gib(r.predicted_memory_gib),
                     r.checksum or "-"])
    head = (f"# fsdp {d.model}: {d.parameters:,} parameters sharded over {d.shards} GPUs x {d.replicas} "
            f"replica(s), batch {d.batch_size} x {d.seq_len} per GPU, loss {d.first_loss} -> {d.last_loss}")
    return head + "\n" + _table(rows)


def storage_table(report: Report) -> str:
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
    return head + "\n" + _table(rows)


def gpu_table(report: Report) -> str:
    """Every GPU's per-GPU measurements, one row each (the medians of the windows)."""
    d = report.gpu
    if d is None:
        return ""
    rows = [["RANK", "NODE", "GPU", "GEMM (TFLOP/s)", "HBM (GB/s)", "H2D (GB/s)", "D2H (GB/s)", "SPREAD", "ERROR"]]
    for r in d.rows:
        cells = ["-" if v is None else f"{v:,.1f}" if v >= 100 else f"{v:.4g}"
                 for v in (r.gemm_tflops, r.hbm_gbps, r.h2d_gbps, r.d2h_gbps)]
        spread = "-" if r.spread is None else f"{r.spread:.1%}"
        rows.append([str(r.rank), r.node, str(r.gpu), *cells, spread, r.error or ""])
    head = (f"# gpu: GEMM {d.gemm_size}^3, HBM copy {human_bytes(d.hbm_bytes)}, host copies "
            f"{human_bytes(d.host_bytes)}; median of {d.windows} windows of {d.iters}")
    return head + "\n" + _table(rows)


def localization_table(report: Report) -> str:
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
    return head + "\n" + _table(rows)


def nodes_table(report: Report) -> str:
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
    parts = ["# nodes: versions and network adapters\n" + _table(rows)]
    if len(gpus) > 1:
        parts.append("# GPUs as a technician finds them\n" + _table(gpus))
    if len(loads) > 1:
        parts.append("# host load: the CPUs the run may use, and the share used outside the run\n" + _table(loads))
    return "\n\n".join(parts)


def full_text(report: Report) -> str:
    """The per-GPU table, sweep tables, localisation, DDP, FSDP, storage and the nodes' facts, then the verdict
    table (at the end)."""
    parts = [gpu_table(report)] if report.gpu else []
    parts += [nccl_table(s) for s in report.nccl]
    if report.localization:
        parts.append(localization_table(report))
    if report.ddp:
        parts.append(ddp_table(report))
    parts += [t for t in (fsdp_table(report), storage_table(report), nodes_table(report)) if t]
    parts.append(verdict_table(report))
    return "\n\n".join(parts) + "\n"


def summary(report: Report) -> str:
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
