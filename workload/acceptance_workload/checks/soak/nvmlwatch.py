"""Watching one GPU through NVML while the burn-in loads it (soak.py).

A thread of each rank samples its GPU every checks.soak.sampleSeconds and folds the samples into one record per
minute of the load (Minute), so hours of samples take minutes' worth of memory and the judge (soakjudge.py) reads
each minute as it happened: SM and memory clocks, power, GPU and memory temperature, clock event (throttle)
reasons, ECC corrected/uncorrected volatile totals, pending row remaps, the PCIe replay counter and the NVLink
error counters of every active link. XID events come from an NVML event set whose wait is the sampler's pause,
so an XID is stamped when it happens, not at the next sample.

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

MINUTE_SECONDS = 60.0
GAUGES = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "gpu_temp_c", "mem_temp_c")
# Cumulative counters: the judge reads their growth minute by minute. NVLink ones are "nvlink L<link> <counter>".
COUNTERS = ("ecc_corrected", "ecc_uncorrected", "remapped_rows_uncorrectable", "pending_row_remap", "pcie_replays")
NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}  # NVML_NVLINK_ERROR_DL_*
# Where a driver gives no per-link counter (nvmlDeviceGetNvLinkErrorCounter not supported): the totals over all
# links as field values (NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL), keyed "nvlink all <counter>".
NVLINK_TOTAL_FIELDS = {"replay": 52, "recovery": 59, "crc_flit": 38, "crc_data": 45}
# Clock event reasons that mean the GPU was slowed by a fault or by heat. SW power cap (0x4) is the power limit a GPU
# under full GEMM sits at, and idle, sync boost, application clocks and display clock are not faults.
BAD_REASONS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
               0x80: "power brake slowdown"}
XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
# Answers that will not change by asking again: not supported, no permission, a function this driver lacks.
PERMANENT = {NOT_SUPPORTED, 4, 13}  # NVML_ERROR_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND
TIMEOUT = 10  # NVML_ERROR_TIMEOUT
MAX_XIDS = 1000


def nvlink_key(link: int, counter: str) -> str:
    return f"nvlink L{link} {counter}"


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


def _code(e: BaseException) -> int | None:
    value = getattr(e, "value", None)
    return value if isinstance(value, int) else None


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:200]


def field_value(v: Any) -> float:
    """A c_nvmlFieldValue_t's value by its valueType (0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint)."""
    kind = int(getattr(v, "valueType", 1))
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(kind, "uiVal")
    return float(getattr(v.value, attr))


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
        self._known: dict[str, float] = {}  # each counter's last value read
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-acceptance-nvml-watch", daemon=True)

    # opening ----------------------------------------------------------------
    def open(self) -> Watch:
        """The GPU's handle, its active NVLink links, the XID event set, and the counters before the load."""
        n = self.nvml
        self.handle = (n.nvmlDeviceGetHandleByIndex(self.target) if isinstance(self.target, int)
                       else n.nvmlDeviceGetHandleByUUID(self.target))
        for link in range(int(getattr(n, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                if n.nvmlDeviceGetNvLinkState(self.handle, link):
                    self.watched.links.append(link)
            except Exception as e:  # past the last link, or no NVLink at all
                if link == 0 and _code(e) != NOT_SUPPORTED:
                    self.watched.unsupported["nvlink"] = _why(e)
                break
        self._nvlink_keys()
        try:
            self.events = n.nvmlEventSetCreate()
            n.nvmlDeviceRegisterEvents(self.handle, XID_EVENT, self.events)
        except Exception as e:
            self.events = None
            self.watched.unsupported["xid"] = _why(e)
        self.watched.start = self._counters(None)
        self._known = dict(self.watched.start)
        return self

    def _nvlink_keys(self) -> None:
        """Per-link counters where the driver has them, else the totals over all links."""
        w = self.watched
        if not w.links:
            return
        self.nvlink_totals = False
        try:
            self.nvml.nvmlDeviceGetNvLinkErrorCounter(self.handle, w.links[0], 0)
        except Exception as e:
            self.nvlink_totals = _code(e) in PERMANENT
        w.nvlink_keys = ([f"nvlink all {c}" for c in NVLINK_TOTAL_FIELDS] if self.nvlink_totals else
                         [nvlink_key(link, c) for link in w.links for c in NVLINK_COUNTERS])

    def _nvlink_totals(self, minute: Minute | None, out: dict[str, float]) -> None:
        names = list(NVLINK_TOTAL_FIELDS)
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(self.handle, list(NVLINK_TOTAL_FIELDS.values()))
        except Exception as e:
            for key in self.watched.nvlink_keys:
                if _code(e) in PERMANENT:
                    self.watched.unsupported.setdefault(key, _why(e))
                elif minute is not None:
                    minute.missing[key] = minute.missing.get(key, 0) + 1
            return
        for name, v in zip(names, values, strict=False):
            key = f"nvlink all {name}"
            if int(v.nvmlReturn) in PERMANENT:
                self.watched.unsupported.setdefault(key, f"NVML_FI_DEV_NVLINK_{name.upper()}_ERROR_COUNT_TOTAL: "
                                                         "Not Supported")
            elif int(v.nvmlReturn) == 0 and key not in self.watched.unsupported:
                out[key] = field_value(v)
            elif minute is not None:
                minute.missing[key] = minute.missing.get(key, 0) + 1

    # reading ----------------------------------------------------------------
    def _read(self, name: str, read: Callable[[], Any], minute: Minute | None) -> Any:
        if name in self.watched.unsupported:
            return None
        try:
            return read()
        except Exception as e:
            if _code(e) in PERMANENT:
                self.watched.unsupported[name] = _why(e)
            elif minute is not None:
                minute.missing[name] = minute.missing.get(name, 0) + 1
            return None

    def _counters(self, minute: Minute | None) -> dict[str, float]:
        n, h, out = self.nvml, self.handle, {}
        reads: dict[str, Callable[[], Any]] = {
            "ecc_corrected": lambda: n.nvmlDeviceGetTotalEccErrors(h, 0, 0),  # corrected, volatile
            "ecc_uncorrected": lambda: n.nvmlDeviceGetTotalEccErrors(h, 1, 0),  # uncorrected, volatile
            "pcie_replays": lambda: n.nvmlDeviceGetPcieReplayCounter(h),
        }
        for name, read in reads.items():
            value = self._read(name, read, minute)
            if value is not None:
                out[name] = float(value)
        remap = self._read("row_remaps", lambda: n.nvmlDeviceGetRemappedRows(h), minute)
        if remap is not None:
            out["remapped_rows_uncorrectable"], out["pending_row_remap"] = float(remap[1]), float(remap[2])
        if self.nvlink_totals:
            self._nvlink_totals(minute, out)
            return out
        for link in self.watched.links:
            for counter, code in NVLINK_COUNTERS.items():
                key = nvlink_key(link, counter)
                value = self._read(key, lambda link=link, code=code: n.nvmlDeviceGetNvLinkErrorCounter(h, link, code),
                                   minute)
                if value is not None:
                    out[key] = float(value)
        return out

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
                if _code(e) == TIMEOUT:
                    continue
                self.watched.unsupported["xid"] = _why(e)
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
