"""Reading one GPU's error counters, its XID events, its identity and its fabric state through NVML: the one home of
the code the signals check (watch.py: start and end of the run) and the soak (checks/soak/nvmlwatch.py: minute by
minute) read NVML with.

A reading the GPU does not support (or this driver lacks) is recorded as unsupported with NVML's words, never as a
zero; a reading that fails for another reason is counted as missing where the caller keeps count. pynvml is
imported by the caller (runtime.gpus.nvml_init): the operator image has no NVML bindings.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}  # NVML_NVLINK_ERROR_DL_*
# Where a driver gives no per-link counter (nvmlDeviceGetNvLinkErrorCounter not supported): the totals over all
# links as field values (NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL), keyed "nvlink all <counter>".
NVLINK_TOTAL_FIELDS = {"replay": 52, "recovery": 59, "crc_flit": 38, "crc_data": 45}
XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
# Answers that will not change by asking again: not supported, no permission, a function this driver lacks.
PERMANENT = {NOT_SUPPORTED, 4, 13}  # NVML_ERROR_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND
TIMEOUT = 10  # NVML_ERROR_TIMEOUT
FABRIC_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED (0 not supported, 1 not started, 2 in progress)
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
RETIREMENT_CAUSES = {"retired_pages_sbe": 0, "retired_pages_dbe": 1}  # NVML_PAGE_RETIREMENT_CAUSE_*


def nvlink_key(link: int, counter: str) -> str:
    return f"nvlink L{link} {counter}"


def code(e: BaseException) -> int | None:
    value = getattr(e, "value", None)
    return value if isinstance(value, int) else None


def why(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:200]


def permanent(e: BaseException) -> bool:
    """An answer asking again will not change: unsupported, not permitted, or a function these bindings lack."""
    return code(e) in PERMANENT or isinstance(e, AttributeError)


def field_value(v: Any) -> float:
    """A c_nvmlFieldValue_t's value by its valueType (0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint)."""
    kind = int(getattr(v, "valueType", 1))
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(kind, "uiVal")
    return float(getattr(v.value, attr))


def _count(missing: dict[str, int] | None, key: str) -> None:
    if missing is not None:
        missing[key] = missing.get(key, 0) + 1


class Reader:
    """One GPU's handle, its active NVLink links and its cumulative error counters.

    `unsupported` (shared with the caller's record) collects every reading the GPU cannot give, with NVML's words;
    `retired` adds the retired pages (single- and double-bit causes), which the whole-run watch reads and the soak's
    minutes do not."""

    def __init__(self, nvml: Any, target: int | str, unsupported: dict[str, str] | None = None,
                 retired: bool = False):
        self.nvml = nvml
        self.target = target
        self.unsupported = {} if unsupported is None else unsupported
        self.retired = retired
        self.handle: Any = None
        self.links: list[int] = []
        self.nvlink_keys: list[str] = []
        self.nvlink_totals = False
        self.no_nvlink: str | None = None  # why the GPU has no NVLink link to read (NVML's words)

    def open(self) -> Reader:
        n = self.nvml
        self.handle = (n.nvmlDeviceGetHandleByIndex(self.target) if isinstance(self.target, int)
                       else n.nvmlDeviceGetHandleByUUID(self.target))
        for link in range(int(getattr(n, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                if n.nvmlDeviceGetNvLinkState(self.handle, link):
                    self.links.append(link)
            except Exception as e:  # past the last link, or no NVLink at all
                if link == 0:
                    self.no_nvlink = why(e)
                    if code(e) != NOT_SUPPORTED:
                        self.unsupported["nvlink"] = why(e)
                break
        self._nvlink_keys()
        return self

    def _nvlink_keys(self) -> None:
        """Per-link counters where the driver has them, else the totals over all links."""
        if not self.links:
            self.no_nvlink = self.no_nvlink or "no active NVLink link"
            return
        try:
            self.nvml.nvmlDeviceGetNvLinkErrorCounter(self.handle, self.links[0], 0)
        except Exception as e:
            self.nvlink_totals = code(e) in PERMANENT
        self.nvlink_keys = ([f"nvlink all {c}" for c in NVLINK_TOTAL_FIELDS] if self.nvlink_totals else
                            [nvlink_key(link, c) for link in self.links for c in NVLINK_COUNTERS])

    def read(self, name: str, read: Callable[[], Any], missing: dict[str, int] | None = None) -> Any:
        """One reading; None when unsupported (recorded once) or failed (counted in `missing`)."""
        if name in self.unsupported:
            return None
        try:
            return read()
        except Exception as e:
            if permanent(e):
                self.unsupported[name] = why(e)
            else:
                _count(missing, name)
            return None

    def counters(self, missing: dict[str, int] | None = None) -> dict[str, float]:
        """Every cumulative error counter the GPU gives, by name (NVLink ones: nvlink_key)."""
        n, h, out = self.nvml, self.handle, {}
        reads: dict[str, Callable[[], Any]] = {
            "ecc_corrected": lambda: n.nvmlDeviceGetTotalEccErrors(h, 0, 0),  # corrected, volatile
            "ecc_uncorrected": lambda: n.nvmlDeviceGetTotalEccErrors(h, 1, 0),  # uncorrected, volatile
            "pcie_replays": lambda: n.nvmlDeviceGetPcieReplayCounter(h),
        }
        if self.retired:
            for name, cause in RETIREMENT_CAUSES.items():
                reads[name] = lambda cause=cause: len(n.nvmlDeviceGetRetiredPages(h, cause))
        for name, read in reads.items():
            value = self.read(name, read, missing)
            if value is not None:
                out[name] = float(value)
        remap = self.read("row_remaps", lambda: n.nvmlDeviceGetRemappedRows(h), missing)
        if remap is not None:
            out["remapped_rows_uncorrectable"], out["pending_row_remap"] = float(remap[1]), float(remap[2])
            if self.retired:
                out["row_remap_failure"] = float(remap[3])
        if self.nvlink_totals:
            self._nvlink_totals(missing, out)
            return out
        for link in self.links:
            for counter, c in NVLINK_COUNTERS.items():
                key = nvlink_key(link, counter)
                value = self.read(key, lambda link=link, c=c: n.nvmlDeviceGetNvLinkErrorCounter(h, link, c), missing)
                if value is not None:
                    out[key] = float(value)
        return out

    def _nvlink_totals(self, missing: dict[str, int] | None, out: dict[str, float]) -> None:
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(self.handle, list(NVLINK_TOTAL_FIELDS.values()))
        except Exception as e:
            for key in self.nvlink_keys:
                if code(e) in PERMANENT:
                    self.unsupported.setdefault(key, why(e))
                else:
                    _count(missing, key)
            return
        for name, v in zip(NVLINK_TOTAL_FIELDS, values, strict=False):
            key = f"nvlink all {name}"
            if int(v.nvmlReturn) in PERMANENT:
                self.unsupported.setdefault(key, f"NVML_FI_DEV_NVLINK_{name.upper()}_ERROR_COUNT_TOTAL: "
                                                 "Not Supported")
            elif int(v.nvmlReturn) == 0 and key not in self.unsupported:
                out[key] = field_value(v)
            else:
                _count(missing, key)

    # XID events -------------------------------------------------------------------------------------------------
    def xid_events(self) -> Any:
        """An event set the GPU's critical XIDs arrive on; None (and `unsupported["xid"]`) where it cannot be had."""
        try:
            events = self.nvml.nvmlEventSetCreate()
            self.nvml.nvmlDeviceRegisterEvents(self.handle, XID_EVENT, events)
            return events
        except Exception as e:
            self.unsupported["xid"] = why(e)
            return None

    def wait_xid(self, events: Any, timeout_ms: int) -> int | None:
        """The next XID within the timeout, None when none came; raises what NVML raises but a timeout."""
        try:
            data = self.nvml.nvmlEventSetWait(events, max(1, timeout_ms))
        except Exception as e:
            if code(e) == TIMEOUT:
                return None
            raise
        if int(getattr(data, "eventType", XID_EVENT)) & XID_EVENT:
            return int(data.eventData)
        return None

    # identity and fabric -----------------------------------------------------------------------------------------
    def identity(self) -> tuple[str | None, str | None]:
        """The GPU's serial and PCI bus id, None where NVML does not say."""
        serial = self.read("serial", lambda: _text(self.nvml.nvmlDeviceGetSerial(self.handle)))
        bus = self.read("bus_id", lambda: _text(self.nvml.nvmlDeviceGetPciInfo(self.handle).busId))
        self.unsupported.pop("serial", None)
        self.unsupported.pop("bus_id", None)
        return serial, bus

    def fabric(self) -> dict[str, Any]:
        """The GPU's NVSwitch fabric state: {"state", "status", "clique", "cluster"}, or {"unsupported": why}.

        nvmlDeviceGetGpuFabricInfoV where the bindings have it, else nvmlDeviceGetGpuFabricInfo; state 0 ("not
        supported": a PCIe GPU, a VM without the fabric) is unsupported too."""
        n = self.nvml
        try:
            if hasattr(n, "nvmlDeviceGetGpuFabricInfoV") and hasattr(n, "c_nvmlGpuFabricInfoV_t"):
                info = n.c_nvmlGpuFabricInfoV_t()
                n.nvmlDeviceGetGpuFabricInfoV(self.handle, ctypes.byref(info))
            else:
                info = n.c_nvmlGpuFabricInfo_t()
                n.nvmlDeviceGetGpuFabricInfo(self.handle, ctypes.byref(info))
        except Exception as e:
            return {"unsupported": why(e)} if permanent(e) else {"error": why(e)}
        state = int(info.state)
        if state == 0:
            return {"unsupported": "NVML reports the fabric state as not supported (no NVSwitch fabric)"}
        return {"state": state, "status": int(info.status), "clique": int(info.cliqueId),
                "cluster": bytes(info.clusterUuid).hex()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
