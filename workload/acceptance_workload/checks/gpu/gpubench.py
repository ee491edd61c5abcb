"""Per-GPU checks built to name a slow GPU: bf16 GEMM, HBM copy, host-to-device and device-to-host copies.

Every value is the median of several timed windows, so one hiccup (a shared
host's stall, a clock dip) does not decide. GEMM is measured at the clock a
GPU sustains under its power limit: on H200 a burst runs at ~780 TFLOP/s for
~0.1 s at 1980 MHz, then settles near 1500 MHz and ~670-690 TFLOP/s, so
windows that straddle the change measure the change rather than the GPU. GEMM and HBM copies run on every
GPU of a node at once, as the GPUs work in training; host copies run one GPU
of each host at a time, because GPUs can share a PCIe switch's uplink to the
CPU and a concurrent measurement would judge the host, not the GPU's link.
Each GPU is judged against the profile's floor and against the median GPU of
its node; a value that could not be measured fails (fail closed). A GPU below
the ratio to its node's median is not named on one measurement: every GPU
measures that quantity again (so the median is measured again too), and the
GPU is named only when it is slow both times; its result says both values. A
transient (a neighbour's burst, a clock dip) then has to strike the same GPU
twice, seconds apart, to blame it (docs/thresholds.md has the numbers).

On a CPU smoke run (gloo) the same machinery measures a float32 matmul and a
memory copy on CPU tensors, judged only against the node's median; host
copies do not exist there and are skipped, never passed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.gpu.rules import RATIO_SUFFIX, RULES
from acceptance_workload.checks.gpu.spec import GpuCheck
from acceptance_workload.contract.results import ESTIMATED_SUFFIX, CheckResult
from acceptance_workload.contract.wire import parse_bytes
from acceptance_workload.report.model import GpuDetail, GpuRow, Skip

if TYPE_CHECKING:
    from acceptance_workload.contract.config import RunConfig
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.watchdog import Watchdog

SEED = 4321


@dataclass(frozen=True)
class Metric:
    """One per-GPU measurement: where it lives in GpuRow and how it is named; its two results (absolute and
    relative to the node's median GPU) are judged by their rows in the check's RULES (rules.py)."""

    field: str  # GpuRow attribute
    name: str  # CheckResult name of the absolute result; the relative one adds "_ratio_to_node_median"
    label: str  # for people
    cpu_label: str  # the same on a CPU smoke run
    host: bool  # a copy between host and device: one GPU of a node at a time, none on CPU

    def describe(self, cpu: bool) -> str:
        return self.cpu_label if cpu else self.label

    @property
    def unit(self) -> str:
        return RULES.rule(self.name).unit

    @property
    def ratio_name(self) -> str:
        return self.name + RATIO_SUFFIX


METRICS: tuple[Metric, ...] = (
    Metric("gemm_tflops", "gemm_tflops", "bf16 GEMM", "float32 matmul", host=False),
    Metric("hbm_gbps", "hbm_bandwidth", "HBM copy", "memory copy", host=False),
    Metric("h2d_gbps", "h2d_bandwidth", "host-to-device copy", "-", host=True),
    Metric("d2h_gbps", "d2h_bandwidth", "device-to-host copy", "-", host=True),
)


# --------------------------------------------------------------------------- judging (pure)


def _floor(check: GpuCheck, name: str, estimated: Collection[str]) -> tuple[float | None, bool]:
    """A result's threshold from its row, and whether it is one of the profile's estimates."""
    floor = RULES.threshold(name, check.thresholds)
    return floor, floor is not None and RULES.key(name) in estimated


def judge_gpus(check: GpuCheck, detail: GpuDetail, *, cpu: bool = False,
               estimated: Collection[str] = ()) -> tuple[list[CheckResult], list[Skip]]:
    """Two results per GPU and measurement: against the profile's floor, and against its node's median GPU.

    `cpu` (a CPU smoke run) skips the host copies with a reason.
    `estimated`: thresholds ("gpu.minGemmTflops") that are the profile's
    estimates; results judged by them carry estimated=True and say so.
    """
    results: list[CheckResult] = []
    skipped: list[Skip] = []
    nodes: dict[str, list[GpuRow]] = {}
    for row in detail.rows:
        nodes.setdefault(row.node, []).append(row)
    for m in METRICS:
        if m.host and cpu:
            skipped.append(Skip(check="gpu", name=m.name,
                                reason="CPU smoke run: no GPU, so no host-to-device or device-to-host copy"))
            continue
        floor, floor_estimated = _floor(check, m.name, estimated)
        ratio_floor, ratio_estimated = _floor(check, m.ratio_name, estimated)
        for rows in nodes.values():
            median = _median([getattr(r, m.field) for r in rows])
            again = _median([(r.again or {}).get(m.field) for r in rows])
            for r in rows:
                value = getattr(r, m.field)
                label = m.describe(cpu)
                results.append(_absolute(m, label, r, value, floor, floor_estimated))
                relative = _relative(m, label, r, value, median, len(rows), ratio_floor, ratio_estimated)
                if r.again is not None and m.field in r.again and relative.value is not None:
                    relative = _confirmed(m, label, r, relative, r.again[m.field], again, ratio_floor, ratio_estimated)
                results.append(relative)
    return results, skipped


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None and v > 0]
    return statistics.median(present) if present else None


def suspects(results: list[CheckResult]) -> list[str]:
    """The GpuRow fields whose ratio to the node's median failed on some GPU (measured, not missing): measure again."""
    failed = {r.name for r in results if r.check == "gpu" and not r.passed and r.value is not None}
    return [m.field for m in METRICS if f"{m.name}{RATIO_SUFFIX}" in failed]


def _confirmed(m: Metric, label: str, r: GpuRow, first: CheckResult, value: float | None, median: float | None,
               floor: float | None, estimated: bool) -> CheckResult:
    """The ratio measured twice: the GPU passes when either time reached the floor (named only when slow both)."""
    assert first.value is not None
    if value is None or median is None:
        return _result(r, first.name, first.value, "", floor, f"{first.message}; measured again: "
                       f"{'not measured' if value is None else f'no GPU of node {r.node} measured it'}", estimated)
    ratio = round(value / median, 4)
    best = max(first.value, ratio)
    slow = floor is not None and best < floor
    verdict = "slow both times" if slow else "not slow the second time: not blamed"
    message = (f"{first.message}; measured again: {_num(value)} {m.unit} = {ratio:.3f} x the node's median "
               f"{_num(median)} ({verdict})")
    return _result(r, first.name, best, "", floor, message, estimated)


def _num(v: float) -> str:
    """700.1234 -> '700.1', 0.00345 -> '0.00345' (CPU smoke values are small)."""
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.4g}"


def _where(r: GpuRow) -> str:
    return f"GPU {r.gpu} on node {r.node}"


def _missing(label: str, r: GpuRow) -> str:
    return f"{_where(r)}: {label} not measured" + (f" ({r.error})" if r.error else "")


def _result(r: GpuRow, name: str, value: float | None, unit: str, threshold: float | None,
            message: str, estimated: bool) -> CheckResult:
    out = RULES.judged(name, value, threshold, unit=unit,
                       message=message + (ESTIMATED_SUFFIX if estimated else ""), node=r.node, gpu=r.gpu)
    out.estimated = True if estimated else None
    return out


def _absolute(m: Metric, label: str, r: GpuRow, value: float | None, floor: float | None,
              estimated: bool) -> CheckResult:
    message = _missing(label, r) if value is None else f"{_where(r)}: {label} {_num(value)} {m.unit}"
    return _result(r, m.name, value, m.unit, floor, message, estimated)


def _relative(m: Metric, label: str, r: GpuRow, value: float | None, median: float | None, gpus: int,
              floor: float | None, estimated: bool) -> CheckResult:
    name = f"{m.name}{RATIO_SUFFIX}"
    if value is None:
        return _result(r, name, None, "", floor, _missing(label, r), estimated)
    if median is None:
        return _result(r, name, None, "", floor, f"{_where(r)}: no GPU of node {r.node} measured {label}",
                       estimated)
    ratio = round(value / median, 4)
    alone = " (the only GPU of its node)" if gpus == 1 else ""
    message = (f"{_where(r)}: {label} {_num(value)} {m.unit} = {ratio:.3f} x the node's median "
               f"{_num(median)}{alone}")
    return _result(r, name, ratio, "", floor, message, estimated)


# --------------------------------------------------------------------------- measuring (torch)


def _windows(op: Callable[[], Any], check: GpuCheck, device: Any, warmup_seconds: float = 0.0) -> list[float]:
    """Seconds of each timed window of check.iters operations.

    First untimed: check.warmup_iters operations, then more until
    `warmup_seconds` have passed (a GPU's clock under sustained load is not its
    first burst's).
    """
    import torch

    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(check.warmup_iters):
        op()
    sync()
    deadline = time.perf_counter() + warmup_seconds
    while time.perf_counter() < deadline:
        for _ in range(check.iters):
            op()
        sync()
    out = []
    for _ in range(check.windows):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(check.iters):
                op()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            for _ in range(check.iters):
                op()
            out.append(time.perf_counter() - t0)
    return out


@dataclass
class Measured:
    """A rate (the median of the windows' rates) and the spread of those rates."""

    value: float | None
    spread: float | None


def rate(work_per_op: float, seconds: list[float], iters: int, *, best: bool = False) -> Measured:
    """Work per second at the median window (best: at the fastest); the spread is (max - min) / median.

    A GPU is judged at its median window, so one hiccup does not decide. CPU processes of a smoke run share
    the host's cores with everything else on it: a busy host slows whole windows of a healthy process
    (0.17 of the median at load average 6), so there the fastest window says what the process can do. A
    process stopped most of the time (SIGSTOP cycles longer than a window) has no fast window either.
    """
    rates = [work_per_op * iters / s for s in seconds if s > 0]
    if not rates or len(rates) < len(seconds):
        return Measured(None, None)
    median = statistics.median(rates)
    return Measured(max(rates) if best else median, (max(rates) - min(rates)) / median if median > 0 else None)


def gemm(n: int, device: Any) -> Callable[[], Any]:
    """One bf16 (float32 on CPU) C = A @ B of N x N random data (2 N^3 FLOP): the per-GPU check's and the soak's."""
    import torch

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(SEED)
    a = torch.randn(n, n, generator=gen, device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    return lambda: torch.mm(a, b, out=c)


def measure_gemm(check: GpuCheck, device: Any) -> Measured:
    """bf16 (float32 on CPU) C = A @ B with N = check.gemm_size, random non-zero data: TFLOP/s."""
    n = check.gemm_size
    seconds = _windows(gemm(n, device), check, device, warmup_seconds=check.gemm_warmup_seconds)
    return rate(2 * n**3 / 1e12, seconds, check.iters, best=device.type != "cuda")


def measure_hbm(check: GpuCheck, device: Any) -> Measured:
    """Device-to-device copy (memory copy on CPU): GB/s counting bytes read plus bytes written."""
    import torch

    size = parse_bytes(check.hbm_bytes)
    gen = torch.Generator(device=device).manual_seed(SEED)
    src = torch.randint(1, 255, (size,), generator=gen, device=device, dtype=torch.uint8)
    dst = torch.empty_like(src)
    seconds = _windows(lambda: dst.copy_(src), check, device)
    return rate(2 * size / 1e9, seconds, check.iters, best=device.type != "cuda")


def host_buffers(check: GpuCheck, device: Any) -> tuple[Any, Any]:
    """A pinned host buffer of check.host_bytes random non-zero bytes, and a device buffer of the same size.

    Made on every GPU at once before the host copies take their turns: filling and pinning 256Mi takes about
    a second of CPU, which the turns would otherwise spend one GPU after another, timing nothing.
    """
    import torch

    size = parse_bytes(check.host_bytes)
    host = torch.randint(1, 255, (size,), dtype=torch.uint8).pin_memory()
    return host, torch.empty(size, device=device, dtype=torch.uint8)


def measure_host(check: GpuCheck, device: Any, buffers: tuple[Any, Any] | None = None) -> tuple[Measured, Measured]:
    """Host-to-device and device-to-host copies of check.host_bytes through pinned host memory: GB/s."""
    host, dev = buffers if buffers is not None else host_buffers(check, device)
    h2d = _windows(lambda: dev.copy_(host, non_blocking=True), check, device)
    d2h = _windows(lambda: host.copy_(dev, non_blocking=True), check, device)
    size = host.numel()
    return rate(size / 1e9, h2d, check.iters), rate(size / 1e9, d2h, check.iters)


class _Mine:
    """This rank's values, the spread of their windows, and the errors that stopped a measurement."""

    def __init__(self) -> None:
        self.values: dict[str, float | None] = {m.field: None for m in METRICS}
        self.spreads: list[float] = []
        self.errors: list[str] = []

    def take(self, what: str, measure: Callable[[], Measured | tuple[Measured, ...]], *fields: str) -> None:
        """Run one measurement; an error (out of memory, a CUDA fault) leaves its values missing and is recorded."""
        try:
            out = measure()
        except Exception as e:  # the GPU is judged, not the run ended: its values stay missing and fail
            self.errors.append(f"{what}: {type(e).__name__}: {str(e)[:300]}")
            return
        finally:
            _free()
        for f, m in zip(fields, out if isinstance(out, tuple) else (out,), strict=True):
            self.values[f] = None if m.value is None else float(f"{m.value:.5g}")
            if m.spread is not None:
                self.spreads.append(m.spread)

    def to_json(self) -> dict[str, Any]:
        return {**self.values, "spread": round(max(self.spreads), 4) if self.spreads else None,
                "error": "; ".join(self.errors) or None}


def _free() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def run_gpu(session: Session, config: RunConfig, watchdog: Watchdog,
            progress: Callable[[str], None] | None = None) -> tuple[list[CheckResult], list[Skip], GpuDetail] | None:
    """Measure every GPU, gather to rank 0 and judge there; (results, skips, detail) on rank 0, None elsewhere.

    When a GPU falls below the ratio to its node's median, every GPU measures that quantity again (rank 0
    decides, every rank follows) and the judgement uses both measurements.
    """
    check = config.checks.gpu
    control = session.control
    cpu = session.device.type != "cuda"
    control.allgather("gpu start", None)  # every GPU starts together, as in training
    all_fields = [m.field for m in METRICS if not (cpu and m.host)]
    gathered = control.gather("gpu", _measure(session, check, watchdog, all_fields).to_json())
    detail = results = skipped = None
    if gathered is not None:
        detail = GpuDetail(
            gemm_size=check.gemm_size, hbm_bytes=parse_bytes(check.hbm_bytes),
            host_bytes=parse_bytes(check.host_bytes), windows=check.windows, iters=check.iters,
            rows=[GpuRow(rank=i.rank, node=i.node, gpu=i.gpu, **(g or {})) for i, g in
                  zip(session.ranks, gathered, strict=True)],
        )
        results, skipped = judge_gpus(check, detail, cpu=cpu, estimated=config.estimated_thresholds)
    again = control.broadcast("gpu measure again", None if results is None else suspects(results))
    if again:
        if progress:
            progress(f"gpu: a GPU below its node's median ({', '.join(again)}): every GPU measures that again")
        mine = _measure(session, check, watchdog, again, label=" again").to_json()
        second = control.gather("gpu again", {f: mine[f] for f in again})
        if detail is not None and second is not None:
            for row, values in zip(detail.rows, second, strict=True):
                row.again = values
            results, skipped = judge_gpus(check, detail, cpu=cpu, estimated=config.estimated_thresholds)
    if detail is None or results is None or skipped is None:
        return None
    if progress:
        progress("gpu: " + headline(detail, results, cpu))
    return results, skipped, detail


def _measure(session: Session, check: GpuCheck, watchdog: Watchdog, fields: Collection[str],
             label: str = "") -> _Mine:
    """This rank's measurements of `fields` (every rank passes the same ones: the steps must match)."""
    device = session.device
    mine = _Mine()
    if device.type == "cuda":
        if "gemm_tflops" in fields:
            with watchdog.step(f"gpu gemm{label}"):
                mine.take("gemm", lambda: measure_gemm(check, device), "gemm_tflops")
            session.control.allgather(f"gpu gemm done{label}", None)
        if "hbm_gbps" in fields:
            with watchdog.step(f"gpu hbm{label}"):
                mine.take("hbm copy", lambda: measure_hbm(check, device), "hbm_gbps")
        if "h2d_gbps" in fields or "d2h_gbps" in fields:
            with watchdog.step(f"gpu host buffers{label}"):
                try:
                    buffers: tuple[Any, Any] | None = host_buffers(check, device)
                except Exception:  # made again in this GPU's turn, where the error is recorded against it
                    buffers = None
            _host_turns(session, watchdog, lambda: mine.take(
                "host copy", lambda: measure_host(check, device, buffers), "h2d_gbps", "d2h_gbps"))
            del buffers
            _free()
        return mine
    # CPU processes share the host's cores: measured one at a time, or whichever process the
    # scheduler starves (3 processes on 2 cores) looks slow next to the others.
    _rank_turns(session, watchdog, lambda: (
        "gemm_tflops" in fields and mine.take("gemm", lambda: measure_gemm(check, device), "gemm_tflops"),
        "hbm_gbps" in fields and mine.take("hbm copy", lambda: measure_hbm(check, device), "hbm_gbps")))
    return mine


def _rank_turns(session: Session, watchdog: Watchdog, measure: Callable[[], object]) -> None:
    """One rank of the whole job at a time; every rank enters every turn (same steps, same counters)."""
    for turn in range(session.world_size):
        session.control.allgather(f"gpu turn {turn}", None)
        with watchdog.step(f"gpu measurements, rank {turn}"):
            if session.rank == turn:
                measure()


def _host_turns(session: Session, watchdog: Watchdog, measure: Callable[[], None]) -> None:
    """Host copies one GPU of each physical host at a time; every rank enters every turn (same steps, counters).

    Hosts are told apart by the kernel's boot id, not by node name: simulated nodes on one machine share its
    PCIe and memory, so their copies take turns too (measured at once, 4 simulated nodes of a 4x H100 host read
    34-42 GB/s where one at a time reads ~55).
    """
    hosts = session.control.allgather("gpu host ids", host_id(session.env.node))
    turn, turns = host_turn(hosts, session.rank)
    for step in range(turns):
        session.control.allgather(f"gpu host turn {step}", None)
        with watchdog.step(f"gpu host copies, GPU {step} of each host"):
            if step == turn:
                measure()


def host_id(fallback: str) -> str:
    """This machine's boot id (one per running kernel: pods on one node share it); the node name if unreadable."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or fallback
    except OSError:
        return fallback


def host_turn(hosts: list[str], rank: int) -> tuple[int, int]:
    """(this rank's turn, the number of turns): ranks on one host go one after another, hosts side by side."""
    own = [r for r, h in enumerate(hosts) if h == hosts[rank]]
    return own.index(rank), max(hosts.count(h) for h in set(hosts))


def headline(detail: GpuDetail, results: list[CheckResult], cpu: bool = False) -> str:
    """Medians over all GPUs and the failures, for the progress line."""
    parts = []
    for m in METRICS:
        values = [getattr(r, m.field) for r in detail.rows if getattr(r, m.field) is not None]
        if values:
            parts.append(f"{m.describe(cpu)} median {_num(statistics.median(values))} {m.unit}")
    failed = sum(1 for r in results if not r.passed)
    return ", ".join(parts) + f"; {failed} of {len(results)} failed"
