"""Small-message all_reduce latency, judged from the sweep's own rows (no extra collective runs).

At 8 B to 64 KiB an all_reduce moves almost nothing: its time per operation
(microseconds, out-of-place, as nccl-tests prints it) is the fabric's latency
plus NCCL's protocol steps. A node whose NVLink or NIC path is slow to start a
transfer (a link retraining, a proxy thread on a remote socket, a fallback to
sockets) shows here even when its large-message bandwidth passes.

Two results, like the busbw ones: `all_reduce_latency` over the job's sweep
(NVLink in one node, the network between nodes: allReduceLatencyUs) and
`node_all_reduce_latency` for each node's GPUs alone (NVLink:
nodeAllReduceLatencyUs), naming the node. The value is the largest time per
operation at any swept size in the window; a ceiling whose window the sweep
does not reach fails (fail closed).
"""

from __future__ import annotations

from collections.abc import Collection

from acceptance_workload.checks.nccl.rules import RULES
from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.wire import format_bytes
from acceptance_workload.report.model import NcclRow, NcclSweep

MIN_BYTES = 8
MAX_BYTES = 64 << 10
RESULT = "all_reduce_latency"
NODE_RESULT = "node_all_reduce_latency"
RESULTS = (RESULT, NODE_RESULT)


def window(rows: list[NcclRow]) -> list[NcclRow]:
    """The sweep's rows from 8 B to 64 KiB."""
    return [r for r in rows if MIN_BYTES <= r.size <= MAX_BYTES]


def latency_result(name: str, sweep: NcclSweep | None, threshold: float | None, node: str | None,
                   why_missing: str = "not measured") -> CheckResult | None:
    """The worst time in the window; None where nothing was measured and nothing is judged."""
    where = f"node {node}" if node else "the job"
    rows = window(sweep.rows) if sweep is not None else []
    if not rows and threshold is None:
        return None
    if not rows:
        why = why_missing if sweep is None else (
            f"the sweep has no size from {MIN_BYTES} B to {format_bytes(MAX_BYTES)}: lower checks.nccl.minBytes")
        return RULES.judged(name, None, threshold, node=node, message=f"all_reduce latency over {where}: {why}")
    worst = max(rows, key=lambda r: r.time_us)
    best = min(r.time_us for r in rows)
    passed = RULES.judged(name, worst.time_us, threshold).passed
    ranks = f"{sweep.ranks} ranks" if sweep is not None else ""
    msg = (f"all_reduce over {where} ({ranks}): {best:g}-{worst.time_us:g} us per operation from "
           f"{format_bytes(rows[0].size)} to {format_bytes(rows[-1].size)} bytes, worst at {format_bytes(worst.size)}")
    if threshold is not None:
        msg += f" <= {threshold:g}" if passed else f"; needs <= {threshold:g} us"
    return RULES.judged(name, worst.time_us, threshold, node=node, observed=format_bytes(worst.size),
                        message=msg)


def latency_results(check: NcclCheck, sweeps: list[NcclSweep], nodes: list[str],
                    skipped: dict[tuple[str, str | None], str]) -> list[CheckResult]:
    """Job-wide and per-node all_reduce latency (one node: its sweep is the job's, as for busbw)."""
    if "all_reduce" not in check.collectives:
        return []
    th = check.thresholds
    by_node = {s.node if s.scope == "node" else None: s for s in sweeps if s.collective == "all_reduce"}
    out = [latency_result(RESULT, by_node.get(None), RULES.threshold(RESULT, th), None,
                          skipped.get(("all_reduce", None), "not measured"))]
    if len(nodes) == 1 or check.per_node:  # perNode off: no node's sweep was asked for (the busbw results say so)
        for node in nodes:
            sweep = by_node.get(node) or (by_node.get(None) if len(nodes) == 1 else None)
            out.append(latency_result(NODE_RESULT, sweep, RULES.threshold(NODE_RESULT, th), node,
                                      skipped.get(("all_reduce", node), "not measured")))
    return [r for r in out if r is not None]


def required(check: NcclCheck, nodes: Collection[str]) -> list[tuple[str, str | None]]:
    """(name, node) of every latency result a ceiling asks for: missing from a report, each fails (nccl's required,
    which the host asks only of an enabled nccl)."""
    if "all_reduce" not in check.collectives:
        return []
    th = check.thresholds
    out: list[tuple[str, str | None]] = []
    if RULES.threshold(RESULT, th) is not None:
        out.append((RESULT, None))
    if RULES.threshold(NODE_RESULT, th) is not None and (check.per_node or len(nodes) == 1):
        out += [(NODE_RESULT, n) for n in sorted(nodes)]
    return out
