"""Where a rank belongs and pinning it there: each rank on its GPU's NUMA-local CPUs (or, on CPU runs, its even
share of the pod's CPUs), done by the launcher (launch.start) before any thread of the process group exists.

A rank whose host threads run on the other socket reaches its GPU across the socket interconnect: host copies,
kernel launches and NCCL's proxy threads all slow down. The preflight judges where the rank really is
(checks/preflight/binding.py: cpu_affinity) against the same placement.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from acceptance_workload.runtime.gpus import nvml_init, nvml_target

CPU_SET_WORDS = 64  # 64-bit words of NVML's affinity mask: up to 4096 CPUs
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


def read(path: Path) -> str | None:
    """A file's text, stripped; None where it cannot be read (a missing cgroup file)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def pod_cpus(sys_root: str | os.PathLike = "/") -> frozenset[int]:
    """The CPUs this container may use: its cgroup's cpuset, else those the process started on."""
    root = Path(sys_root) / CGROUP
    for rel in ("cpuset.cpus.effective", "cpuset/cpuset.effective_cpus", "cpuset/cpuset.cpus"):
        text = read(root / rel)
        if text:
            return parse_cpulist(text)
    return _started_on or frozenset(os.sched_getaffinity(0))


def numa_nodes_of(cpus: Iterable[int], sys_root: str | os.PathLike = "/") -> list[int]:
    """The NUMA nodes the CPUs belong to (/sys/devices/system/node/nodeN/cpulist)."""
    wanted, found = set(cpus), set()
    for d in sorted((Path(sys_root) / "sys/devices/system/node").glob("node[0-9]*")):
        text = read(d / "cpulist")
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
