"""checks.storage's required results (only with its volume): every node's room on and access to it (the gates),
and every node's view of it unless the volume failed a gate (then nothing was written and no view can be asked
for: the nodes that could write are not named for it)."""

from __future__ import annotations

from acceptance_workload.checks.storage import storage
from acceptance_workload.contract.required import Due, Required


def required(due: Due) -> list[Required]:
    config, nodes = due.config, sorted(due.nodes)
    if not config.storage_path:
        return []
    out = [Required("storage", name, n, "every node's room on and access to the volume") for n in nodes
           for name in storage.GATES]
    if not (due.report is not None and storage.gated(due.report.results)):
        out += [Required("storage", "storage_consistency", n, "every node's view of the volume") for n in nodes]
    return out
