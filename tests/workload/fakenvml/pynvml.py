"""A stand-in for nvidia-ml-py's `pynvml` that replays recorded NVML series (tests/workload/fixtures/nvml_soak.json).

Outside the product: the tests hand this module to nvmlwatch.Watch where the workload hands the real pynvml, or put
this directory first on PYTHONPATH, with FAKE_NVML=FILE:SCENARIO to replay that scenario from the import on. A
scenario gives each GPU its readings at the start (`base`) and the readings that change from a sample on
(`changes`), the XID events it raises (`xids`), the readings it does not support and the samples in which a reading
fails. One sample is one period of the watch: the watch's pause is nvmlEventSetWait, which here moves the GPU's
replay on by one sample (and returns the XID recorded for it); `clock(gpu)` is the replay's time in seconds, the
watch's clock in the tests. At the end of the recording the wait returns timeouts without moving on, so the watch
takes no sample the recording does not have.

With FAKE_NVML_INJECT=FILE as well, a process outside the workload (the test) drives the GPUs through FILE, a JSON
object {"<gpu index>": {"xids": [codes], "set": {reading: value}}} it rewrites (atomically) mid-run: each XID it
lists is delivered once, in order, by nvmlEventSetWait (which then polls FILE for its whole timeout and moves no
replay on), and each reading it sets replaces the recording's from then on. The fabric state is the recording's
`fabric`: [state, status, clique] (none: not supported).
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from pathlib import Path
from typing import Any

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_UNKNOWN = 999
NVML_NVLINK_MAX_LINKS = 18
nvmlEventTypeXidCriticalError = 0x8

_state: dict[str, Any] = {"gpus": [], "period": 1.0, "ticks": 0}
_delivered: dict[int, int] = {}  # XIDs of FAKE_NVML_INJECT delivered, per GPU
INJECT_POLL_SECONDS = 0.05


def _injected(gpu: int) -> dict[str, Any]:
    """What FAKE_NVML_INJECT's file says of this GPU now ({} without one)."""
    path = os.environ.get("FAKE_NVML_INJECT")
    if not path:
        return {}
    try:
        return json.loads(Path(path).read_text()).get(str(gpu), {})
    except (OSError, ValueError):
        return {}


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__({2: "Invalid Argument", 3: "Not Supported", 10: "Timeout"}.get(value, "Unknown Error"))
        self.value = value


class _Gpu:
    def __init__(self, index: int, spec: dict[str, Any], ticks: int):
        self.index, self.spec, self.ticks, self.tick = index, spec, ticks, 0
        self.unsupported = set(spec.get("unsupported", []))

    def value(self, name: str, fallback: str | None = None) -> Any:
        if name in self.unsupported or (fallback is not None and fallback in self.unsupported):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        for lo, hi in self.spec.get("fails", {}).get(name, []):
            if lo <= self.tick < hi:
                raise NVMLError(NVML_ERROR_UNKNOWN)
        out = self.spec["base"].get(name, None if fallback is None else self.spec["base"][fallback])
        for change in self.spec.get("changes", []):
            if change["from"] <= self.tick and name in change["set"]:
                out = change["set"][name]
                if isinstance(out, dict) and "perSample" in out:  # a counter growing every sample from `from` on
                    out = out["start"] + out["perSample"] * (self.tick - change["from"] + 1)
        return _injected(self.index).get("set", {}).get(name, out)


class _Data:
    def __init__(self, device: Any, code: int):
        self.device, self.eventType, self.eventData = device, nvmlEventTypeXidCriticalError, code


class _Value:
    """A c_nvmlFieldValue_t: the memory temperature as an unsigned int."""

    class _V:
        def __init__(self, v: int):
            self.uiVal = v

    def __init__(self, ret: int, v: int = 0):
        self.nvmlReturn, self.valueType, self.value = ret, 1, self._V(v)


def load(path: str | Path, scenario: str) -> None:
    """Replay `scenario` of the fixture file from its first sample."""
    data = json.loads(Path(path).read_text())
    s = data["scenarios"][scenario]
    base = data["base"]
    gpus = []
    for i in range(s.get("gpus", 2)):
        spec = {**s.get("all", {}), **s.get(str(i), {})}
        spec["base"] = {**base, **spec.get("base", {})}
        gpus.append(_Gpu(i, spec, s["samples"]))
    _state.update(gpus=gpus, period=float(data["sampleSeconds"]), ticks=s["samples"])


def clock(gpu: int) -> float:
    return _state["gpus"][gpu].tick * _state["period"]


def finished(gpu: int) -> bool:
    return _state["gpus"][gpu].tick >= _state["ticks"] - 1


def nvmlInit() -> None:
    if not _state["gpus"]:
        raise NVMLError(NVML_ERROR_UNKNOWN)


def nvmlDeviceGetCount() -> int:
    return len(_state["gpus"])


def nvmlDeviceGetHandleByIndex(i: int) -> _Gpu:
    return _state["gpus"][i]


def nvmlDeviceGetNvLinkState(h: _Gpu, link: int) -> int:
    links = h.spec["base"]["links"]
    if links == 0 and link == 0:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if link >= links:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return 1


def nvmlDeviceGetNvLinkErrorCounter(h: _Gpu, link: int, counter: int) -> int:
    if "nvlink_per_link" in h.unsupported:  # a driver that gives only the totals over all links
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    name = ["replay", "recovery", "crc_flit", "crc_data"][counter]
    return int(h.value(f"nvlink{link}_{name}", fallback="nvlink_errors"))


def nvmlEventSetCreate() -> dict[str, Any]:
    return {"gpus": []}


def nvmlDeviceRegisterEvents(h: _Gpu, types: int, event_set: dict[str, Any]) -> None:
    if "xid" in h.unsupported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    event_set["gpus"].append(h)


def nvmlEventSetWait(event_set: dict[str, Any], timeout_ms: int) -> _Data:
    gpu: _Gpu = event_set["gpus"][0]
    if os.environ.get("FAKE_NVML_INJECT"):
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            codes, done = _injected(gpu.index).get("xids", []), _delivered.get(gpu.index, 0)
            if done < len(codes):
                _delivered[gpu.index] = done + 1
                return _Data(gpu, int(codes[done]))
            if time.monotonic() >= deadline:
                raise NVMLError(NVML_ERROR_TIMEOUT)
            time.sleep(INJECT_POLL_SECONDS)
    if gpu.tick >= gpu.ticks - 1:
        time.sleep(0.01)
        raise NVMLError(NVML_ERROR_TIMEOUT)
    gpu.tick += 1
    for x in gpu.spec.get("xids", []):
        if x["sample"] == gpu.tick:
            return _Data(gpu, x["code"])
    raise NVMLError(NVML_ERROR_TIMEOUT)


def nvmlDeviceGetMemoryInfo(h: _Gpu) -> Any:
    """Memory in use as `memory_used_mib` of `memory_total_mib` says (the v1 call: this stand-in has no v2)."""
    from types import SimpleNamespace

    used, total = int(h.value("memory_used_mib")) << 20, int(h.value("memory_total_mib")) << 20
    return SimpleNamespace(used=used, total=total, free=total - used)


def nvmlDeviceGetComputeRunningProcesses(h: _Gpu) -> list[Any]:
    """The processes `processes` lists, [pid, MiB] each (an outside process the test started stands for one)."""
    from types import SimpleNamespace

    return [SimpleNamespace(pid=pid, usedGpuMemory=mib << 20) for pid, mib in h.value("processes")]


def nvmlDeviceGetClockInfo(h: _Gpu, kind: int) -> int:
    return int(h.value("sm_clock" if kind == 1 else "mem_clock"))


def nvmlDeviceGetPowerUsage(h: _Gpu) -> int:
    return int(h.value("power_mw"))


def nvmlDeviceGetTemperature(h: _Gpu, sensor: int) -> int:
    return int(h.value("gpu_temp"))


NVLINK_TOTALS = {52: "replay", 59: "recovery", 38: "crc_flit", 45: "crc_data"}


def nvmlDeviceGetFieldValues(h: _Gpu, ids: list[int]) -> list[_Value]:
    out = []
    for i in ids:
        name = "mem_temp" if i == 82 else f"nvlink_total_{NVLINK_TOTALS[i]}"
        try:
            out.append(_Value(0, int(h.value(name, fallback="nvlink_errors" if i != 82 else None))))
        except NVMLError as e:
            out.append(_Value(e.value))
    return out


def nvmlDeviceGetCurrentClocksEventReasons(h: _Gpu) -> int:
    return int(h.value("reasons"))


def nvmlDeviceGetTotalEccErrors(h: _Gpu, kind: int, counter: int) -> int:
    return int(h.value("ecc_uncorrected" if kind == 1 else "ecc_corrected"))


def nvmlDeviceGetPcieReplayCounter(h: _Gpu) -> int:
    return int(h.value("pcie_replays"))


def nvmlDeviceGetRemappedRows(h: _Gpu) -> tuple[int, int, int, int]:
    corr, unc, pending, failure = h.value("remapped_rows")
    return corr, unc, pending, failure


def nvmlDeviceGetSerial(h: _Gpu) -> str:
    return f"FAKE{h.index:04d}"


def nvmlDeviceGetPciInfo(h: _Gpu) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(busId=f"00000000:{0x18 + h.index:02X}:00.0".encode())


class c_nvmlGpuFabricInfoV_t(ctypes.Structure):  # NVML's name
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint8), ("healthMask", ctypes.c_uint32)]


def nvmlDeviceGetGpuFabricInfoV(h: _Gpu, info: Any) -> int:
    """The recording's `fabric` [state, status, clique] into the struct the caller passed by reference."""
    fabric = h.value("fabric")
    if fabric is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    out = getattr(info, "_obj", info)
    out.state, out.status, out.cliqueId = fabric
    for i in range(16):
        out.clusterUuid[i] = 0xAB
    return 0


if os.environ.get("FAKE_NVML"):
    _file, _, _scenario = os.environ["FAKE_NVML"].rpartition(":")
    load(_file, _scenario)
