"""Watching one GPU through NVML while the burn-in loads it (soak.py).

A thread of each rank samples its GPU every checks.soak.sampleSeconds and folds the samples into one record per
minute of the load (Minute), so hours of samples take minutes' worth of memory and the judge (soakjudge.py) reads
each minute as it happened: SM and memory clocks, power, GPU and memory temperature, clock event (throttle)
reasons, ECC corrected/uncorrected volatile totals, pending row remaps, the PCIe replay counter and the NVLink
error counters of every active link. XID events come from an NVML event set whose wait is the sampler's pause,
so an XID is stamped when it happens, not at the next sample. The counters, the links and the event set are read
through checks/signals/nvml.py, the code the whole-run watch of every run (checks.signals) reads them with.

A reading the GPU does not support is recorded as unsupported with NVML's words, never as a zero; a reading that
fails for another reason is counted as missing in its minute (the judge fails a minute without a reading it needs).
pynvml is imported by the caller (runtime.gpus.nvml_init): the operator image has no NVML bindings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acceptance_workload.checks.signals import nvml as reading
from acceptance_workload.checks.signals.nvml import NOT_SUPPORTED, TIMEOUT, XID_EVENT, field_value

MINUTE_SECONDS = 60.0
GAUGES = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "gpu_temp_c", "mem_temp_c")
# Cumulative counters: the judge reads their growth minute by minute. NVLink ones are "nvlink L<link> <counter>".
COUNTERS = ("ecc_corrected", "ecc_uncorrected", "remapped_rows_uncorrectable", "pending_row_remap", "pcie_replays")
# Clock event reasons that mean the GPU was slowed by a fault or by heat. SW power cap (0x4) is the power limit a GPU
# under full GEMM sits at, and idle, sync boost, application clocks and display clock are not faults.
BAD_REASONS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
               0x80: "power brake slowdown"}
MAX_XIDS = 1000


@dataclass
class Minute:
    """What one minute of the load looked like on one GPU."""

    index: int
    samples: int = 0
    gauges: dict[str, list[float]] = field(default_factory=dict)  # name -> [count, sum, max]
    counters: dict[str, float] = field(default_factory=dict)  # counters that changed in this minute: their last value
    throttle: dict[str, float] = field(default_factory=dict)  # bad reason -> seconds seen
    first_throttle: dict[str, float] = field(default_factory=dict)  # bad reason -> when first seen
    missing: dict[str, int] = field(default_factory=dict)  # reading -> samples it failed in

    def add_gauge(self, name: str, value: float) -> None:
        g = self.gauges.setdefault(name, [0, 0.0, value])
        g[0] += 1
        g[1] += value
        g[2] = max(g[2], value)

    def mean(self, name: str) -> float | None:
        g = self.gauges.get(name)
        return None if not g or not g[0] else g[1] / g[0]

    def peak(self, name: str) -> float | None:
        g = self.gauges.get(name)
        return None if not g or not g[0] else g[2]

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "samples": self.samples, "gauges": self.gauges, "counters": self.counters,
                "throttle": self.throttle, "firstThrottle": self.first_throttle, "missing": self.missing}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Minute:
        return cls(index=d["index"], samples=d["samples"], gauges=d["gauges"], counters=d["counters"],
                   throttle=d["throttle"], first_throttle=d["firstThrottle"], missing=d["missing"])


@dataclass
class Watched:
    """Everything the watch saw of one GPU: counters at the start, each minute, XIDs, what it could not read."""

    start: dict[str, float] = field(default_factory=dict)
    minutes: list[Minute] = field(default_factory=list)
    xids: list[tuple[float, int]] = field(default_factory=list)  # (seconds since the load started, XID code)
    xids_omitted: int = 0
    unsupported: dict[str, str] = field(default_factory=dict)
    links: list[int] = field(default_factory=list)  # active NVLink links
    nvlink_keys: list[str] = field(default_factory=list)  # the NVLink counters read: per link, else totals
    bins: list[Minute] = field(default_factory=list)  # the gauges in bins of bin_seconds, for the plotted series
    bin_seconds: float = MINUTE_SECONDS


class Watch:
    """Samples one GPU on a thread of its own from start() to stop(); `watched` holds the result."""

    def __init__(self, nvml: Any, target: int | str, sample_seconds: float, bin_seconds: float = MINUTE_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.nvml = nvml
        self.target = target
        self.period = sample_seconds
        self.clock = clock
        self.watched = Watched(bin_seconds=max(bin_seconds, sample_seconds))
        self.handle: Any = None
        self.events: Any = None
        self._t0 = 0.0
        self._last: float | None = None
        self.nvlink_totals = False
        self.reader: reading.Reader | None = None
        self._known: dict[str, float] = {}  # each counter's last value read
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-acceptance-nvml-watch", daemon=True)

    # opening ----------------------------------------------------------------
    def open(self) -> Watch:
        """The GPU's handle, its active NVLink links, the XID event set, and the counters before the load (read
        through signals.nvml.Reader, the code the whole-run watch reads them with)."""
        self.reader = reading.Reader(self.nvml, self.target, self.watched.unsupported).open()
        self.handle = self.reader.handle
        self.watched.links = self.reader.links
        self.watched.nvlink_keys = self.reader.nvlink_keys
        self.nvlink_totals = self.reader.nvlink_totals
        self.events = self.reader.xid_events()
        self.watched.start = self._counters(None)
        self._known = dict(self.watched.start)
        return self

    # reading ----------------------------------------------------------------
    def _read(self, name: str, read: Callable[[], Any], minute: Minute | None) -> Any:
        return self.reader.read(name, read, None if minute is None else minute.missing)

    def _counters(self, minute: Minute | None) -> dict[str, float]:
        return self.reader.counters(None if minute is None else minute.missing)

    def _gauges(self, minute: Minute) -> None:
        n, h = self.nvml, self.handle
        reads: dict[str, Callable[[], float]] = {
            "sm_clock_mhz": lambda: float(n.nvmlDeviceGetClockInfo(h, 1)),  # NVML_CLOCK_SM
            "mem_clock_mhz": lambda: float(n.nvmlDeviceGetClockInfo(h, 2)),  # NVML_CLOCK_MEM
            "power_w": lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "gpu_temp_c": lambda: float(n.nvmlDeviceGetTemperature(h, 0)),  # NVML_TEMPERATURE_GPU
            "mem_temp_c": lambda: self._memory_temperature(),
        }
        self._latest: dict[str, float] = {}
        for name, read in reads.items():
            value = self._read(name, read, minute)
            if value is not None:
                minute.add_gauge(name, value)
                self._latest[name] = value

    def _bin(self, t: float, minute: Minute) -> None:
        """This sample's gauges (the last ones `minute` took) into the series' bin."""
        w = self.watched
        index = int(t // w.bin_seconds)
        if not w.bins or w.bins[-1].index != index:
            w.bins.append(Minute(index))
        b = w.bins[-1]
        b.samples += 1
        for name, value in self._latest.items():
            b.add_gauge(name, value)

    def _memory_temperature(self) -> float:
        v = self.nvml.nvmlDeviceGetFieldValues(self.handle, [82])[0]  # NVML_FI_DEV_MEMORY_TEMP
        if int(v.nvmlReturn) != 0:
            raise _FieldError(int(v.nvmlReturn))
        return field_value(v)

    def _reasons(self) -> int:
        n = self.nvml
        read = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(read(self.handle))

    def sample(self) -> None:
        """One sample into its minute."""
        now = self.clock()
        t = now - self._t0
        dt = self.period if self._last is None else max(0.0, now - self._last)
        self._last = now
        with self._lock:
            index = int(t // MINUTE_SECONDS)
            if not self.watched.minutes or self.watched.minutes[-1].index != index:
                self.watched.minutes.append(Minute(index))
            minute = self.watched.minutes[-1]
            minute.samples += 1
            self._gauges(minute)
            self._bin(t, minute)
            reasons = self._read("clock_event_reasons", self._reasons, minute)
            if reasons is not None:
                for bit, name in BAD_REASONS.items():
                    if reasons & bit:
                        minute.throttle[name] = minute.throttle.get(name, 0.0) + dt
                        minute.first_throttle.setdefault(name, round(t, 1))
            for key, value in self._counters(minute).items():  # only what changed: a week of minutes stays small
                if self._known.get(key) != value:
                    minute.counters[key] = self._known[key] = value

    def _wait(self) -> None:
        """The pause between samples: the XID event set's wait (an XID is recorded when it comes), else a sleep."""
        deadline = self.clock() + self.period
        while not self._stop.is_set():
            left = deadline - self.clock()
            if left <= 0:
                return
            if self.events is None:
                self._stop.wait(left)
                continue
            try:
                data = self.nvml.nvmlEventSetWait(self.events, max(1, int(left * 1000)))
            except Exception as e:
                if reading.code(e) == TIMEOUT:
                    continue
                self.watched.unsupported["xid"] = reading.why(e)
                self.events = None
                continue
            if int(getattr(data, "eventType", XID_EVENT)) & XID_EVENT:
                with self._lock:
                    if len(self.watched.xids) < MAX_XIDS:
                        self.watched.xids.append((round(self.clock() - self._t0, 1), int(data.eventData)))
                    else:
                        self.watched.xids_omitted += 1

    # the thread -------------------------------------------------------------
    def start(self, t0: float | None = None) -> Watch:
        """Sample from now on; times count from `t0` (the load's start, on this watch's clock)."""
        self._t0 = self.clock() if t0 is None else t0
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._wait()

    def stop(self) -> Watched:
        self._stop.set()
        self._thread.join(timeout=max(5.0, 2 * self.period))
        return self.watched

    def peek(self) -> tuple[float | None, float | None]:
        """The hottest GPU temperature of the latest minute and its index, for the progress line."""
        with self._lock:
            if not self.watched.minutes:
                return None, None
            m = self.watched.minutes[-1]
            return m.peak("gpu_temp_c"), float(m.index)


class _FieldError(Exception):
    """A field value NVML answered with an error code of its own (e.g. NOT_SUPPORTED for memory temperature)."""

    def __init__(self, code: int):
        said = {NOT_SUPPORTED: "Not Supported", 2: "Invalid Argument", 15: "GPU is lost"}.get(code, "error")
        super().__init__(f"NVML_FI_DEV_MEMORY_TEMP: {said} (NVML return {code})")
        self.value = code
