"""checks.soak, the burn-in: after the other checks, every GPU runs GEMM at full load while the ranks keep all_reduce
traffic going (NVLink inside a node, the fabric between nodes) for durationSeconds, each GPU watched through NVML
(nvmlwatch.py) and judged minute by minute (soakjudge.py).

The load goes in rounds. A round launches K all_reduces of a large buffer (asynchronous: they run on NCCL's
stream beside the GEMMs), then G GEMMs timed on the GPU (CUDA events: a GPU that slows, or another process that
shares it, shows as fewer TFLOP/s of its own, not as the wait for a slower peer), then waits for the all_reduces
and agrees with every other rank, in one small all_reduce, on whether the window (30 s) or the soak is over and on
the next K (the smallest any rank proposes: traffic about as long as the GEMMs). G is each rank's own, sized to
~0.25 s of GEMM. Every window is a watchdog step bounded by its length plus the collective timeout, and the
heartbeats beat on their own thread (watchdog.py), so hours of load trip neither timeout while a hung rank still
does. After each window the ranks share their latest TFLOP/s and temperature; rank 0 logs the worst GPU so far and
writes it as the run's progress (evidence.PROGRESS_KEY) at most every 30 s.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.soak import soakjudge
from acceptance_workload.checks.soak.nvmlwatch import Watch, Watched
from acceptance_workload.checks.soak.soakjudge import Who, Window
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import Skip, SoakDetail
from acceptance_workload.runtime import gpus

if TYPE_CHECKING:
    from acceptance_workload.contract.config import RunConfig
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.stages import StageRunner
    from acceptance_workload.runtime.watchdog import Watchdog

WINDOW_SECONDS = 30.0  # one window of the load; two make a judged minute
PROGRESS_SECONDS = 30.0  # the progress is written at most this often
ROUND_SECONDS = 0.25  # GEMM time each rank aims a round at
WARM_UP_SECONDS = 15.0  # untimed rounds first (GPU): K grows x1.25 a round, from 1 to ~200 in ~6 s
CPU_WARM_UP_SECONDS = 1.0
ALL_REDUCE_BYTES = {"cuda": 256 << 20, "cpu": 1 << 20}
MAX_ALL_REDUCES = {"cuda": 256, "cpu": 2}  # per round
LONE_GPU = "one GPU in the run, no other GPU of its node to compare it with"
NOT_ON_CPU = ("not applicable on a CPU smoke run: no GPU and no NVML to watch; clocks, throttling, temperatures, "
              "ECC, remaps, PCIe, NVLink and XIDs were not judged (never a hardware pass)")
UNWATCHABLE = ("clock_event_reasons", "gpu_temp_c", "mem_temp_c", "pcie_replays", "ecc_uncorrected", "row_remaps",
               "xid")


def open_watch(session: Session, sample_seconds: float, duration: float) -> tuple[Watch | None, Watched | None]:
    """This rank's NVML watch; when NVML cannot be opened, a Watched that says so for every reading (fail closed)."""
    try:
        nvml = gpus.nvml_init()
        target = gpus.nvml_target(session.env.local_rank, os.environ)
        bin_seconds = max(sample_seconds, duration / soakjudge.MAX_POINTS)
        return Watch(nvml, target, sample_seconds, bin_seconds).open(), None
    except Exception as e:
        why = f"NVML could not be opened: {type(e).__name__}: {e}"[:200]
        return None, Watched(unsupported=dict.fromkeys(UNWATCHABLE, why))


class Load:
    """This rank's GEMMs and its share of the all_reduce traffic, window by window."""

    def __init__(self, session: Session, gemm_size: int):
        import torch

        from acceptance_workload.checks.gpu import gpubench

        self.session, self.torch = session, torch
        self.device = session.device
        self.kind = "cuda" if self.device.type == "cuda" else "cpu"
        self.gemm = gpubench.gemm(gemm_size, self.device)
        self.flops = 2.0 * gemm_size**3
        self.buffer = torch.full((ALL_REDUCE_BYTES[self.kind] // 4,), float(session.rank + 1), device=self.device)
        self.g, self.k, self.all_reduces = 1, 1, 0
        self._last_flops = 0.0

    def warm_up(self, seconds: float) -> None:
        """Rounds for `seconds`, not timed: the clocks settle under the power limit and the all_reduces per round
        grow to their steady number, so the first judged minutes are already the load the others are."""
        start = time.monotonic()
        over = False
        while not over:
            _, over, _ = self.round(time.monotonic() - start >= seconds, False)

    def round(self, stop_window: bool, done: bool) -> tuple[float, bool, bool]:
        """One round: K all_reduces beside G GEMMs, then the agreement; (GEMM seconds, window over, soak over)."""
        import torch.distributed as dist

        torch = self.torch
        handles = [dist.all_reduce(self.buffer, op=dist.ReduceOp.MAX, async_op=True) for _ in range(self.k)]
        self.all_reduces += self.k
        if self.kind == "cuda":
            start, end, after = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            start.record()
            for _ in range(self.g):
                self.gemm()
            end.record()
            for h in handles:
                h.wait()
            after.record()
            after.synchronize()
            gemm, tail = start.elapsed_time(end) / 1e3, end.elapsed_time(after) / 1e3
        else:
            t = time.perf_counter()
            for _ in range(self.g):
                self.gemm()
            gemm = time.perf_counter() - t
            for h in handles:
                h.wait()
            tail = time.perf_counter() - t - gemm
        proposal = max(self.k + 1, int(self.k * 1.25)) if tail <= 0.1 * gemm else max(
            1, int(self.k * gemm / (gemm + tail)))
        ctrl = torch.tensor([float(stop_window), float(done), -float(min(proposal, MAX_ALL_REDUCES[self.kind]))],
                            device=self.device)
        dist.all_reduce(ctrl, op=dist.ReduceOp.MAX)
        window_over, soak_over, neg_k = ctrl.tolist()
        self._last_flops = self.flops * self.g
        self.k = max(1, int(-neg_k))
        self.g = max(1, min(100_000, round(self.g * ROUND_SECONDS / gemm))) if gemm > 0 else self.g * 2
        return gemm, bool(window_over), bool(soak_over)

    def window(self, t0: float, duration: float) -> tuple[Window, bool]:
        """Rounds until every rank agrees the window (or the soak) is over."""
        start = time.monotonic() - t0
        flops = seconds = 0.0
        while True:
            now = time.monotonic() - t0
            gemm, over, done = self.round(now - start >= WINDOW_SECONDS or now >= duration, now >= duration)
            flops += self._last_flops
            seconds += gemm
            if over or done:
                return Window(start, time.monotonic() - t0, flops, seconds), done


class Progress:
    """Rank 0's progress: a log line every window, the progress key at most every PROGRESS_SECONDS."""

    def __init__(self, config: RunConfig, log: Callable[[str], None] | None, duration: float):
        self.test, self.log, self.duration = config.test, log, duration
        self.last_write = -PROGRESS_SECONDS
        self.writing = False

    def update(self, elapsed: float, worst: soakjudge.Worst | None) -> None:
        """`worst`: the worst GPU so far, its line and its ratio (a sweep's parent names the worst of its nodes by
        the ratio)."""
        line = f"soak: {elapsed:.0f}/{self.duration:.0f} s" + (f"; worst GPU so far {worst.line}" if worst else "")
        if self.log:
            self.log(line)
        if self.test is None or elapsed - self.last_write < PROGRESS_SECONDS or self.writing:
            return
        self.last_write = elapsed
        text = json.dumps({"check": "soak", "elapsedSeconds": int(elapsed), "totalSeconds": int(self.duration),
                           "worst": worst.line if worst else "",
                           "updated": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                           **({"worstRatio": round(worst.ratio, 4)} if worst else {})})
        self.writing = True
        threading.Thread(target=self._write, args=(text,), name="gpu-acceptance-progress", daemon=True).start()

    def _write(self, text: str) -> None:
        from acceptance_workload.report.status import patch_progress

        try:
            assert self.test is not None
            patch_progress(self.test, text, timeout=10.0)
        except Exception as e:  # progress is a courtesy: the run goes on
            print(f"gpu-acceptance: soak progress not written: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr,
                  flush=True)
        finally:
            self.writing = False


def stage(runner: StageRunner, session: Session, watchdog: Watchdog) -> None:
    """The soak's stage in the run (this package's CHECK in the registry): its results and detail into rank 0's
    report."""
    check = runner.config.checks.soak
    line = (f"soak: GEMM on every GPU and all_reduce across {session.world_size} ranks for "
            f"{check.duration_seconds} s" + ("" if session.device.type != "cuda" else
                                             f", NVML sampled every {check.sample_seconds:g} s"))
    runner.report.soak = runner.run_stage(session, "soak", line, lambda: run_soak(
        session, runner.config, watchdog, progress=runner.progress))
    if runner.is_root:
        runner.progress(headline([r for r in runner.report.results if r.check == "soak"],
                                 soakjudge.minute_count(check.duration_seconds)))


def run_soak(session: Session, config: RunConfig, watchdog: Watchdog,
             progress: Callable[[str], None] | None = None) -> tuple[list[CheckResult], list[Skip], SoakDetail] | None:
    """The burn-in on every rank; (results, skips, detail) on rank 0, None elsewhere."""
    check, control = config.checks.soak, session.control
    duration = float(check.duration_seconds)
    cpu = session.device.type != "cuda"
    watch, unwatched = (None, None) if cpu else open_watch(session, check.sample_seconds, duration)
    load = Load(session, config.checks.gpu.gemm_size)
    warm = CPU_WARM_UP_SECONDS if cpu else max(WARM_UP_SECONDS, config.checks.gpu.gemm_warmup_seconds)
    with watchdog.step("soak warm-up", timeout=warm + session.collective_timeout):
        load.warm_up(warm)
    control.allgather("soak start", None)
    t0 = time.monotonic()
    if watch is not None:
        watch.start(t0)
    windows = _load(session, load, watchdog, t0, duration, watch, Progress(config, progress, duration))
    watched = watch.stop() if watch is not None else unwatched
    who = Who(session.rank, session.env.node, session.ranks[session.rank].gpu)
    verdict = soakjudge.judge_gpu(check.thresholds, who, windows, watched, duration, config.estimated_thresholds)
    minutes = soakjudge.minute_tflops(windows, soakjudge.minute_count(duration))
    mine = {"results": [r.to_wire() for r in verdict.results], "detail": verdict.detail.to_wire() if verdict.detail
            else None, "minutes": minutes, "allReduces": load.all_reduces}
    del load
    gathered = control.gather("soak", mine)
    if gathered is None:
        return None
    if progress:  # the per-minute view in the log: every GPU's TFLOP/s minute by minute
        for line in soakjudge.minute_table([(Who(i.rank, i.node, i.gpu), part["minutes"])
                                            for i, part in zip(session.ranks, gathered, strict=True)]):
            progress(f"soak: {line}")
    return _assemble(session, config, gathered, cpu)


def _load(session: Session, load: Load, watchdog: Watchdog, t0: float, duration: float, watch: Watch | None,
          progress: Progress) -> list[Window]:
    """Windows of load until the duration has passed; after each, every rank hands rank 0 its latest minute's numbers
    for the progress (the ranks stay in step through the load's own all_reduces)."""
    windows: list[Window] = []
    done = False
    step_limit = WINDOW_SECONDS + session.collective_timeout
    while not done:
        with watchdog.step(f"soak window {len(windows)}", timeout=step_limit):
            window, done = load.window(t0, duration)
        windows.append(window)
        minute = soakjudge.minute_tflops(windows, soakjudge.minute_count(window.end))
        temperature = watch.peek()[0] if watch is not None else None
        shared = session.control.gather(f"soak window {len(windows) - 1} done",  # rank 0's progress alone
                                        {"minutes": minutes_so_far(minute), "temperature": temperature})
        if shared is not None:
            worst = soakjudge.worst_gpu([(Who(i.rank, i.node, i.gpu), s["minutes"], s["temperature"])
                                         for i, s in zip(session.ranks, shared, strict=True)])
            progress.update(window.end, worst)
    return windows


def minutes_so_far(per_minute: list[float | None]) -> list[float | None]:
    """The minutes to share: at most the first SETTLE_MINUTES and the latest (the progress line needs no more)."""
    keep = soakjudge.SETTLE_MINUTES
    return per_minute if len(per_minute) <= keep + 1 else per_minute[:keep] + per_minute[-1:]


def _assemble(session: Session, config: RunConfig, gathered: list[Any],
              cpu: bool) -> tuple[list[CheckResult], list[Skip], SoakDetail]:
    """Rank 0: every GPU's own results, the ratios to each node's median GPU, the detail and the skips."""
    from acceptance_workload.report.model import SoakGpu

    check = config.checks.soak
    who = [Who(i.rank, i.node, i.gpu) for i in session.ranks]
    results = [CheckResult.model_validate(r) for part in gathered for r in part["results"]]
    results += soakjudge.node_ratios(check.thresholds, [(w, part["minutes"]) for w, part in
                                                        zip(who, gathered, strict=True)], config.estimated_thresholds)
    detail = SoakDetail(duration_seconds=float(check.duration_seconds), sample_seconds=check.sample_seconds,
                        gemm_size=config.checks.gpu.gemm_size,
                        all_reduce_bytes=ALL_REDUCE_BYTES["cpu" if cpu else "cuda"],
                        all_reduces=int(gathered[0]["allReduces"]), nvml=not cpu,
                        gpus=[SoakGpu.model_validate(p["detail"]) for p in gathered if p["detail"]])
    skipped = [Skip(check="soak", name="nvml", reason=NOT_ON_CPU)] if cpu else []
    skipped += [Skip(check="soak", name="tflops_ratio_to_node_median", reason=f"node {node}: {LONE_GPU}")
                for node in soakjudge.lone_gpu_nodes(who)]
    return results, skipped, detail


def headline(results: list[CheckResult], minutes: int) -> str:
    """For the progress line at the end: `minutes` judged (a last part-minute is judged as one, soakjudge)."""
    bad = [r for r in results if not r.passed]
    return (f"soak: {minutes} minute(s), {len(results) - len(bad)}/{len(results)} passed"
            + (f"; failed: {'; '.join(r.message for r in bad[:3])}" if bad else ""))

