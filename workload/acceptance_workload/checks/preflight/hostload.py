"""Host contention: how busy the CPUs this run may use were, and which processes outside the run kept them busy.

A latency or throughput result measured while a neighbour kept every CPU busy
is the neighbour's number, not the fabric's: NCCL's proxy threads, gloo and the
Python that launches the kernels wait for a CPU. So the preflight samples the
host (a short window of its own), every stage boundary samples it again (the
window is the stage), and a failed timing result on a node whose host was
saturated says so (checks/contention.py), naming the busiest processes outside the run.

What is read, all from the kernel and none of it privileged:
- /proc/stat: each CPU's busy, idle and steal time (host-wide even in a
  container), over the CPUs the container may use (its cgroup cpuset);
- /proc/loadavg, the cgroup's CPU quota (cpu.max, or cpu.cfs_quota_us);
- /proc/PID/stat of every visible process: CPU time and command name.

"Outside the run" is every process that is not the run's: the run is this
process, its ancestors (the launcher), the processes whose environment carries
this run's configuration (GPU_ACCEPTANCE_CONFIG, and GPU_ACCEPTANCE_STARTED_AT
where set: every rank and the launcher's agent) and their descendants. In a pod
without the host's PID namespace the other processes are not visible: their
time still shows as busy time the run's own processes do not account for.

The rule (docs/thresholds.md, "Host contention"): saturated when the run's CPUs
were at least BUSY_SHARE busy and at least OUTSIDE_SHARE of their time went
outside the run (other processes, or the hypervisor's steal). Host load is
context, never a failure by itself: a `host_cpu_outside` result records it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from acceptance_workload.checks.preflight.rules import RULES
from acceptance_workload.contract.config import CONFIG_ENV, STARTED_ENV
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import HostLoad, HostProcess

WINDOW_SECONDS = 0.5  # the preflight's own sample: 50 clock ticks a CPU, enough to tell busy from idle
BUSY_SHARE = 0.9  # the run's CPUs (nearly) all busy: a thread that wakes waits for one
OUTSIDE_SHARE = 0.5  # ... and at least half their time outside the run: the neighbour, not the run, fills them
BUSY_PROCESS_CPUS = 0.1  # a process outside the run counts as busy from 10% of a CPU
MAX_NAMED = 5
# Results measured against time: on a saturated host, their failure may be the neighbour's.
TIMED_UNITS = frozenset({"GB/s", "us", "TFLOP/s", "s"})
TIMED_NAMES = frozenset({"throughput_per_gpu", "gpu_throughput", "scaling_efficiency", "straggler_ratio",
                         "rank_progress"})
CONTENTION_HINT = "look at the neighbour before the fabric"


@dataclass
class Scan:
    """One reading of the host: per-CPU (busy, total, steal) ticks and every process's (comm, ppid, ticks)."""

    at: float
    cpus: dict[int | None, tuple[int, int, int]]  # None: the aggregate "cpu" line
    procs: dict[int, tuple[str, int, int]]
    load1: float | None = None


def _cpu_times(proc: Path) -> dict[int | None, tuple[int, int, int]]:
    out: dict[int | None, tuple[int, int, int]] = {}
    with contextlib.suppress(OSError):
        for line in (proc / "stat").read_text().splitlines():
            if not line.startswith("cpu"):
                continue
            name, *raw = line.split()
            ticks = [int(x) for x in raw[:8]] + [0] * (8 - len(raw[:8]))
            total = sum(ticks)  # user nice system idle iowait irq softirq steal (guest is inside user)
            idle = ticks[3] + ticks[4]
            out[None if name == "cpu" else int(name[3:])] = (total - idle, total, ticks[7])
    return out


def _processes(proc: Path) -> dict[int, tuple[str, int, int]]:
    out = {}
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = (entry / "stat").read_text()
            comm = text[text.index("(") + 1:text.rindex(")")]
            rest = text[text.rindex(")") + 2:].split()
            out[int(entry.name)] = (comm, int(rest[1]), int(rest[11]) + int(rest[12]))
    return out


def scan(proc: Path = Path("/proc")) -> Scan:
    load1 = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        load1 = float((proc / "loadavg").read_text().split()[0])
    return Scan(time.monotonic(), _cpu_times(proc), _processes(proc), load1)


def _cpu_list(text: str) -> set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


@dataclass(frozen=True)
class Allowed:
    """The CPUs this container may run on, and its CPU quota in CPUs (None: none)."""

    cpus: frozenset[int]
    quota: float | None = None

    @property
    def count(self) -> float:
        return min(float(len(self.cpus)), self.quota) if self.quota else float(len(self.cpus))


def allowed_cpus(sys_root: Path = Path("/"), proc: Path = Path("/proc")) -> Allowed:
    """The container's cpuset (cgroup v2, else v1, else the affinity of pid 1, which pinning.pin did not narrow)
    and its CPU quota (cpu.max, else cpu.cfs_quota_us / cpu.cfs_period_us)."""
    cg = sys_root / "sys" / "fs" / "cgroup"
    cpus: set[int] = set()
    for path in (cg / "cpuset.cpus.effective", cg / "cpuset" / "cpuset.effective_cpus", cg / "cpuset" / "cpuset.cpus"):
        with contextlib.suppress(OSError, ValueError):
            cpus = _cpu_list(path.read_text())
            if cpus:
                break
    if not cpus:
        with contextlib.suppress(OSError, ValueError):
            line = next(ln for ln in (proc / "1" / "status").read_text().splitlines()
                        if ln.startswith("Cpus_allowed_list:"))
            cpus = _cpu_list(line.split(":", 1)[1])
    if not cpus:
        cpus = set(os.sched_getaffinity(0))
    quota = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        limit, period = (cg / "cpu.max").read_text().split()[:2]
        quota = None if limit == "max" else int(limit) / int(period)
    if quota is None:
        with contextlib.suppress(OSError, ValueError):
            limit = int((cg / "cpu" / "cpu.cfs_quota_us").read_text())
            quota = None if limit <= 0 else limit / int((cg / "cpu" / "cpu.cfs_period_us").read_text())
    return Allowed(frozenset(cpus), quota)


def run_marker(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment entries every process of this run carries (empty: none, e.g. a direct call)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in (CONFIG_ENV, STARTED_ENV) if env.get(k)}


def _carries(pid: int, marker: Mapping[str, str], proc: Path) -> bool:
    if not marker:
        return False
    try:
        entries = set((proc / str(pid) / "environ").read_bytes().split(b"\0"))
    except OSError:
        return False  # not ours to read: another user's, so not the run's
    return all(f"{k}={v}".encode() in entries for k, v in marker.items())


def run_members(procs: Mapping[int, tuple[str, int, int]], candidates: Iterable[int], *, marker: Mapping[str, str],
                self_pid: int, proc: Path) -> set[int]:
    """The run's processes among `candidates`: this process, its ancestors, the processes carrying the run's
    marker, and the descendants of those."""
    ancestors, pid = set(), self_pid
    while pid > 0 and pid not in ancestors:
        ancestors.add(pid)
        pid = procs.get(pid, ("", 0, 0))[1]
    members: dict[int, bool] = {}

    def rooted(p: int) -> bool:  # p is this process or carries the marker, or descends from one that does
        if p not in members:
            members[p] = False  # a cycle of ppids cannot recurse forever
            parent = procs.get(p, ("", 0, 0))[1]
            members[p] = p == self_pid or _carries(p, marker, proc) or (parent > 0 and rooted(parent))
        return members[p]

    return {p for p in candidates if p in ancestors or rooted(p)}


def load_between(a: Scan, b: Scan, allowed: Allowed, stage: str, *, marker: Mapping[str, str] | None = None,
                 self_pid: int | None = None, proc: Path = Path("/proc")) -> HostLoad:
    """The host over the window from scan `a` to scan `b`, judged by the rule."""
    seconds = max(b.at - a.at, 1e-3)
    ids = [c for c in allowed.cpus if c in a.cpus and c in b.cpus] or [None]
    busy, total, steal = (sum(b.cpus.get(c, (0, 0, 0))[k] - a.cpus.get(c, (0, 0, 0))[k] for c in ids)
                          for k in range(3))
    used = {pid: ticks - a.procs.get(pid, ("", 0, 0))[2] for pid, (_, _, ticks) in b.procs.items()}
    used = {pid: t for pid, t in used.items() if t > 0}
    ours = run_members(b.procs, used, marker=run_marker() if marker is None else marker,
                       self_pid=os.getpid() if self_pid is None else self_pid, proc=proc)
    run_ticks = sum(t for pid, t in used.items() if pid in ours)
    tick = float(os.sysconf("SC_CLK_TCK"))
    others = sorted(((t / tick / seconds, pid) for pid, t in used.items() if pid not in ours), reverse=True)
    busy_others = [(cpus, pid) for cpus, pid in others if cpus >= BUSY_PROCESS_CPUS]
    total = max(total, 1)
    load = HostLoad(
        stage=stage, seconds=round(seconds, 3), cpus=allowed.count, host_cpus=os.cpu_count(), load1=b.load1,
        busy=round(busy / total, 3), steal=round(steal / total, 3),
        outside=round(min(1.0, max(0, busy - run_ticks) / total), 3), outside_processes=len(busy_others),
        busiest=[HostProcess(pid=pid, command=b.procs[pid][0], cpus=round(cpus, 2))
                 for cpus, pid in busy_others[:MAX_NAMED]])
    load.saturated = saturated(load)
    return load


def saturated(load: HostLoad) -> bool:
    """The rule: the run's CPUs (nearly) all busy, and at least half their time spent outside the run."""
    return load.busy >= BUSY_SHARE and load.outside >= OUTSIDE_SHARE


def measure(stage: str = "preflight", window: float = WINDOW_SECONDS, *, proc: Path = Path("/proc"),
            sys_root: Path = Path("/"), marker: Mapping[str, str] | None = None) -> HostLoad:
    """The host over a window of its own (the preflight's sample)."""
    first = scan(proc)
    time.sleep(window)
    return load_between(first, scan(proc), allowed_cpus(sys_root, proc), stage, marker=marker, proc=proc)


def describe(load: HostLoad) -> str:
    """'host CPUs 100% busy (97% outside the run; load 33.1 on 16 CPUs): 32 processes outside the run,
    e.g. pid 123 `stress` (1.0 CPU)'."""
    extra = [f"{load.outside:.0%} outside the run"]
    if load.steal >= 0.01:
        extra.append(f"steal {load.steal:.0%}")
    if load.load1 is not None:
        extra.append(f"load {load.load1:.1f} on {load.host_cpus or '?'} CPUs")
    text = f"host CPUs {load.busy:.0%} busy ({'; '.join(extra)})"
    if load.busiest:
        named = ", ".join(f"pid {p.pid} `{p.command}` ({p.cpus:.1f} CPU)" for p in load.busiest[:2])
        return f"{text}: {load.outside_processes} processes outside the run, e.g. {named}"
    return f"{text}: no process outside the run is visible here (another container's, or the hypervisor's)"


def host_result(load: HostLoad, node: str) -> CheckResult:
    """`host_cpu_outside`: recorded, never judged (context for the timing results)."""
    message = f"node {node}: {describe(load)} over {load.seconds:g} s" + (
        f"; saturated: a timing failure on this node will say so ({CONTENTION_HINT})" if load.saturated else "")
    return RULES.result("host_cpu_outside", load.outside, None, node=node, message=message,
                        observed="saturated" if load.saturated else "not saturated")


@dataclass
class Watch:
    """Stage by stage on a node's local rank 0: a scan at every stage boundary, the load of each stage between."""

    allowed: Allowed = field(default_factory=allowed_cpus)
    loads: list[HostLoad] = field(default_factory=list)
    _last: tuple[str, Scan] | None = None

    def mark(self, stage: str | None) -> None:
        """`stage` starts now (None: the last one ended); never raises (host load is context, not a check)."""
        with contextlib.suppress(Exception):
            now = scan()
            if self._last is not None and self._last[0] != "preflight":  # the preflight has a sample of its own
                self.loads.append(load_between(self._last[1], now, self.allowed, self._last[0]))
            self._last = None if stage is None else (stage, now)
