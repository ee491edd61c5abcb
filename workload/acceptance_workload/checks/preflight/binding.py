"""CPU/GPU binding: each rank on its GPU's NUMA-local CPUs, and the pod's CPU and memory limits as asked.

A rank whose host threads run on the other socket reaches its GPU across the
socket interconnect: host copies, kernel launches and NCCL's proxy threads all
slow down, and the run's numbers say less about the node. So the launcher pins
every rank (`pin`, called by launch.start before anything else runs) and the
preflight judges where the rank really is (`cpu_affinity`):

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance_workload.contract import rules
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.wire import format_bytes
from acceptance_workload.report.model import Skip

if TYPE_CHECKING:
    from acceptance_workload.contract.checkmodels import PreflightThresholds
    from acceptance_workload.contract.config import WorkloadConfig

CPU_SET_WORDS = 64  # 64-bit words of NVML's affinity mask: up to 4096 CPUs
UNLIMITED_V1 = 1 << 62  # cgroup v1 reports "no memory limit" as a page-rounded LONG_MAX
CGROUP = "sys/fs/cgroup"
_started_on: frozenset[int] | None = None  # this process's CPUs before pin() narrowed them


# ----------------------------------------------------------------------------- CPU lists


def parse_cpulist(text: str) -> frozenset[int]:
    """'0-3,8,10-11' (the kernel's list format) -> {0, 1, 2, 3, 8, 10, 11}."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.strip().split(","))):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return frozenset(out)


def cpulist(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 3, 8} -> '0-3,8'."""
    ranges: list[list[int]] = []
    for c in sorted(cpus):
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges) or "none"


def mask_cpus(words: Iterable[int]) -> frozenset[int]:
    """NVML's affinity bitmask (64-bit words, lowest CPU first) as a set of CPUs."""
    return frozenset(i * 64 + bit for i, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def pod_cpus(sys_root: str | os.PathLike = "/") -> frozenset[int]:
    """The CPUs this container may use: its cgroup's cpuset, else those the process started on."""
    root = Path(sys_root) / CGROUP
    for rel in ("cpuset.cpus.effective", "cpuset/cpuset.effective_cpus", "cpuset/cpuset.cpus"):
        text = _read(root / rel)
        if text:
            return parse_cpulist(text)
    return _started_on or frozenset(os.sched_getaffinity(0))


def numa_nodes_of(cpus: Iterable[int], sys_root: str | os.PathLike = "/") -> list[int]:
    """The NUMA nodes the CPUs belong to (/sys/devices/system/node/nodeN/cpulist)."""
    wanted, found = set(cpus), set()
    for d in sorted((Path(sys_root) / "sys/devices/system/node").glob("node[0-9]*")):
        text = _read(d / "cpulist")
        if text and wanted & parse_cpulist(text):
            found.add(int(d.name[4:]))
    return sorted(found)


# ----------------------------------------------------------------------------- where a rank belongs


@dataclass(frozen=True)
class Placement:
    """The CPUs a rank belongs on and why; `cpus` is None when they could not be found (`error` says why)."""

    cpus: frozenset[int] | None
    where: str
    error: str | None = None


def even_share(cpus: Iterable[int], local_rank: int, local_world: int) -> frozenset[int]:
    """Local rank r's slice of the CPUs: r-th of n equal contiguous slices; one CPU each, round robin, when fewer."""
    ordered = sorted(cpus)
    if not ordered:
        return frozenset()
    if len(ordered) < local_world:
        return frozenset({ordered[local_rank % len(ordered)]})
    per = len(ordered) // local_world
    return frozenset(ordered[local_rank * per:(local_rank + 1) * per])


def gpu_placement(local_rank: int, environ: Mapping[str, str], sys_root: str | os.PathLike = "/") -> Placement:
    """The GPU's NUMA-local CPUs as NVML reports them (the GPU of CUDA_VISIBLE_DEVICES' entry for this rank)."""
    from acceptance_workload.checks.preflight.occupancy import nvml_init, nvml_target

    target = nvml_target(local_rank, environ)
    try:
        nvml = nvml_init()
        handle = (nvml.nvmlDeviceGetHandleByIndex(target) if isinstance(target, int)
                  else nvml.nvmlDeviceGetHandleByUUID(target))
        cpus = mask_cpus(nvml.nvmlDeviceGetCpuAffinity(handle, CPU_SET_WORDS))
    except Exception as e:
        return Placement(None, f"GPU {local_rank}", f"NVML cannot say which CPUs are local to GPU {local_rank} "
                         f"(NVML device {target}): {type(e).__name__}: {e}")
    if not cpus:
        return Placement(None, f"GPU {local_rank}", f"NVML reports no CPU local to GPU {local_rank}")
    numa = numa_nodes_of(cpus, sys_root)
    where = f"GPU {local_rank}'s NUMA-local CPUs" + (f" (NUMA node {','.join(map(str, numa))})" if numa else "")
    return Placement(cpus, where)


def cpu_placement(local_rank: int, local_world: int, sys_root: str | os.PathLike = "/") -> Placement:
    pod = pod_cpus(sys_root)
    return Placement(even_share(pod, local_rank, local_world),
                     f"local rank {local_rank}'s share of {local_world} of the pod's CPUs {cpulist(pod)}")


def placement(gpu: bool, local_rank: int, local_world: int, environ: Mapping[str, str] | None = None,
              sys_root: str | os.PathLike = "/") -> Placement:
    env = os.environ if environ is None else environ
    return gpu_placement(local_rank, env, sys_root) if gpu else cpu_placement(local_rank, local_world, sys_root)


def running_on() -> frozenset[int]:
    """Every CPU any thread of this process may run on (the union of its threads' affinities)."""
    cpus: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            cpus |= os.sched_getaffinity(int(tid))
        except OSError:  # the thread ended meanwhile
            continue
    return frozenset(cpus) or frozenset(os.sched_getaffinity(0))


def pin(gpu: bool, local_rank: int, local_world: int, environ: Mapping[str, str] | None = None) -> str:
    """Pin every thread of this process to where the rank belongs (within the pod's CPUs); says what it did.

    Never raises: a rank that cannot be pinned runs where it is, and cpu_affinity judges that.
    """
    global _started_on
    if _started_on is None:
        _started_on = frozenset(os.sched_getaffinity(0))
    where = placement(gpu, local_rank, local_world, environ)
    if where.cpus is None:
        return f"not pinned: {where.error}"
    cpus = where.cpus & pod_cpus()
    if not cpus:
        return f"not pinned: none of {where.where} ({cpulist(where.cpus)}) is among the pod's CPUs"
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            continue
    return f"pinned to CPUs {cpulist(cpus)} ({where.where})"


# ----------------------------------------------------------------------------- judging


def affinity_result(th: PreflightThresholds, where: Placement, node: str, gpu: int,
                    current: frozenset[int], sys_root: str | os.PathLike = "/") -> CheckResult:
    """`cpu_affinity`: the share of the CPUs this rank may run on that lie where it belongs (1.0: all)."""
    label = f"GPU {gpu} on node {node}"
    observed = f"CPUs {cpulist(current)}"
    if where.cpus is None:
        return rules.result("preflight", "cpu_affinity", None, th, node=node, gpu=gpu, observed=observed,
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
    return rules.result("preflight", "cpu_affinity", share, th, node=node, gpu=gpu, observed=observed,
                        expected=expected, message=msg)


def cgroup_cpu_cores(sys_root: str | os.PathLike = "/") -> tuple[float | None, str]:
    """The container's CPU limit in cores (None: unlimited) and where it was read; OSError when unreadable."""
    root = Path(sys_root) / CGROUP
    v2 = _read(root / "cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        return (None if quota == "max" else round(int(quota) / int(period or 100000), 3)), f"cpu.max '{v2}'"
    for d in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        quota_text, period_text = _read(root / d / "cpu.cfs_quota_us"), _read(root / d / "cpu.cfs_period_us")
        if quota_text and period_text:
            quota = int(quota_text)
            return (None if quota < 0 else round(quota / int(period_text), 3)), f"cpu.cfs_quota_us {quota_text}"
    raise OSError(f"no cpu.max (cgroup v2) or cpu.cfs_quota_us (v1) under {root}")


def cgroup_memory_bytes(sys_root: str | os.PathLike = "/") -> tuple[int | None, str]:
    """The container's memory limit in bytes (None: unlimited) and where it was read; OSError when unreadable."""
    root = Path(sys_root) / CGROUP
    v2 = _read(root / "memory.max")
    if v2:
        return (None if v2 == "max" else int(v2)), "memory.max"
    v1 = _read(root / "memory" / "memory.limit_in_bytes")
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
        return rules.judged("preflight", name, None, threshold, passed=False, node=node, message=f"node {node}: {e}")
    have = "unlimited" if value is None else shown(value)
    if value is None and threshold is None:
        return Skip(check="preflight", name=name, reason=f"node {node}: no {name.replace('_', ' ')} in the "
                    f"container's cgroup ({source}) and none asked (spec.resources)")
    msg = f"node {node}: the workload container's cgroup limit is {have} ({source}); spec asked {asked}"
    out = rules.judged("preflight", name, None if value is None else float(value), threshold, node=node,
                       observed=have, expected=None if threshold is None else asked, message=msg)
    if not out.passed:
        out.message += (": the pod does not run with the limits the spec set (a LimitRange, a mutating webhook, "
                        "or the runtime changed them)")
    return out


def limit_results(config: WorkloadConfig, node: str, sys_root: str | os.PathLike = "/") -> list[CheckResult | Skip]:
    """`cpu_limit` and `memory_limit` of this node's pod (judged where spec.resources set them)."""
    th, run = config.checks.preflight.thresholds, rules.Run.of(config)
    return [
        _limit_result("cpu_limit", lambda: cgroup_cpu_cores(sys_root),
                      rules.threshold("preflight", "cpu_limit", th, run), node, lambda v: f"{v:g} cores"),
        _limit_result("memory_limit", lambda: cgroup_memory_bytes(sys_root),
                      rules.threshold("preflight", "memory_limit", th, run), node, lambda v: format_bytes(int(v))),
    ]


def preflight_binding(config: WorkloadConfig, node: str, local_rank: int, environ: Mapping[str, str] | None = None,
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
