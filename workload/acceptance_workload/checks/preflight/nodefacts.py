"""Every GPU and node named the way a technician finds them: serials, bus ids, firmware and versions.

A failure that says "GPU 3 on node gpu-node-7" sends someone to the rack with
a question: which board is GPU 3? NVML numbers GPUs by PCI bus order inside
this container, nvidia-smi on the host may number them differently, and an
RMA needs the serial. So each rank reads its own GPU's UUID, board serial,
PCI bus id, VBIOS and InfoROM versions through NVML; local rank 0 adds the
node's driver, CUDA and NCCL versions and its network adapters' firmware
(sysfs: /sys/class/infiniband/*/fw_ver, the PCI device and driver behind
/sys/class/net/*/device, and `ethtool -i` where it is installed). They go into the report's `nodes` (evidence), and
every failed result naming a GPU gets the GPU's serial and bus id in its
message (`annotate`), so the report's text, HTML, JUnit and the status all say
it.

Every read tolerates NotSupported, a missing call in an older nvidia-ml-py, or
no NVML at all: the value is None and the run goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from acceptance_workload.report.model import GpuIdentity, HostLoad, Nic, NodeFacts, ReportBase
from acceptance_workload.runtime.gpus import nvml_init, nvml_target

ETHTOOL_SECONDS = 2  # one interface's `ethtool -i`: a hung driver must not hold the preflight
# Each identity field and the NVML call that reads it (older bindings may lack a call: the field stays None).
IDENTITY_CALLS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("uuid", "nvmlDeviceGetUUID", lambda v: v),
    ("serial", "nvmlDeviceGetSerial", lambda v: v),
    ("bus_id", "nvmlDeviceGetPciInfo", lambda v: v.busId),
    ("vbios", "nvmlDeviceGetVbiosVersion", lambda v: v),
    ("inforom", "nvmlDeviceGetInforomImageVersion", lambda v: v),
)


def _text(x: Any) -> str | None:
    text = (x.decode(errors="replace") if isinstance(x, bytes) else str(x)).strip().strip("\0")
    return text or None


def gpu_identity(nvml: Any, handle: Any, gpu: int) -> GpuIdentity:
    """One GPU's identity; a call that fails or does not exist leaves its field None."""
    values: dict[str, str | None] = {}
    for name, call, pick in IDENTITY_CALLS:
        values[name] = None
        fn = getattr(nvml, call, None)
        if fn is not None:
            with contextlib.suppress(Exception):
                values[name] = _text(pick(fn(handle)))
    return GpuIdentity(gpu=gpu, **values)


def own_gpu(local_rank: int, environ: Mapping[str, str] | None = None, nvml: Any = None) -> GpuIdentity:
    """This rank's GPU (as gpus.nvml_target finds it: CUDA_VISIBLE_DEVICES' entry, else the local rank)."""
    target = nvml_target(local_rank, os.environ if environ is None else environ)
    try:
        nvml = nvml if nvml is not None else nvml_init()
        handle = (nvml.nvmlDeviceGetHandleByIndex(target) if isinstance(target, int)
                  else nvml.nvmlDeviceGetHandleByUUID(target))
    except Exception:
        return GpuIdentity(gpu=local_rank)
    return gpu_identity(nvml, handle, local_rank)


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text().strip() or None
    return None


def _link_name(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return os.path.basename(os.readlink(path)) or None
    return None


def ethtool_firmware(interface: str) -> str | None:
    """`ethtool -i`'s firmware-version of a network interface, where ethtool is installed (sysfs has none for a
    plain Ethernet NIC); None where it is not, or says nothing."""
    tool = shutil.which("ethtool")
    if tool is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([tool, "-i", interface], capture_output=True, text=True, timeout=ETHTOOL_SECONDS).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "firmware-version" and value.strip() not in ("", "N/A"):
                return value.strip()
    return None


def nics(sys_root: str | os.PathLike = "/") -> list[Nic]:
    """RDMA devices with their firmware, then network interfaces backed by a PCI device (not loopback, bridges,
    veths), with their PCI address, driver and (through ethtool, where installed) firmware."""
    root = Path(sys_root) / "sys" / "class"
    out = []
    ib = root / "infiniband"
    for dev in sorted(ib.iterdir()) if ib.is_dir() else []:
        out.append(Nic(name=dev.name, firmware=_read(dev / "fw_ver"), board_id=_read(dev / "board_id"),
                       pci=_link_name(dev / "device"), driver=_link_name(dev / "device" / "driver")))
    net = root / "net"
    for dev in sorted(net.iterdir()) if net.is_dir() else []:
        if (dev / "device").exists():
            out.append(Nic(name=dev.name, pci=_link_name(dev / "device"), firmware=ethtool_firmware(dev.name),
                           driver=_link_name(dev / "device" / "driver")))
    return out


def rank_facts(local_rank: int, versions: Any, *, gpus: bool, host_load: HostLoad | None,
               sys_root: str | os.PathLike = "/", environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This rank's part of its node's facts, for the preflight's gather: its GPU, and on local rank 0 the node's
    versions, adapters and host load. Never raises."""
    part: dict[str, Any] = {}
    if gpus:
        with contextlib.suppress(Exception):
            part["gpus"] = [own_gpu(local_rank, environ).to_wire()]
    if local_rank == 0:
        if versions is not None:
            part.update(driverVersion=versions.driver, cudaVersion=versions.cuda,
                        cudaDriverVersion=versions.cuda_driver, ncclVersion=versions.nccl)
        with contextlib.suppress(Exception):
            part["nics"] = [n.to_wire() for n in nics(sys_root)]
        if host_load is not None:
            part["hostLoad"] = [host_load.to_wire()]
    return part


def merge(parts: Iterable[tuple[str, Mapping[str, Any] | None]]) -> list[NodeFacts]:
    """The ranks' parts (node, part) folded into one NodeFacts a node, GPUs in index order."""
    by_node: dict[str, NodeFacts] = {}
    for node, part in parts:
        facts = by_node.setdefault(node, NodeFacts(node=node))
        if not part:
            continue
        one = NodeFacts.model_validate({"node": node, **part})
        for key in ("driver_version", "cuda_version", "cuda_driver_version", "nccl_version"):
            if getattr(one, key) is not None:
                setattr(facts, key, getattr(one, key))
        facts.nics += one.nics
        facts.gpus = sorted(facts.gpus + one.gpus, key=lambda g: g.gpu)
        facts.host_load += one.host_load
    return [by_node[n] for n in sorted(by_node)]


def add_loads(report: ReportBase, loads: Iterable[tuple[str, list[HostLoad]]]) -> None:
    """Each node's stage-by-stage host load (hostload.Watch) into its facts."""
    for node, more in loads:
        facts = next((n for n in report.nodes if n.node == node), None)
        if facts is None:
            facts = NodeFacts(node=node)
            report.nodes.append(facts)
        facts.host_load += more


def gather_loads(session: Any, watch: Any, report: ReportBase) -> None:
    """Each node's host load stage by stage (its local rank 0's hostload.Watch, None elsewhere), gathered on
    every rank into rank 0's report's node facts."""
    loads = None
    if watch is not None:
        watch.mark(None)
        loads = [h.to_wire() for h in watch.loads]
    gathered = session.control.gather("host load", loads)
    if gathered is not None:
        add_loads(report, ((info.node, [HostLoad.model_validate(h) for h in part])
                           for info, part in zip(session.ranks, gathered, strict=True) if part))


def annotate(report: ReportBase) -> int:
    """Every failed result naming a GPU gets the GPU's serial and bus id in its message. Idempotent."""
    changed = 0
    for r in report.results:
        ident = None if r.passed else report.gpu_identity(r.node, r.gpu)
        if ident is None or (ident.serial is None and ident.bus_id is None):
            continue
        tag = f"[GPU {r.gpu}: {ident.label()}]"
        if tag not in r.message:
            r.message = f"{r.message} {tag}".strip()
            changed += 1
    return changed
