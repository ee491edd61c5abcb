"""checks.preflight's required results: each node's GPU count (not on CPU runs), each rank's CPU binding, the
pod's limits spec.resources set, and each GPU's MIG mode, where their thresholds judge them."""

from __future__ import annotations

from acceptance_workload.checks.preflight.rules import RULES
from acceptance_workload.contract import rules
from acceptance_workload.contract.required import Due, Required


def required(due: Due) -> list[Required]:
    config, nodes = due.config, sorted(due.nodes)
    th, run = config.checks.preflight.thresholds, rules.Run.of(config)
    gpus = range(config.gpus_per_node)
    out = [] if due.cpu else [Required("preflight", "gpu_count", n, "GPUs of every node") for n in nodes]
    if RULES.threshold("cpu_affinity", th, run) is not None:
        out += [Required("preflight", "cpu_affinity", n, "each rank's CPU binding", g) for n in nodes for g in gpus]
    for name in ("cpu_limit", "memory_limit"):
        if RULES.threshold(name, th, run) is not None:
            out += [Required("preflight", name, n, "spec.resources") for n in nodes]
    if not due.cpu and RULES.threshold("mig_mode", th, run) is not None:
        out += [Required("preflight", "mig_mode", n, "each GPU's MIG mode", g) for n in nodes for g in gpus]
    return out
