"""nccl's rows of the rule table (contract/rules.py says how a row reads): busbw per collective over the job and
inside each node, correctness, latency, transports, the cross-check with nccl-tests and the localisation."""

from __future__ import annotations

from typing import Any

from acceptance_workload.checks.nccl.spec import CROSS_CHECK_TOLERANCE, NcclThresholds
from acceptance_workload.contract.rules import Run, Table, Threshold, field, fixed, row, transport
from acceptance_workload.contract.terms import COLLECTIVES

CROSS_CHECK_SUFFIX = "_cross_check"  # crossCheck: a collective's best busbw beside nccl-tests'
INTER_NODE = "inter_node_busbw"  # localisation: a node's best pair
SLOW_BLOCK = INTER_NODE + "_block"  # localisation: a block of the bisection that holds the fault


def inter_node_floor(th: Any, r: Run) -> float | None:
    """The job-wide all_reduce floor between nodes: a pair of nodes must reach it too (none on one node)."""
    return th.all_reduce_busbw_gbps if r.nodes > 1 else None


def inter_node_ratio(th: Any) -> float | None:
    """interNodeRatioToMedian: a node whose best pair reaches less than this share of the others' median is named."""
    return th.inter_node_ratio_to_median


def _cross_check(th: Any, _r: Run) -> float:
    return th.cross_check_limit()  # the spec's, else the default every profile shares


RULES = Table(NcclThresholds, [
    # nccl: busbw per collective over the job and inside each node, correctness, transports, cross-check
    *(row("nccl", f"{c}_busbw", "ge", "GB/s", field(f"{c}_busbw_gbps"), job_wide=True) for c in COLLECTIVES),
    *(row("nccl", f"{c}_correctness", "le", "elements", fixed(0.0, "no wrong element")) for c in COLLECTIVES),
    row("nccl", "node_all_reduce_busbw", "ge", "GB/s", field("node_all_reduce_busbw_gbps")),
    # small-message all_reduce latency (latency.py): the worst time per operation from 8 B to 64 KiB
    row("nccl", "all_reduce_latency", "le", "us", field("all_reduce_latency_us"), job_wide=True),
    row("nccl", "node_all_reduce_latency", "le", "us", field("node_all_reduce_latency_us")),
    row("nccl", "transport", "ge", "fraction", transport(lambda _th, r: r.transport, "the required inter-node "
        "transport (require_transport, or implied by the fabric)"), kind="transport"),
    row("nccl", "intra_node_transport", "ge", "fraction", transport(
        lambda th, r: th.intra_node_transport if r.gpus_per_node >= 2 else None, "intra_node_transport",
        "intra_node_transport"), kind="transport"),
    *(row("nccl", f"{c}{CROSS_CHECK_SUFFIX}", "le", "", Threshold(_cross_check, "cross_check_tolerance",
          doc=f"cross_check_tolerance, default {CROSS_CHECK_TOLERANCE}")) for c in COLLECTIVES),
    # localisation: a node's best pair against max(ratio x the others' median, the job-wide floor)
    row("nccl", INTER_NODE, "ge", "GB/s", Threshold(
        lambda th, r: inter_node_floor(th, r), "inter_node_ratio_to_median",
        doc="interNodeRatioToMedian x the median of the other nodes, at least allReduceBusbwGBps (the floor)"),
        kind="inter_node"),
    row("nccl", SLOW_BLOCK, "ge", "GB/s", fixed(1.0, "always a failure: the bisection's slow block"),
        kind="culprit"),
])
