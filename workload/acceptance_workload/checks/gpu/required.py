"""checks.gpu's required results: every GPU's measurements (gpubench.METRICS; no host copies on CPU runs), each
with its ratio to the node's median GPU."""

from __future__ import annotations

from acceptance_workload.checks.gpu.gpubench import METRICS
from acceptance_workload.checks.gpu.rules import RATIO_SUFFIX
from acceptance_workload.contract.required import Due, Required


def required(due: Due) -> list[Required]:
    config = due.config
    return [Required("gpu", name, n, "every GPU's measurements", g) for n in sorted(due.nodes)
            for g in range(config.gpus_per_node)
            for m in METRICS if not (due.cpu and m.host) for name in (m.name, m.name + RATIO_SUFFIX)]
