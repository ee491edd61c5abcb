"""checks.p2p's stage: every node's GPU pairs measured (measure.py) where the node's ranks are, gathered to rank 0,
and judged there per node (judge.py)."""

from __future__ import annotations

import os
import statistics
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.p2p import judge, measure
from acceptance_workload.checks.p2p.details import P2pDetail, P2pNode, P2pPair
from acceptance_workload.checks.p2p.paths import UNKNOWN, node_paths
from acceptance_workload.contract.rules import Run
from acceptance_workload.contract.wire import parse_bytes
from acceptance_workload.report.model import Skip
from acceptance_workload.runtime.gpus import nvml_target

if TYPE_CHECKING:
    from acceptance_workload.contract.results import CheckResult
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog

GLOO = "gloo"  # the path of a CPU run's pairs: two processes over gloo
ONE_GPU = "one GPU a node: there is no pair of GPUs to copy between"


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    runner.report.p2p = runner.run_stage(  # type: ignore[attr-defined]
        session, "p2p", "p2p: copies between every pair of a node's GPUs, one way and both ways at once, and a "
        "small copy's latency", lambda: run_p2p(runner, session, watchdog))


def node_ranks(session: Session) -> dict[str, list[int]]:
    """Each node's ranks, in the order of their GPUs (a rank's place is its GPU's index on the node)."""
    out: dict[str, list[int]] = {}
    for info in sorted(session.ranks, key=lambda i: (i.node, i.gpu)):
        out.setdefault(info.node, []).append(info.rank)
    return out


def run_p2p(runner: StageRunner, session: Session,
            watchdog: Watchdog) -> tuple[list[CheckResult], list[Skip], P2pDetail] | None:
    """Measure where the ranks are, judge on rank 0: (results, skips, detail) there, None elsewhere."""
    check = runner.config.checks.p2p  # type: ignore[attr-defined]
    nodes = node_ranks(session)
    mine = next(ranks for ranks in nodes.values() if session.rank in ranks)
    entries: list[measure.Entry] = []
    paths: dict[tuple[int, int], tuple[str, int | None]] = {}
    if max(map(len, nodes.values())) > 1:  # every rank takes every turn, whatever its node's size
        session.control.allgather("p2p start", None)
        if session.device.type != "cuda":
            entries = measure.cpu_pairs(session, check, watchdog, nodes)
        elif session.rank == mine[0] and len(mine) > 1:  # one process of the node copies between all its GPUs
            paths = node_paths([nvml_target(k, os.environ) for k in range(len(mine))])
            entries = measure.gpu_pairs(check, list(range(len(mine))), watchdog)
    gathered = session.control.gather("p2p", {"node": session.env.node, "entries": entries,
                                              "paths": [[i, j, p, n] for (i, j), (p, n) in paths.items()]})
    if gathered is None:
        return None
    detail = P2pDetail(bytes=parse_bytes(check.bytes), iters=check.iters, latency_iters=check.latency_iters,
                       nodes=matrices(nodes, gathered, cpu=session.device.type != "cuda"))
    run, report = Run.of(runner.config), runner.report
    results = [r for n in detail.nodes for r in judge.judge_node(
        n, check.thresholds, run, lambda g, node=n.node: _identity(report, node, g),
        estimated=runner.config.estimated_thresholds)]
    skipped = [Skip(check="p2p", name="p2p", reason=ONE_GPU)] if max(map(len, nodes.values())) < 2 else []
    runner.progress("p2p: " + headline(detail))
    return results, skipped, detail


def matrices(nodes: dict[str, list[int]], gathered: list[Any], cpu: bool) -> list[P2pNode]:
    """Every node's pairs, each figure from whichever rank measured it; a pair nobody measured says so."""
    by_node: dict[str, dict[tuple[int, int], dict[str, Any]]] = {}
    for part in gathered:
        pairs = by_node.setdefault(part["node"], {})
        for i, j, path, links in part["paths"]:
            pairs.setdefault((i, j), {}).update(path=path, links=links)
        for e in part["entries"]:
            fields = {k: v for k, v in e.items() if k not in ("src", "dst")}
            if "error" in fields and pairs.get((e["src"], e["dst"]), {}).get("error"):
                fields["error"] = f"{pairs[(e['src'], e['dst'])]['error']}; {fields['error']}"
            pairs.setdefault((e["src"], e["dst"]), {}).update(fields)
    out = []
    for node, ranks in nodes.items():
        seen, n = by_node.get(node, {}), len(ranks)
        pairs = []
        for i in range(n):
            for j in (j for j in range(n) if j != i):
                f = {"path": GLOO if cpu else UNKNOWN, **seen.get((i, j), {})}
                if not any(k in f for k in ("copy_gbps", "bidir_gbps", "latency_us", "error")):
                    f["error"] = "not measured: no rank of the node reported this pair"
                pairs.append(P2pPair(src=i, dst=j, **f))
        out.append(P2pNode(node=node, gpus=n, pairs=pairs))
    return out


def _identity(report: Any, node: str, gpu: int) -> str:
    found = report.gpu_identity(node, gpu)
    return found.label() if found is not None else "serial unknown, bus unknown"


def headline(detail: P2pDetail) -> str:
    """Medians over every measured pair, for the progress line."""
    pairs = [p for n in detail.nodes for p in n.pairs if judge.measured(p)]
    if not pairs:
        return ONE_GPU if all(n.gpus < 2 for n in detail.nodes) else "no pair measured"
    copy, both, latency = (statistics.median(float(getattr(p, f)) for p in pairs)
                           for f in ("copy_gbps", "bidir_gbps", "latency_us"))
    return (f"{len(pairs)} pairs, median {copy:.4g} GB/s one way, {both:.4g} GB/s both ways, "
            f"{latency:.4g} us a small copy")
