"""p2p's rows of the rule table (contract/rules.py says how a row reads): each GPU's pairs against the floors and
against its node's median GPU, a pair against the node's pairs of its path, and every pair measured."""

from __future__ import annotations

from acceptance_workload.checks.p2p.spec import P2pThresholds
from acceptance_workload.contract.rules import Run, Table, field, from_run, row

RATIO_SUFFIX = "_ratio_to_node_median"  # a GPU's value over its node's median GPU
PAIR = "pair_ratio_to_path_median"  # a pair's copy over the median of its node's pairs of the same path
PAIRS = "pairs_measured"  # a node's ordered pairs with every figure measured
_GPU_METRICS = (("copy_gbps", "GB/s", "ge", "min_copy_gbps"), ("bidir_gbps", "GB/s", "ge", "min_bidir_gbps"),
                ("latency_us", "us", "le", "max_latency_us"))
RATIO_METRICS = ("copy_gbps", "bidir_gbps")  # the ones a GPU is also compared with its node's median GPU by


def every_pair(run: Run) -> float:
    """A node of n GPUs has n(n-1) ordered pairs; one GPU has none (and the check is a skip)."""
    return float(run.gpus_per_node * (run.gpus_per_node - 1))


RULES = Table(P2pThresholds, [
    *(row("p2p", name, comparison, unit, field(attr)) for name, unit, comparison, attr in _GPU_METRICS),
    *(row("p2p", name + RATIO_SUFFIX, "ge", "", field("min_ratio_to_node_median"), kind="ratio", of=name)
      for name in RATIO_METRICS),
    row("p2p", PAIR, "ge", "", field("min_ratio_to_node_median")),
    row("p2p", PAIRS, "ge", "pairs", from_run(every_pair, "every ordered pair of the node's GPUs")),
])
