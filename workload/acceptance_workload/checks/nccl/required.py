"""checks.nccl's required results: each collective's busbw where a threshold judges it, each node's all_reduce
busbw, transports and latency, the nccl-tests cross-check, and the localisation's per-node result when the stage
had to run (judged from the report's own job-wide results: localization_due)."""

from __future__ import annotations

from acceptance_workload.checks.nccl import latency, localize, nccltests
from acceptance_workload.checks.nccl.rules import RULES
from acceptance_workload.contract import rules
from acceptance_workload.contract.config import RunConfig
from acceptance_workload.contract.required import Due, Required


def localization_due(report, config: RunConfig) -> bool:
    """Whether the localisation stage had to run, judged from the (re-judged) job-wide results."""
    check = config.checks.nccl
    return check.enabled and localize.wanted(check.localize, config.nodes, localize.job_failed(report.results),
                                             localize.inter_node_floor(check, config.nodes))


def required(due: Due) -> list[Required]:
    """localized: the stage had to run; pairs: the report has the stage's pair rows. Without them one job-wide
    result is missing, not one per node: a report that left the stage out must not put every node in failedNodes."""
    checks, nodes = due.config.checks, sorted(due.nodes)
    th, run = checks.nccl.thresholds, rules.Run.of(due.config)
    out: list[Required] = []
    for collective in checks.nccl.collectives:
        if RULES.threshold(f"{collective}_busbw", th) is not None:
            out.append(Required("nccl", f"{collective}_busbw", None, "its busbw threshold"))
    inside_nodes = checks.nccl.per_node or len(nodes) == 1  # perNode off: no node's sweep is asked for
    if "all_reduce" in checks.nccl.collectives and inside_nodes and \
            RULES.threshold("node_all_reduce_busbw", th) is not None:
        out += [Required("nccl", "node_all_reduce_busbw", n, "its all_reduce busbw") for n in nodes]
    for name, why in (("transport", "transport {}"), ("intra_node_transport", "its intra-node transport")):
        need = RULES.expected(name, th, run)
        if need is not None:
            out += [Required("nccl", name, n, why.format(need)) for n in nodes]
    if checks.nccl.cross_check:
        out += [Required("nccl", f"{c}{nccltests.RESULT_SUFFIX}", n, "crossCheck: nccl-tests beside ours")
                for n in nodes for c in checks.nccl.collectives]
    out += [Required("nccl", name, n, "its all_reduce latency ceiling")
            for name, n in latency.required(checks.nccl, nodes)]
    why = f"localize {checks.nccl.localize}: the stage's pairs"
    localized = due.report is not None and localization_due(due.report, due.config)
    if localized and due.report.localization is not None:
        out += [Required("nccl", localize.RESULT, n, why) for n in nodes]
    elif localized:
        out.append(Required("nccl", localize.RESULT, None, why))
    return out
