"""NVML's view of the path between two GPUs of a node: NVLink (and how many links), or how far up the PCIe tree
their common ancestor is. Pairs of one path are compared with each other (a PCIe pair is not slow next to NVLink).

pynvml is imported when asked for (runtime.gpus.nvml_init): the operator image has no NVML bindings.
"""

from __future__ import annotations

import contextlib
from typing import Any

from acceptance_workload.checks.preflight.preflight import NVLINK_MAX_LINKS
from acceptance_workload.runtime.gpus import nvml_init

NVLINK = "NVLink"
# nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs in the PCIe tree.
LEVELS = {0: "same board", 10: "PCIe switch", 20: "PCIe switches", 30: "host bridge", 40: "CPU",
          50: "CPU interconnect"}
UNKNOWN = "unknown"


def _handle(nvml: Any, target: int | str) -> Any:
    if isinstance(target, int):
        return nvml.nvmlDeviceGetHandleByIndex(target)
    return nvml.nvmlDeviceGetHandleByUUID(target)


def _bus(nvml: Any, handle: Any) -> str:
    info = nvml.nvmlDeviceGetPciInfo(handle)
    bus = info.busId.decode() if isinstance(info.busId, bytes) else str(info.busId)
    return bus.lower()[-12:]  # the domain's width differs between NVML's calls: compare its last part


def links_to(nvml: Any, handle: Any, peer_bus: str) -> int:
    """Active NVLink links of `handle` that reach the peer: to it directly, or to an NVSwitch (which reaches every GPU
    of the node: the count nvidia-smi topo -m shows as NV<n>)."""
    count = 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != 1:
                continue
        except Exception:
            break
        with contextlib.suppress(Exception):
            kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            if kind == getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 1):
                count += 1
                continue
        with contextlib.suppress(Exception):
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
            bus = remote.busId.decode() if isinstance(remote.busId, bytes) else str(remote.busId)
            count += int(bus.lower()[-12:] == peer_bus)
    return count


def node_paths(targets: list[int | str]) -> dict[tuple[int, int], tuple[str, int | None]]:
    """(path, NVLink links) of every ordered pair of the node's GPUs (targets: each local GPU's NVML index or UUID,
    runtime.gpus.nvml_target); "unknown" where NVML cannot say (the pair is still measured and judged)."""
    out: dict[tuple[int, int], tuple[str, int | None]] = {}
    try:
        nvml = nvml_init()
        handles = [_handle(nvml, t) for t in targets]
        buses = [_bus(nvml, h) for h in handles]
    except Exception:
        return {(i, j): (UNKNOWN, None) for i in range(len(targets)) for j in range(len(targets)) if i != j}
    for i, hi in enumerate(handles):
        for j, hj in enumerate(handles):
            if i == j:
                continue
            try:
                nvlink = nvml.nvmlDeviceGetP2PStatus(hi, hj, nvml.NVML_P2P_CAPS_INDEX_NVLINK) == nvml.NVML_P2P_STATUS_OK
            except Exception:
                nvlink = False
            if nvlink:
                out[(i, j)] = (NVLINK, links_to(nvml, hi, buses[j]))
                continue
            try:
                out[(i, j)] = (LEVELS.get(int(nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj)), UNKNOWN), None)
            except Exception:
                out[(i, j)] = (UNKNOWN, None)
    return out
