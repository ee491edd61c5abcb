"""CPU/GPU binding: each rank on its GPU's NUMA-local CPUs, and the pod's CPU and memory limits as asked.

A rank whose host threads run on the other socket reaches its GPU across the
socket interconnect: host copies, kernel launches and NCCL's proxy threads all
slow down, and the run's numbers say less about the node. So the launcher pins
every rank (runtime/pinning.py: `pin`, called by launch.start before anything
else runs) and the preflight judges here where the rank really is (`cpu_affinity`):

- on GPUs: within the CPUs NVML names as the GPU's ideal affinity
  (nvmlDeviceGetCpuAffinity, the GPU's NUMA node);
- on CPU runs (gloo, no GPU): within the rank's even share of the pod's CPUs
  (the cgroup's cpuset, else the CPUs the process started with): local rank r
  of n gets the r-th of n equal, contiguous slices, or one CPU round robin
  when there are fewer CPUs than ranks. The same check then runs in the smoke run.

`cpu_limit` and `memory_limit` read the container's cgroup (v2 cpu.max /
memory.max, v1 cfs quota and limit_in_bytes) and compare with spec.resources.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.preflight.rules import RULES
from acceptance_workload.contract import rules
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.wire import format_bytes
from acceptance_workload.report.model import Skip
from acceptance_workload.runtime.pinning import CGROUP, Placement, cpulist, numa_nodes_of, placement, read, running_on

if TYPE_CHECKING:
    from acceptance_workload.checks.preflight.spec import PreflightThresholds
    from acceptance_workload.contract.config import RunConfig

UNLIMITED_V1 = 1 << 62  # cgroup v1 reports "no memory limit" as a page-rounded LONG_MAX


# ----------------------------------------------------------------------------- judging


def affinity_result(th: PreflightThresholds, where: Placement, node: str, gpu: int,
                    current: frozenset[int], sys_root: str | os.PathLike = "/") -> CheckResult:
    """`cpu_affinity`: the share of the CPUs this rank may run on that lie where it belongs (1.0: all)."""
    label = f"GPU {gpu} on node {node}"
    observed = f"CPUs {cpulist(current)}"
    if where.cpus is None:
        return RULES.result("cpu_affinity", None, th, node=node, gpu=gpu, observed=observed,
                            message=f"{label}: ran on {observed}; {where.error}")
    outside = current - where.cpus
    share = round(1 - len(outside) / len(current), 4) if current else 0.0
    expected = f"CPUs {cpulist(where.cpus)}"
    if outside:
        numa = numa_nodes_of(outside, sys_root)
        msg = (f"{label}: the rank ran on {observed}, of which {cpulist(outside)}"
               + (f" (NUMA node {','.join(map(str, numa))})" if numa else "")
               + f" lie outside {where.where}, {expected}"
               + (": its host threads reach the GPU across sockets. Pin ranks to their GPU's CPUs (kubelet: "
                  "cpuManagerPolicy static with topologyManagerPolicy single-numa-node)" if "NUMA-local" in where.where
                  else ": it is not where the launcher pinned it") + ", and look for what re-pinned this rank")
    else:
        msg = f"{label}: the rank runs on {observed}, within {where.where}"
    return RULES.result("cpu_affinity", share, th, node=node, gpu=gpu, observed=observed,
                        expected=expected, message=msg)


def cgroup_cpu_cores(sys_root: str | os.PathLike = "/") -> tuple[float | None, str]:
    """The container's CPU limit in cores (None: unlimited) and where it was read; OSError when unreadable."""
    root = Path(sys_root) / CGROUP
    v2 = read(root / "cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        return (None if quota == "max" else round(int(quota) / int(period or 100000), 3)), f"cpu.max '{v2}'"
    for d in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        quota_text, period_text = read(root / d / "cpu.cfs_quota_us"), read(root / d / "cpu.cfs_period_us")
        if quota_text and period_text:
            quota = int(quota_text)
            return (None if quota < 0 else round(quota / int(period_text), 3)), f"cpu.cfs_quota_us {quota_text}"
    raise OSError(f"no cpu.max (cgroup v2) or cpu.cfs_quota_us (v1) under {root}")


def cgroup_memory_bytes(sys_root: str | os.PathLike = "/") -> tuple[int | None, str]:
    """The container's memory limit in bytes (None: unlimited) and where it was read; OSError when unreadable."""
    root = Path(sys_root) / CGROUP
    v2 = read(root / "memory.max")
    if v2:
        return (None if v2 == "max" else int(v2)), "memory.max"
    v1 = read(root / "memory" / "memory.limit_in_bytes")
    if v1:
        return (None if int(v1) >= UNLIMITED_V1 else int(v1)), "memory.limit_in_bytes"
    raise OSError(f"no memory.max (cgroup v2) or memory.limit_in_bytes (v1) under {root}")


def _limit_result(name: str, read: Any, threshold: float | None, node: str, shown: Any) -> CheckResult | Skip:
    asked = "not asked (spec.resources)" if threshold is None else shown(threshold)
    try:
        value, source = read()
    except (OSError, ValueError) as e:
        if threshold is None:
            return Skip(check="preflight", name=name, reason=f"node {node}: {e}")
        return RULES.judged(name, None, threshold, passed=False, node=node, message=f"node {node}: {e}")
    have = "unlimited" if value is None else shown(value)
    if value is None and threshold is None:
        return Skip(check="preflight", name=name, reason=f"node {node}: no {name.replace('_', ' ')} in the "
                    f"container's cgroup ({source}) and none asked (spec.resources)")
    msg = f"node {node}: the workload container's cgroup limit is {have} ({source}); spec asked {asked}"
    out = RULES.judged(name, None if value is None else float(value), threshold, node=node,
                       observed=have, expected=None if threshold is None else asked, message=msg)
    if not out.passed:
        out.message += (": the pod does not run with the limits the spec set (a LimitRange, a mutating webhook, "
                        "or the runtime changed them)")
    return out


def limit_results(config: RunConfig, node: str, sys_root: str | os.PathLike = "/") -> list[CheckResult | Skip]:
    """`cpu_limit` and `memory_limit` of this node's pod (judged where spec.resources set them)."""
    th, run = config.checks.preflight.thresholds, rules.Run.of(config)
    return [
        _limit_result("cpu_limit", lambda: cgroup_cpu_cores(sys_root),
                      RULES.threshold("cpu_limit", th, run), node, lambda v: f"{v:g} cores"),
        _limit_result("memory_limit", lambda: cgroup_memory_bytes(sys_root),
                      RULES.threshold("memory_limit", th, run), node, lambda v: format_bytes(int(v))),
    ]


def preflight_binding(config: RunConfig, node: str, local_rank: int, environ: Mapping[str, str] | None = None,
                      sys_root: str | os.PathLike = "/") -> tuple[list[CheckResult], list[Skip]]:
    """This rank's `cpu_affinity`, and on local rank 0 the pod's `cpu_limit` and `memory_limit`.

    The local world is the launcher's (LOCAL_WORLD_SIZE, which launch.start sets for every launcher), as pin()
    used it; else gpusPerNode.
    """
    th = config.checks.preflight.thresholds
    env = os.environ if environ is None else environ
    local_world = int(env.get("LOCAL_WORLD_SIZE") or config.gpus_per_node)
    where = placement(config.mode != "cpu-smoke", local_rank, local_world, env, sys_root)
    results = [affinity_result(th, where, node, local_rank, running_on(), sys_root)]
    skipped: list[Skip] = []
    if local_rank == 0:
        for item in limit_results(config, node, sys_root):
            (results if isinstance(item, CheckResult) else skipped).append(item)  # type: ignore[arg-type]
    return results, skipped
