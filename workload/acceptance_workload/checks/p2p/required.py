"""checks.p2p's required results: every node's count of measured pairs, and with two or more GPUs a node, every
GPU's figures and ratios (a pair's own result comes only when it is low, so it is not required)."""

from __future__ import annotations

from acceptance_workload.checks.p2p.rules import PAIRS, RATIO_METRICS, RATIO_SUFFIX
from acceptance_workload.contract.required import Due, Required

GPU_RESULTS = ("copy_gbps", "bidir_gbps", "latency_us", *(f + RATIO_SUFFIX for f in RATIO_METRICS))


def required(due: Due) -> list[Required]:
    config, nodes = due.config, sorted(due.nodes)
    out = [Required("p2p", PAIRS, n, "every node's pairs of GPUs") for n in nodes]
    if config.gpus_per_node < 2:
        return out
    return out + [Required("p2p", name, n, "every GPU's copies with its peers", g) for n in nodes
                  for g in range(config.gpus_per_node) for name in GPU_RESULTS]
