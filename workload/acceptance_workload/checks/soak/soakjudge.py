"""Judging the burn-in (checks.soak) minute by minute: pure functions of what the load measured and the NVML watch
saw (nvmlwatch.py), so the same judgement runs on a GPU node, on a replayed series in the tests, and names the
minute of every failure.

Each rank judges its own GPU (its minutes never leave the rank, only the verdicts and a downsampled series do);
rank 0 judges each GPU's minutes against its node's median GPU (`node_ratios`). Every result is built through the
rule table (rules.py), so the operator re-judges it the same way. Minutes count from 0 at the start of the load.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection
from dataclasses import dataclass, field

from acceptance_workload.checks.signals.xids import xid_text
from acceptance_workload.checks.soak.nvmlwatch import MINUTE_SECONDS, Minute, Watched
from acceptance_workload.checks.soak.rules import RULES
from acceptance_workload.checks.soak.spec import SoakThresholds
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import SoakEvent, SoakGpu, SoakSeries

SETTLE_MINUTES = 2  # the "first minutes" each GPU is compared with: at most half of the run's minutes
# NVLink CRC counters that grow on healthy links while the soak's all_reduce traffic starts: on 4 healthy H200s
# (docs/benchmarks-data/h200-soak-2026-11-28) every GPU's links counted ~5,000-6,200 crc_data errors in minute 0,
# up to 335 in minute 1 and none after. Their growth in the settling minutes is recorded, not judged; replay and
# recovery counters are judged from minute 0.
SETTLING_COUNTERS = ("crc_flit", "crc_data")
MAX_POINTS = 120  # points of each plotted series per GPU, whatever the duration (docs/benchmarks.md)
BYTES_PER_GPU = 10_000  # what one GPU's soak evidence (series, events, results) stays under, whatever the duration
MAX_EVENTS = 50  # events kept per GPU in the evidence (the rest counted)
@dataclass
class Window:
    """One window of the load on one GPU: when, the GEMM work done and the GPU time it took."""

    start: float
    end: float
    flops: float
    gemm_seconds: float

    @property
    def tflops(self) -> float | None:
        return self.flops / self.gemm_seconds / 1e12 if self.gemm_seconds > 0 else None


@dataclass
class Who:
    rank: int
    node: str
    gpu: int

    def label(self) -> str:
        return f"{self.node} GPU {self.gpu}"


@dataclass
class GpuVerdict:
    results: list[CheckResult] = field(default_factory=list)
    detail: SoakGpu | None = None


def minute_tflops(windows: list[Window], minutes: int) -> list[float | None]:
    """TFLOP/s of each minute: the GEMM work of the windows that started in it over their GEMM time."""
    work, secs = [0.0] * minutes, [0.0] * minutes
    for w in windows:
        m = min(minutes - 1, int(w.start // MINUTE_SECONDS))
        work[m] += w.flops
        secs[m] += w.gemm_seconds
    return [work[m] / secs[m] / 1e12 if secs[m] > 0 else None for m in range(minutes)]


def minute_count(duration: float) -> int:
    return max(1, math.ceil(duration / MINUTE_SECONDS - 1e-9))


def _at(watched: Watched | None, index: int, gauge: str = "gpu_temp_c") -> str:
    m = None if watched is None else next((m for m in watched.minutes if m.index == index), None)
    value = None if m is None else m.peak(gauge)
    return "" if value is None else f", {value:.0f} C then"


class _Judge:
    """The results of one GPU, each through RULES.result with the GPU named."""

    def __init__(self, th: SoakThresholds, who: Who, estimated: Collection[str]):
        self.th, self.who, self.estimated = th, who, estimated
        self.results: list[CheckResult] = []
        self.events: list[SoakEvent] = []

    def add(self, name: str, value: float | None, message: str, passed: bool | None = None) -> CheckResult:
        r = RULES.result(name, value, self.th, node=self.who.node, gpu=self.who.gpu, passed=passed,
                         estimated=self.estimated, message=f"{self.who.label()}: {message}")
        self.results.append(r)
        return r

    def unreadable(self, name: str, reading: str, watched: Watched, text: str) -> None:
        """A reading NVML does not give: a failure where the judgement needs it, else only in the detail's list."""
        if needed(reading, self.th, watched):
            self.add(name, None, f"{text}: {watched.unsupported[reading]}")

    def event(self, t: float, kind: str, text: str) -> None:
        self.events.append(SoakEvent(t=round(t, 1), kind=kind, text=text))


def judge_tflops(j: _Judge, per_minute: list[float | None], watched: Watched | None) -> None:
    """The GPU's median minute (recorded) and its slowest minute against its settled first minutes."""
    values = [v for v in per_minute if v is not None]
    j.add("tflops", float(f"{statistics.median(values):.4g}") if values else None,
          f"median minute {statistics.median(values):.4g} TFLOP/s over {len(values)} minute(s)" if values
          else "no minute of GEMM was measured")
    settle = max(1, min(SETTLE_MINUTES, len(per_minute) // 2))
    first = [v for v in per_minute[:settle] if v is not None]
    if not first or len(values) < len(per_minute):
        missing = [m for m, v in enumerate(per_minute) if v is None]
        j.add("tflops_ratio_to_first_minutes", None, f"no GEMM measured in minute(s) {missing[:10]}")
        return
    base = statistics.median(first)
    later = list(enumerate(per_minute))[settle:] or list(enumerate(per_minute))
    ratios = [(m, v / base) for m, v in later if v is not None]
    worst_m, worst = min(ratios, key=lambda x: x[1])
    floor = RULES.threshold("tflops_ratio_to_first_minutes", j.th)
    below = [m for m, r in ratios if floor is not None and r < floor]
    if below:
        m0 = below[0]
        v0 = per_minute[m0] or 0.0
        text = (f"slowed from minute {m0}: {v0:.4g} TFLOP/s ({v0 / base:.2f} of its first minutes' {base:.4g})"
                f"{_at(watched, m0)}; slowest minute {worst_m} at {worst:.2f}")
        j.event(m0 * MINUTE_SECONDS, "slowdown", text)
    else:
        text = f"slowest minute {worst_m} at {worst:.3f} of its first {settle} minute(s)' {base:.4g} TFLOP/s"
    j.add("tflops_ratio_to_first_minutes", round(worst, 4), text)


def judge_throttle(j: _Judge, watched: Watched) -> None:
    if "clock_event_reasons" in watched.unsupported:
        j.unreadable("throttle", "clock_event_reasons", watched, "clock event reasons cannot be read")
        return
    total, first = 0.0, None
    for m in watched.minutes:
        for reason, seconds in m.throttle.items():
            total += seconds
            t = m.first_throttle.get(reason, m.index * MINUTE_SECONDS)
            j.event(t, "throttle", f"{reason} in minute {m.index}{_at(watched, m.index)}")
            if first is None or t < first[0]:
                first = (t, reason, m.index)
    if first is None:
        j.add("throttle", 0.0, "no hardware, thermal or power-brake slowdown (a power cap at the limit is normal)")
        return
    t, reason, minute = first
    j.add("throttle", round(total, 1), f"{reason} from minute {minute} (t={t:.0f}s){_at(watched, minute)}; "
          f"{total:.0f}s of slowdown in all")


def judge_temperature(j: _Judge, watched: Watched, name: str, gauge: str, what: str) -> None:
    if gauge in watched.unsupported:
        j.unreadable(name, gauge, watched, f"{what} temperature cannot be read")
        return
    peaks = [(m.peak(gauge), m.index) for m in watched.minutes if m.peak(gauge) is not None]
    if not peaks:
        j.add(name, None, f"no {what} temperature was read")
        return
    value, minute = max(peaks, key=lambda p: (p[0], -p[1]))
    j.add(name, value, f"hottest {what} {value:.0f} C in minute {minute}")


def growth(watched: Watched, key: str) -> list[tuple[int, float]]:
    """(minute, growth of counter `key` in it), from the value before the load on."""
    prev = watched.start.get(key)
    out = []
    for m in watched.minutes:
        cur = m.counters.get(key)
        if cur is None:
            continue
        if prev is not None and cur > prev:
            out.append((m.index, cur - prev))
        prev = cur
    return out


def judge_counter(j: _Judge, watched: Watched, name: str, keys: list[str], what: str, rate: bool,
                  reading: str = "", settle_minutes: int = 0) -> None:
    """Growth of `keys` (one result): per minute (rate: the largest growth of one key in one minute) or in all;
    CRC counters' growth before `settle_minutes` is not judged (SETTLING_COUNTERS)."""
    unsupported = [k for k in (reading, *keys) if k in watched.unsupported]
    if unsupported:
        j.unreadable(name, unsupported[0], watched, f"{what} cannot be read ({', '.join(unsupported[:4])})")
        return
    limit = RULES.threshold(name, j.th) if rate else 0.0
    grown: list[tuple[int, float, str]] = []  # (minute, growth, counter)
    settling = 0.0  # CRC growth of the settling minutes: recorded as events, not judged
    for key in keys:
        for minute, grew in growth(watched, key):
            j.event(minute * MINUTE_SECONDS, name, f"{key} +{grew:g} in minute {minute}")
            if minute < settle_minutes and key.endswith(SETTLING_COUNTERS):
                settling += grew
            else:
                grown.append((minute, grew, key))
    excused = (f"; {settling:g} CRC errors in minute(s) 0-{settle_minutes - 1} not judged (links settling under "
               "the new traffic)") if settling else ""
    if not grown:
        j.add(name, 0.0, f"no {what} during the load{excused}")
        return
    total = sum(g for _, g, _ in grown)
    worst = max(grown, key=lambda g: (g[1], -g[0]))
    over = sorted(g for g in grown if limit is None or g[1] > limit)
    first = over[0] if over else worst
    text = f"{first[2]} grew {first[1]:g} in minute {first[0]}{_at(watched, first[0])}"
    if rate and worst != first:
        text += f"; most in one minute: {worst[2]} +{worst[1]:g} in minute {worst[0]}"
    if not rate:
        text += f" ({total:g} in all)"
    j.add(name, worst[1] if rate else total, text + excused)


def judge_xid(j: _Judge, watched: Watched) -> None:
    if "xid" in watched.unsupported:
        j.unreadable("xid", "xid", watched, "XID events cannot be watched")
        return
    for t, code in watched.xids:
        j.event(t, "xid", f"{xid_text(code)} at t={t:.0f}s (minute {int(t // MINUTE_SECONDS)})")
    count = len(watched.xids) + watched.xids_omitted
    if not count:
        j.add("xid", 0.0, "no XID event")
        return
    said = "; ".join(f"{xid_text(c)} in minute {int(t // MINUTE_SECONDS)} (t={t:.0f}s)" for t, c in watched.xids[:5])
    j.add("xid", float(count), said + (f"; {count - 5} more" if count > 5 else ""))


def judge_readings(j: _Judge, watched: Watched, minutes: int) -> None:
    """NVML answered every reading the judgement needs, in every minute (fail closed)."""
    problems = [f"{k} unsupported ({why})" for k, why in watched.unsupported.items() if needed(k, j.th, watched)]
    seen = {m.index for m in watched.minutes if m.samples}
    lost = [m for m in range(minutes) if m not in seen]
    if lost:
        problems.append(f"no sample in minute(s) {lost[:10]}")
    for m in watched.minutes:
        gaps = [k for k, n in m.missing.items() if needed(k, j.th, watched) and n >= m.samples]
        if gaps:
            problems.append(f"no reading of {', '.join(gaps[:4])} in minute {m.index}")
    j.add("nvml", 0.0 if problems else 1.0, "; ".join(problems[:6]) if problems else
          f"every reading the judgement needs, in all {minutes} minute(s)")


# The result each NVML reading is judged in (a reading no row with a threshold judges is plotted, not needed).
ROW_OF_READING = {"gpu_temp_c": "gpu_temperature", "mem_temp_c": "memory_temperature", "clock_event_reasons":
                  "throttle", "pcie_replays": "pcie_replays", "ecc_uncorrected": "ecc_uncorrected",
                  "row_remaps": "pending_row_remaps", "xid": "xid", "nvlink": "nvlink_errors"}


def needed(reading: str, th: SoakThresholds, watched: Watched) -> bool:
    """Whether the judgement needs `reading`: its row has a threshold (clocks and power are plotted, not judged);
    a link's counters where the GPU has active links."""
    row = ROW_OF_READING.get("nvlink" if reading.startswith("nvlink") else reading)
    if row is None or RULES.threshold(row, th) is None:
        return False
    return not reading.startswith("nvlink ") or reading in watched.nvlink_keys


def judge_gpu(th: SoakThresholds, who: Who, windows: list[Window], watched: Watched | None, duration: float,
              estimated: Collection[str] = ()) -> GpuVerdict:
    """Every result of one GPU and its evidence (series, events); watched None: a CPU smoke run, no NVML."""
    minutes = minute_count(duration)
    per_minute = minute_tflops(windows, minutes)
    j = _Judge(th, who, estimated)
    judge_tflops(j, per_minute, watched)
    if watched is not None:
        judge_throttle(j, watched)
        judge_temperature(j, watched, "gpu_temperature", "gpu_temp_c", "GPU")
        judge_temperature(j, watched, "memory_temperature", "mem_temp_c", "memory")
        links = watched.nvlink_keys
        if links or "nvlink" in watched.unsupported:
            judge_counter(j, watched, "nvlink_errors", links or ["nvlink"], "NVLink error", rate=True,
                          settle_minutes=max(1, min(SETTLE_MINUTES, minutes // 2)))
        judge_counter(j, watched, "pcie_replays", ["pcie_replays"], "PCIe replay", rate=True)
        judge_counter(j, watched, "ecc_uncorrected", ["ecc_uncorrected"], "uncorrected ECC error", rate=False)
        judge_counter(j, watched, "pending_row_remaps", ["pending_row_remap", "remapped_rows_uncorrectable"],
                      "new pending row remap", rate=False, reading="row_remaps")
        judge_xid(j, watched)
        judge_readings(j, watched, minutes)
    events = sorted(j.events, key=lambda e: e.t)
    detail = SoakGpu(rank=who.rank, node=who.node, gpu=who.gpu, series=series(watched, windows),
                     events=events[:MAX_EVENTS], events_omitted=max(0, len(events) - MAX_EVENTS),
                     unsupported=dict(watched.unsupported) if watched else {})
    return GpuVerdict(j.results, detail)


def lone_gpu_nodes(gpus: list[Who]) -> list[str]:
    """The nodes with one GPU in the run: node_ratios has no other GPU there to compare it with, and the report says
    so (a comparison not made is a skip, never a silent pass)."""
    count: dict[str, int] = {}
    for who in gpus:
        count[who.node] = count.get(who.node, 0) + 1
    return [node for node, n in count.items() if n == 1]


def node_ratios(th: SoakThresholds, gpus: list[tuple[Who, list[float | None]]],
                estimated: Collection[str] = ()) -> list[CheckResult]:
    """Each GPU's minutes against its node's median GPU in the same minute (nodes of 2 GPUs or more)."""
    out: list[CheckResult] = []
    by_node: dict[str, list[tuple[Who, list[float | None]]]] = {}
    for who, minutes in gpus:
        by_node.setdefault(who.node, []).append((who, minutes))
    floor = RULES.threshold("tflops_ratio_to_node_median", th)
    for members in by_node.values():
        if len(members) < 2:
            continue
        count = min(len(m) for _, m in members)
        medians = [statistics.median([v for _, m in members if (v := m[i]) is not None] or [0.0])
                   for i in range(count)]
        for who, minutes in members:
            ratios = [(i, v / medians[i]) for i in range(count) if (v := minutes[i]) is not None and medians[i] > 0]
            if len(ratios) < count:
                value, text = None, "a minute without GEMM measured"
            else:
                i, value = min(ratios, key=lambda x: x[1])
                below = [k for k, r in ratios if floor is not None and r < floor]
                text = (f"below its node's median GPU from minute {below[0]} (slowest minute {i}: {value:.2f} of "
                        f"the median {medians[i]:.4g} TFLOP/s)" if below else
                        f"slowest minute {i} at {value:.3f} of its node's median GPU")
            out.append(RULES.result("tflops_ratio_to_node_median", None if value is None else round(value, 4),
                                    th, node=who.node, gpu=who.gpu, estimated=estimated,
                                    message=f"{who.label()}: {text}"))
    return out


def _downsample(bins: list[Minute]) -> list[Minute]:
    if len(bins) <= MAX_POINTS:
        return bins
    k = math.ceil(len(bins) / MAX_POINTS)
    out: list[Minute] = []
    for b in bins:
        index = b.index // k
        if not out or out[-1].index != index:
            out.append(Minute(index))
        for name, (count, total, peak) in b.gauges.items():
            g = out[-1].gauges.setdefault(name, [0, 0.0, peak])
            g[0], g[1], g[2] = g[0] + count, g[1] + total, max(g[2], peak)
    for m in out:
        m.index = (m.index + 1) * k - 1  # t of a merged point: the end of its last bin
    return out


def _r(v: float | None, digits: int = 1) -> float | None:
    """Rounded (whole numbers as ints on the wire: an hour of 8 GPUs must fit its evidence ConfigMap)."""
    return None if v is None else (round(v) if digits == 0 else round(v, digits))


def series(watched: Watched | None, windows: list[Window]) -> SoakSeries:
    """The plotted series: NVML gauges in at most MAX_POINTS bins (means; temperatures and power their maxima),
    and the load's TFLOP/s per window (at most MAX_POINTS, merged)."""
    out = SoakSeries()
    if watched is not None:
        width = watched.bin_seconds
        for b in _downsample(watched.bins):
            out.t.append(_r((b.index + 1) * width, 0) or 0.0)
            out.sm_clock_mhz.append(_r(b.mean("sm_clock_mhz"), 0))
            out.mem_clock_mhz.append(_r(b.mean("mem_clock_mhz"), 0))
            out.power_w.append(_r(b.peak("power_w"), 0))
            out.gpu_temp_c.append(_r(b.peak("gpu_temp_c"), 0))
            out.mem_temp_c.append(_r(b.peak("mem_temp_c"), 0))
    k = max(1, math.ceil(len(windows) / MAX_POINTS))
    for i in range(0, len(windows), k):
        group = windows[i:i + k]
        flops, secs = sum(w.flops for w in group), sum(w.gemm_seconds for w in group)
        out.tflops_t.append(round(group[-1].end))
        out.tflops.append(None if secs <= 0 else float(f"{flops / secs / 1e12:.4g}"))
    return out


def minute_table(gpus: list[tuple[Who, list[float | None]]], width: int = 30) -> list[str]:
    """Each GPU's TFLOP/s minute by minute as text (the log's per-minute view; a long soak shows every k-th
    minute so a line stays within `width` columns of numbers)."""
    count = max((len(m) for _, m in gpus), default=0)
    step = max(1, math.ceil(count / width))
    shown = list(range(0, count, step))
    head = "TFLOP/s by minute " + " ".join(f"{m:>6}" for m in shown)
    rows = [head]
    for who, minutes in gpus:
        cells = " ".join(f"{'-' if (v := minutes[m] if m < len(minutes) else None) is None else f'{v:.4g}':>6}"
                         for m in shown)
        rows.append(f"{who.label():<17} {cells}")
    return rows


@dataclass(frozen=True)
class Worst:
    """The progress's worst GPU so far: its latest minute against its own first minutes, and the line that says so
    (the ratio is what a sweep's parent compares across its nodes)."""

    ratio: float
    line: str


def worst_gpu(gpus: list[tuple[Who, list[float | None], float | None]]) -> Worst | None:
    """The progress's worst GPU so far: the lowest latest minute against its own first minutes."""
    worst: Worst | None = None
    for who, minutes, temperature in gpus:
        values = [v for v in minutes if v is not None]
        if not values:
            continue
        base = statistics.median(values[:SETTLE_MINUTES])
        ratio = values[-1] / base if base > 0 else 0.0
        line = (f"{who.label()}: {values[-1]:.4g} TFLOP/s ({ratio:.2f} of its first minutes)"
                + ("" if temperature is None else f", {temperature:.0f} C"))
        if worst is None or ratio < worst.ratio:
            worst = Worst(ratio, line)
    return worst

