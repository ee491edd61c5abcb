"""How a node's matrix of GPU pairs is judged (pure: the workload's judge, tested on recorded matrices).

Each GPU is judged by its pairs, its row and its column of the matrix (the median of every pair it copies from or
to): against the profile's floors, and against the node's median GPU. A GPU whose pairs are low is named as the GPU
(its serial and bus id); a pair that is low while neither of its GPUs is, is named as the pair, with both GPUs'
serials and bus ids, against the median of the node's pairs of the same path (an NVLink pair is not compared with
a PCIe one). Fail closed: a pair that could not be measured fails, and so does a node whose pairs are not all
measured (pairs_measured).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection

from acceptance_workload.checks.p2p.details import P2pNode, P2pPair
from acceptance_workload.checks.p2p.rules import PAIR, PAIRS, RATIO_METRICS, RATIO_SUFFIX, RULES
from acceptance_workload.checks.p2p.spec import P2pThresholds
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.rules import Run

FIGURES = {"copy_gbps": ("copy", "GB/s one way"), "bidir_gbps": ("both ways", "GB/s both ways at once"),
           "latency_us": ("latency", "us a 4-byte copy")}
Identity = Callable[[int], str]  # a GPU of the node -> "serial ..., bus ..."


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def measured(p: P2pPair) -> bool:
    return p.error is None and None not in (p.copy_gbps, p.bidir_gbps, p.latency_us)


def gpu_figures(node: P2pNode) -> dict[int, dict[str, float | None]]:
    """Each GPU's figures: the median over its measured pairs (its row and its column)."""
    out: dict[int, dict[str, float | None]] = {}
    for g in range(node.gpus):
        mine = [p for p in node.pairs if g in (p.src, p.dst) and measured(p)]
        out[g] = {f: _median([getattr(p, f) for p in mine]) for f in FIGURES}
    return out


def gpu_ratios(figures: dict[int, dict[str, float | None]]) -> dict[int, dict[str, float | None]]:
    """Each GPU's figure over its node's median GPU's (as the operator computes a GPU's ratio: rejudge._gpu_ratio)."""
    out: dict[int, dict[str, float | None]] = {g: {} for g in figures}
    for f in RATIO_METRICS:
        present = [v[f] for v in figures.values() if v[f] is not None and v[f] > 0]
        median = _median(present)  # type: ignore[arg-type]
        for g, v in figures.items():
            out[g][f] = None if v[f] is None or not median else round(v[f] / median, 4)
    return out


def pair_ratios(node: P2pNode) -> dict[tuple[int, int], float | None]:
    """Each pair's lower ratio (one way, both ways) to the median of the node's measured pairs of its path."""
    by_path: dict[str, list[P2pPair]] = {}
    for p in node.pairs:
        if measured(p):
            by_path.setdefault(p.path, []).append(p)
    out: dict[tuple[int, int], float | None] = {}
    for p in node.pairs:
        group = by_path.get(p.path, [])
        ratios = []
        for f in RATIO_METRICS:
            median = _median([getattr(q, f) for q in group])
            ratios.append(getattr(p, f) / median if measured(p) and median else None)
        out[(p.src, p.dst)] = None if None in ratios else round(min(ratios), 4)  # type: ignore[type-var]
    return out


def judge_node(node: P2pNode, th: P2pThresholds, run: Run, identity: Identity,
               estimated: Collection[str] = ()) -> list[CheckResult]:
    """A node's results: pairs measured, every GPU's figures and ratios, and each low pair no low GPU explains."""
    pairs = {(p.src, p.dst): p for p in node.pairs}
    count = sum(1 for p in node.pairs if measured(p))
    results = [RULES.result(PAIRS, float(count), th, run=run, node=node.node, estimated=estimated,
                            message=f"{count} of {node.gpus * (node.gpus - 1)} ordered pairs of the node's "
                                    f"{node.gpus} GPUs measured")]
    if node.gpus < 2:  # no pair: the count alone (0 of 0), and the stage says why it skipped
        return results
    figures = gpu_figures(node)
    ratios = gpu_ratios(figures)
    low: set[int] = set()
    for g in range(node.gpus):
        who = f"GPU {g} ({identity(g)})"
        for f, (_, unit) in FIGURES.items():
            value = figures[g][f]
            results.append(RULES.result(f, value, th, run=run, node=node.node, gpu=g, estimated=estimated,
                                        message=f"{who}: {_num(value)} {unit}, the median of its pairs" if value
                                        is not None else f"{who}: no pair of it was measured"))
        for f in RATIO_METRICS:
            r = RULES.result(f + RATIO_SUFFIX, ratios[g][f], th, run=run, node=node.node, gpu=g,
                             estimated=estimated, message=f"{who}: {FIGURES[f][0]} {_num(ratios[g][f])} of its "
                             "node's median GPU")
            results.append(r)
            if not r.passed or ratios[g][f] is None:
                low.add(g)
    for (s, d), ratio in sorted(pair_ratios(node).items()):
        r = RULES.result(PAIR, ratio, th, run=run, node=node.node, estimated=estimated,
                         observed=f"GPU {s} -> GPU {d}", message=_pair_text(pairs[(s, d)], ratio, identity))
        if not (r.passed or low & {s, d}):  # a low GPU is named as the GPU (pairs_measured counts what is missing)
            results.append(r)
    return results


def _pair_text(p: P2pPair, ratio: float | None, identity: Identity) -> str:
    path = p.path + (f", {p.links} links" if p.links else "")
    if ratio is None:
        figures = f"could not be measured: {p.error or 'a figure is missing'}"
    else:
        figures = (f"{_num(p.copy_gbps)} GB/s one way, {_num(p.bidir_gbps)} GB/s both ways, {ratio} of the "
                   f"median {p.path} pair of its node")
    return (f"the pair GPU {p.src} -> GPU {p.dst} ({path}) {figures}; GPU {p.src}: {identity(p.src)}; "
            f"GPU {p.dst}: {identity(p.dst)}")


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"
