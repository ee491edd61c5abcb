"""nccl's part of the operator's re-judging (contract/rejudging.py): its inter-node rows recomputed from the
report's own localisation pairs, and which of its failures says the job failed."""

from __future__ import annotations

from acceptance_workload.checks.nccl import localize
from acceptance_workload.checks.nccl.rules import inter_node_ratio
from acceptance_workload.contract.rejudging import Judgement, Judging, Rejudging
from acceptance_workload.contract.results import CheckResult


def inter_node(row: object, r: CheckResult, x: Judging) -> Judgement:
    """The node's best pair against the median of the other nodes' and the floor, from the report's own pair rows."""
    th = x.config.checks.nccl.thresholds
    floor = x.threshold(row)
    detail = x.report.localization
    if detail is None or r.node is None:
        return Judgement(floor, "ge", False, "no localisation pair rows in the report to judge a node by")
    nodes = x.report.environment.hostnames or sorted({o.node for o in x.report.results if o.node})
    judged = x.once(localize.RESULT, lambda: localize.judge_values(
        localize.node_values(detail.pairs, nodes), inter_node_ratio(th), floor))
    j = judged.get(r.node) if isinstance(judged, dict) else None
    if j is None:
        return Judgement(floor, "ge", False, f"node {r.node} is not one the run measured")
    note = "" if r.value is not None and j.value is not None and abs(r.value - j.value) <= 1e-3 else (
        f"the report said {r.value}, its pair rows give {j.value}")
    return Judgement(j.threshold, "ge" if j.threshold is not None else "info", note=note, value=j.value)


def job_failed(result: CheckResult) -> bool:
    """A failure that says the job failed: a node's transport (required.localization_due reads it, by name)."""
    return localize.job_failed((result,))


REJUDGE = Rejudging(kinds={"inter_node": inter_node}, job_failed=job_failed)
