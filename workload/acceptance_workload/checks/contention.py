"""A busy host on the timing failures of every check: the sentence that names the neighbour (checks/preflight/
hostload.py measures the host's load; docs/thresholds.md, "Host contention").

Here, above the registry, because whether a result is a timing is its row's (unit, kind) in the whole rule table
(checks/table.py), of whichever check it is.
"""

from __future__ import annotations

from acceptance_workload.checks import table
from acceptance_workload.checks.nccl.rules import SLOW_BLOCK
from acceptance_workload.checks.preflight import hostload
from acceptance_workload.report.model import HostLoad, NodeFacts, ReportBase


def timed(check: str, name: str) -> bool:
    """Whether a result is a time, a rate or a straggler measure (the kind a busy host can fail)."""
    row = table.find(check, name)
    return row is not None and (row.unit in hostload.TIMED_UNITS or name in hostload.TIMED_NAMES
                                or row.kind in ("ratio", "inter_node") or name == SLOW_BLOCK)


def _worst(facts: NodeFacts, stage: str) -> HostLoad | None:
    """The sample that covers the failing stage where there is one, else the preflight's."""
    for wanted in (stage, "preflight"):
        found = [h for h in facts.host_load if h.stage == wanted]
        if found:
            return max(found, key=lambda h: (h.saturated, h.outside))
    return None


def annotate(report: ReportBase) -> int:
    """Put the host-contention sentence in front of every failed timing result whose node's host was saturated
    (any saturated node for a job-wide result): first, so that a clipped message (the status part keeps 300
    characters) still says it. Idempotent; returns how many results it changed."""
    changed = 0
    for r in report.results:
        if r.passed or not timed(r.check, r.name) or hostload.CONTENTION_HINT in r.message:
            continue
        facts = [n for n in report.nodes if r.node is None or n.node == r.node]
        busy = [(f.node, load) for f in facts if (load := _worst(f, r.check)) is not None and load.saturated]
        if not busy:
            continue
        node, load = busy[0]
        more = f" (and {len(busy) - 1} more nodes)" if len(busy) > 1 else ""
        r.message = (f"node {node}{more} was saturated during {load.stage} ({hostload.CONTENTION_HINT}): "
                     f"{hostload.describe(load)}" + (f"; {r.message}" if r.message else ""))
        changed += 1
    return changed
