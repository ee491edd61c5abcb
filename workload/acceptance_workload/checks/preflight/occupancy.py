"""Who else is on this rank's GPU: NVML's memory in use and compute processes, read before the workload touches it.

A GPU another job is using gives that job's numbers, not the GPU's, and an
allocation of ours may fail on it with an error nobody can act on ("NCCL
Error 1: unhandled cuda error"). So each rank reads its own GPU through NVML
before it creates a CUDA context (nothing of ours is on the GPU yet: whatever
is in use belongs to someone else), the preflight judges it as `gpu_in_use`,
and a CUDA/NCCL error the rank raises later is reported with these facts and a
fresh reading beside it. Memory another process takes after the preflight
shows as an out-of-memory error in a check: that error reads the GPU again and
names the processes that are not this run's, as `gpu_in_use` does
(out_of_memory_message), and the later checks are skipped with that reason
(run.py) instead of failing with torch's text one after the other.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceptance_workload.checks.preflight.rules import RULES
from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.runtime.gpus import nvml_init, nvml_target

MIB = 1 << 20
MAX_NAMED_PROCESSES = 4
NOTABLE_MIB = 64  # in use with no process listed: worth a word from here on
# What CUDA, cuBLAS, NCCL and torch say when a GPU allocation fails (torch.OutOfMemoryError aside).
OUT_OF_MEMORY_TEXTS = ("out of memory", "cublas_status_alloc_failed", "cudaerrormemoryallocation")
NOT_OURS = "not this run's"  # an out-of-memory message that names another process's memory says this


@dataclass
class GpuProcess:
    pid: int
    used_mib: float | None  # None: NVML does not say (no permission in a container)
    command: str | None  # None: the pid is not in this process's pid namespace


@dataclass
class Occupancy:
    """One GPU as NVML saw it (before the workload's CUDA context, or at a failure)."""

    gpu: int  # the rank's local GPU index
    nvml_index: int | str | None = None
    used_mib: float | None = None
    total_mib: float | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    error: str | None = None

    def describe(self) -> str:
        """'76012 of 81559 MiB in use by pid 4242 (python hold.py, 76000 MiB)'."""
        if self.used_mib is None:
            return f"memory in use unreadable ({self.error or 'not reported'})"
        text = f"{self.used_mib:.0f} of {self.total_mib:.0f} MiB in use"
        if self.processes:
            named = []
            for p in self.processes[:MAX_NAMED_PROCESSES]:
                extra = [x for x in (p.command, None if p.used_mib is None else f"{p.used_mib:.0f} MiB") if x]
                named.append(f"pid {p.pid}" + (f" ({', '.join(extra)})" if extra else ""))
            more = len(self.processes) - MAX_NAMED_PROCESSES
            text += " by " + ", ".join(named) + (f" and {more} more" if more > 0 else "")
        elif self.used_mib >= NOTABLE_MIB:
            text += " (no compute process visible: another container's, or a graphics one)"
        return text


def visible_gpu_names(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The names of the GPUs CUDA will show a process with this environment, through NVML: no torch import and
    no CUDA context, which cost `gpu-acceptance local` seconds before its ranks could start.

    CUDA_VISIBLE_DEVICES as CUDA reads it: the entries up to the first it cannot use, none when empty.
    None where NVML cannot answer as CUDA would (no NVML or driver, a MIG instance, a UUID prefix, an entry
    twice): the caller asks torch then.
    """
    env = os.environ if environ is None else environ
    try:
        nvml = nvml_init()
        count = nvml.nvmlDeviceGetCount()
        raw = env.get("CUDA_VISIBLE_DEVICES")
        entries = [str(i) for i in range(count)] if raw is None else [e.strip() for e in raw.split(",")]
        handles = []
        for entry in entries:
            if entry.isdigit() and int(entry) < count:
                handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            elif entry.startswith("GPU-"):
                handles.append(nvml.nvmlDeviceGetHandleByUUID(entry))
            elif entry.startswith("MIG-"):
                return None
            else:
                break  # CUDA ignores this entry and every one after it
        if len({str(nvml.nvmlDeviceGetUUID(h)) for h in handles}) < len(handles):
            return None
        names = [nvml.nvmlDeviceGetName(h) for h in handles]
    except Exception:
        return None
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def _command(pid: int, proc: Path) -> str | None:
    with contextlib.suppress(OSError):
        raw = (proc / str(pid) / "cmdline").read_bytes()
        return " ".join(raw.decode(errors="replace").replace("\0", " ").split())[:120] or None
    return None


def _memory(nvml: Any, handle: Any) -> Any:
    """NVML's v2 memory info where the driver has it: its `used` leaves out what the driver reserves for itself
    (v1 counts ~480 MiB of an idle H100 as used; nvidia-smi shows v2's 0 MiB)."""
    v2 = getattr(nvml, "nvmlMemory_v2", None)
    if v2 is not None:
        with contextlib.suppress(Exception):
            return nvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
    return nvml.nvmlDeviceGetMemoryInfo(handle)


def read(nvml: Any, gpu: int, target: int | str, proc: Path = Path("/proc")) -> Occupancy:
    """Memory in use and compute processes of one GPU; errors are kept, never raised."""
    occ = Occupancy(gpu=gpu, nvml_index=target)
    try:
        handle = (nvml.nvmlDeviceGetHandleByIndex(target) if isinstance(target, int)
                  else nvml.nvmlDeviceGetHandleByUUID(target))
        memory = _memory(nvml, handle)
        occ.used_mib, occ.total_mib = memory.used / MIB, memory.total / MIB
    except Exception as e:
        occ.error = f"{type(e).__name__}: {e}"
        return occ
    with contextlib.suppress(Exception):  # the processes only name the holder; the memory decides
        for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            used = getattr(p, "usedGpuMemory", None)
            occ.processes.append(GpuProcess(int(p.pid), None if used is None else used / MIB,
                                            _command(int(p.pid), proc)))
    return occ


def read_own(local_rank: int, environ: Mapping[str, str] | None = None) -> Occupancy:
    """This rank's GPU, through NVML (which creates no CUDA context)."""
    env = os.environ if environ is None else environ
    target = nvml_target(local_rank, env)
    try:
        nvml = nvml_init()
    except Exception as e:
        return Occupancy(gpu=local_rank, nvml_index=target, error=f"NVML: {type(e).__name__}: {e}")
    return read(nvml, local_rank, target)


def judge_in_use(occ: Occupancy | None, th: PreflightThresholds, node: str) -> CheckResult | None:
    """`gpu_in_use`: MiB in use before the run against maxGpuMemoryInUseMiB; unreadable fails where judged
    (None: unreadable and not judged, a skip)."""
    bound = RULES.threshold("gpu_in_use", th)
    gpu = occ.gpu if occ is not None else None
    label = f"GPU {gpu} on node {node}"
    if occ is None or occ.used_mib is None:
        if bound is None:
            return None
        why = "it was not read" if occ is None else occ.describe()
        return RULES.result("gpu_in_use", None, th, node=node, gpu=gpu, message=f"{label}: {why}")
    out = RULES.result("gpu_in_use", round(occ.used_mib, 1), th, node=node, gpu=gpu,
                       observed=occ.describe()[:200])
    message = f"{label}: {occ.describe()} before the run"
    if not out.passed:
        message += (f"; more than {bound:g} MiB: another process is using this GPU (its numbers would be that "
                    "job's too). Stop it, or run the test on idle GPUs")
    out.message = message[:1000]
    return out


def failure_facts(before: Occupancy | None, local_rank: int) -> str:
    """What a CUDA/NCCL error's report adds: the GPU before the run, and now."""
    if before is None:
        return ""
    now = read_own(local_rank)
    return (f" [GPU {before.gpu} before the run: {before.describe()}; at this error: {now.describe()}]")


def out_of_memory(error: BaseException) -> bool:
    """A GPU allocation failed: torch's OutOfMemoryError, or CUDA's, cuBLAS's or NCCL's words for it (a host
    MemoryError is not the GPU's)."""
    if isinstance(error, MemoryError):
        return False
    with contextlib.suppress(ImportError, AttributeError):
        import torch

        if isinstance(error, torch.OutOfMemoryError):
            return True
    text = str(error)[:4000].lower()
    return any(t in text for t in OUT_OF_MEMORY_TEXTS)


def new_pids(before: Occupancy, now: Occupancy) -> set[int]:
    """The processes NVML lists on the GPU now and did not list before the run: this rank's own, once its CUDA
    context exists, as NVML numbers them (in a container, the host's pids, which its /proc does not show)."""
    return {p.pid for p in now.processes} - {p.pid for p in before.processes}


def out_of_memory_message(now: Occupancy, before: Occupancy | None, ours: Collection[int], node: str) -> str:
    """An out-of-memory error on GPU `now.gpu`, said as `gpu_in_use` says a busy GPU: the memory in use at the
    error and the processes holding it that are not this run's (`ours`: the pids of this run's ranks on the node),
    with pid, command and MiB; what the preflight read before the run beside it. Without another process listed
    (NVML cannot see it, or the memory is this run's) it says what it saw and does not blame."""
    others = Occupancy(gpu=now.gpu, nvml_index=now.nvml_index, used_mib=now.used_mib, total_mib=now.total_mib,
                       processes=[p for p in now.processes if p.pid not in ours], error=now.error)
    shown = others if others.processes or not now.processes else now
    text = f"GPU {now.gpu} on node {node} ran out of memory: {shown.describe()} at this error"
    if shown is now:
        text += ", all of it this run's"
    elif others.processes:
        text += (f", {NOT_OURS}: another process took this GPU's memory after the preflight"
                 + (f" ({before.describe()} before the run)" if before is not None and before.used_mib is not None
                    else "") + ". Stop it, or run the test on idle GPUs")
    return text[:1000]


@dataclass
class Neighbours:
    """What one rank knows of the other processes on its GPU during the run: the pids that are its own (noted
    once its CUDA context exists, after the preflight) and, once another process took the GPU's memory, why the
    checks after that one do not run there (`taken`: the holder is named once, not once a check)."""

    local_rank: int
    own_pids: set[int] = field(default_factory=set)
    noted: bool = False
    taken: str | None = None

    def note_own_pids(self, before: Occupancy | None) -> None:
        """The pids NVML lists on this GPU now that it did not list before the run are this rank's, whichever pid
        namespace NVML numbers them in (a pod's /proc shows other numbers)."""
        self.noted = True
        if before is not None:
            with contextlib.suppress(Exception):
                self.own_pids = new_pids(before, read_own(self.local_rank))

    def explain(self, error: BaseException, before: Occupancy | None, session: Any) -> str | None:
        """An out-of-memory error on this GPU, said as the preflight says a busy GPU: NVML's processes on it that
        are not this run's ranks (out_of_memory_message); None for any other error."""
        if not out_of_memory(error):
            return None
        me = session.ranks[session.rank]
        ours = {info.pid for info in session.ranks if info.host == me.host} | self.own_pids
        with contextlib.suppress(Exception):
            return out_of_memory_message(read_own(self.local_rank), before, ours, me.node)
        return None

    def take(self, errors: list[Any], check: str) -> None:
        """The first stage error that names memory held by another process: the later checks are skipped for it."""
        taken = next((e for e in errors if NOT_OURS in e.error), None)
        if taken is not None and self.taken is None:
            self.taken = f"{taken.error.partition(': ')[2]} (in stage {check}): later checks on this GPU not run"
