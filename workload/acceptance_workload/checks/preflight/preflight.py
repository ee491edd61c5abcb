"""Per-node health before any collective: GPUs through NVML, the fabric and limits through /sys and the kernel.

Each rank checks its own GPU (after a short load, so the PCIe link is at its
working speed rather than its idle power-saving state); local rank 0 checks
what belongs to the node: GPU count, versions, InfiniBand ports, /dev/shm and
the memlock limit of this very process (an init container's ulimit does not
carry over, so the limit the workload really has is what counts). A
measurement a threshold needs but that cannot be taken fails (fail closed).
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.preflight import binding, hostload, mig, nodefacts
from acceptance_workload.checks.preflight.occupancy import Occupancy, judge_in_use
from acceptance_workload.checks.preflight.rules import RULES
from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.rules import Run
from acceptance_workload.contract.wire import format_bytes, version_tuple
from acceptance_workload.report.model import NodeFacts, Skip
from acceptance_workload.report.render import human_bytes
from acceptance_workload.runtime.gpus import nvml_init

if TYPE_CHECKING:
    from acceptance_workload.contract.config import RunConfig
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.watchdog import Watchdog

# NVML clock event (throttle) reasons that mean the hardware is slowing the GPU down.
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
BAD_THROTTLE = {HW_SLOWDOWN: "hardware slowdown", SW_THERMAL_SLOWDOWN: "software thermal slowdown",
                HW_THERMAL_SLOWDOWN: "hardware thermal slowdown", HW_POWER_BRAKE_SLOWDOWN: "power brake"}
NVLINK_MAX_LINKS = 18
MEMLOCK_HINT = (
    "RDMA needs it unlimited. An init container's ulimit does not reach this container: set the container "
    "runtime's default (containerd: LimitMEMLOCK=infinity in its systemd unit, or default_ulimits = "
    '["memlock=-1:-1"] in CRI-O; Docker: --default-ulimit memlock=-1:-1) and restart it on the node'
)


def _result(name: str, value: float | None, th: PreflightThresholds, *, run: Run | None = None,
            node: str | None, gpu: int | None = None, message: str = "", observed: str | None = None,
            expected: str | None = None) -> CheckResult:
    """A preflight result judged by its row in the check's RULES (rules.py) (threshold, comparison, unit)."""
    return RULES.result(name, value, th, run=run, message=message, node=node, gpu=gpu,
                        observed=observed, expected=expected)


def _flag(name: str, ok: bool | None, th: PreflightThresholds, *, run: Run | None = None, node: str | None,
          gpu: int | None = None, message: str, observed: str | None = None,
          expected: str | None = None) -> CheckResult:
    """A yes/no item: value 1 (good) or 0 (bad), None when it could not be read; judged where its row says."""
    value = None if ok is None else float(ok)
    return _result(name, value, th, run=run, node=node, gpu=gpu, message=message, observed=observed,
                   expected=expected)


# ----------------------------------------------------------------------------- node: limits, /dev/shm, IB


def shm_check(th: PreflightThresholds, node: str, shm_path: str | os.PathLike = "/dev/shm") -> CheckResult:
    need = RULES.threshold("shm_size", th)
    try:
        st = os.statvfs(shm_path)
    except OSError as e:
        return _result("shm_size", None, th, node=node,
                       message=f"cannot stat {shm_path}: {e}; mount a Memory emptyDir there (spec.pod.shmSize)")
    size = st.f_frsize * st.f_blocks
    msg = f"{shm_path} is {human_bytes(size)} ({size} bytes)"
    if need is not None and size < need:
        msg += f"; needs >= {format_bytes(int(need))}: raise spec.pod.shmSize (NCCL's SHM transport and DDP use it)"
    return _result("shm_size", float(size), th, node=node, message=msg, observed=human_bytes(size))


def memlock_check(th: PreflightThresholds, node: str, limits: tuple[int, int] | None = None,
                  rdma: bool = True) -> CheckResult:
    """Judged only where RDMA is used (several nodes on infiniband/roce): verbs pin memory against this limit."""
    soft, _hard = limits if limits is not None else resource.getrlimit(resource.RLIMIT_MEMLOCK)
    unlimited = soft == resource.RLIM_INFINITY
    shown = "unlimited" if unlimited else f"{human_bytes(soft)} ({soft} bytes)"
    run = Run(nodes=2 if rdma else 1)
    required = RULES.threshold("memlock_unlimited", th, run) is not None
    msg = f"RLIMIT_MEMLOCK of the workload process is {shown}"
    if required and not unlimited:
        msg += f"; {MEMLOCK_HINT}"
    elif RULES.threshold("memlock_unlimited", th, Run(nodes=2)) is not None and not rdma:
        msg += " (not judged: this run uses no RDMA)"
    return _flag("memlock_unlimited", unlimited, th, run=run, node=node, message=msg, observed=shown,
                 expected="unlimited" if required else None)


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str  # "4: ACTIVE"
    rate_gbps: float | None
    rate_text: str
    link_layer: str


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def hca_selected(device: str, port: int, spec: str | None) -> bool:
    """NCCL_IB_HCA semantics: a comma list of name[:port], prefix match; '=' exact; '^' excludes."""
    if not spec:
        return True
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    matched = False
    for item in filter(None, (s.strip() for s in body.split(","))):
        name, _, want_port = item.partition(":")
        name_ok = device == name if exact else device.startswith(name)
        if name_ok and (not want_port or want_port == str(port)):
            matched = True
            break
    return not matched if exclude else matched


def ib_ports(sys_root: str | os.PathLike = "/", hca_filter: str | None = None) -> list[IbPort]:
    base = Path(sys_root) / "sys" / "class" / "infiniband"
    ports = []
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        for pdir in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            if not pdir.name.isdigit() or not hca_selected(dev.name, int(pdir.name), hca_filter):
                continue
            rate_text = _read(pdir / "rate") or ""
            try:
                rate = float(rate_text.split()[0]) if rate_text else None
            except ValueError:
                rate = None
            ports.append(IbPort(dev.name, int(pdir.name), _read(pdir / "state") or "unknown", rate, rate_text,
                                _read(pdir / "link_layer") or "unknown"))
    return ports


def ib_checks(th: PreflightThresholds, node: str, *, fabric: str, nodes: int, sys_root: str | os.PathLike = "/",
              hca_filter: str | None = None) -> tuple[list[CheckResult], list[Skip]]:
    if fabric == "ethernet":
        return [], [Skip(check="preflight", name="ib_ports", reason="network.fabric is ethernet: no RDMA ports")]
    ports = ib_ports(sys_root, hca_filter)
    if not ports:
        if nodes == 1:
            return [], [Skip(check="preflight", name="ib_ports",
                             reason=f"no RDMA device visible on node {node}; a single-node test does not use one")]
        where = f" matching NCCL_IB_HCA={hca_filter}" if hca_filter else ""
        ask = ("the EFA devices (network.efaDevices: vpc.amazonaws.com/efa) and check the EFA device plugin"
               if fabric == "efa" else "the RDMA device resource (spec.resources.extra) and check the device plugin")
        return [_result("ib_ports", None, th, node=node,
                        message=f"no RDMA port{where} under /sys/class/infiniband in the pod on node {node}: "
                        f"request {ask}")], []
    results = []
    run = Run(nodes=nodes, fabric=fabric)  # a single-node run sends nothing over the fabric: recorded, not judged
    note = "" if nodes > 1 else " (single node: not judged)"
    for p in ports:
        name = f"{p.device}:{p.port}"
        active = p.state.upper().endswith("ACTIVE")
        results.append(_flag("ib_port_state", active, th, run=run, node=node, observed=f"{name} {p.state}",
                             expected="ACTIVE", message=f"{name} ({p.link_layer}) state {p.state}{note}"))
        need = RULES.threshold("ib_port_rate", th, run)
        msg = f"{name} rate {p.rate_text or 'unknown'}{note}"
        if need is not None and (p.rate_gbps or 0) < need:
            msg += f"; needs >= {need:g} Gb/s (a degraded link or cable)"
        results.append(_result("ib_port_rate", p.rate_gbps, th, run=run, node=node, message=msg,
                               observed=f"{name} {p.rate_text}"))
    return results, []


# ----------------------------------------------------------------------------- versions


@dataclass
class Versions:
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    gpu_model: str | None = None
    nvml_gpus: int | None = None
    cuda_gpus: int = 0
    nvml_error: str | None = None


def _text(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def collect_versions() -> Versions:
    """torch / CUDA / NCCL from torch, driver and GPU model from NVML (what is missing stays None)."""
    import torch

    v = Versions(torch=torch.__version__, cuda=torch.version.cuda)
    if torch.cuda.is_available():
        v.cuda_gpus = torch.cuda.device_count()
        try:
            raw = torch.cuda.nccl.version()
            v.nccl = ".".join(map(str, raw)) if isinstance(raw, tuple) else _nccl_int(int(raw))
        except Exception:
            v.nccl = None
    try:
        nvml = nvml_init()
        v.driver = _text(nvml.nvmlSystemGetDriverVersion())
        cd = nvml.nvmlSystemGetCudaDriverVersion()
        v.cuda_driver = f"{cd // 1000}.{cd % 1000 // 10}"
        v.nvml_gpus = nvml.nvmlDeviceGetCount()
        if v.nvml_gpus:
            v.gpu_model = _text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0)))
    except Exception as e:
        v.nvml_error = f"{type(e).__name__}: {e}"
    return v


def _nccl_int(code: int) -> str:
    major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def version_checks(th: PreflightThresholds, node: str, v: Versions, expected_gpus: int) -> list[CheckResult]:
    out = []
    visible = f"CUDA sees {v.cuda_gpus}, NVML sees {v.nvml_gpus if v.nvml_gpus is not None else 'none'}"
    msg = f"{visible}; the test expects {expected_gpus} per node"
    if v.nvml_error:
        msg += (f". NVML failed ({v.nvml_error}): the NVIDIA driver is not visible in this container "
                "(nvidia.com/gpu requested? NVIDIA container runtime on the node?)")
    out.append(_result("gpu_count", float(v.cuda_gpus), th, run=Run(gpus_per_node=expected_gpus), node=node,
                       message=msg, observed=visible))
    for name, have in (("driver_version", v.driver), ("cuda_version", v.cuda), ("nccl_version", v.nccl)):
        need = RULES.expected(name, th)
        if need is None:
            if have is not None:
                out.append(_flag(name, True, th, node=node, observed=have, message=f"{name} {have}"))
            continue
        ok = None if have is None else version_tuple(have) >= version_tuple(need)
        msg = f"{name} {have or 'unknown'}" + ("" if ok else f"; needs >= {need}")
        out.append(_flag(name, ok, th, node=node, observed=have, expected=f">= {need}", message=msg))
    return out


# ----------------------------------------------------------------------------- one GPU


@dataclass
class GpuSnapshot:
    """What NVML says about one GPU; a None field could not be read (the reason is in `errors`)."""

    index: int
    name: str | None = None
    bus_id: str | None = None
    temperature_c: float | None = None
    ecc_uncorrected: int | None = None
    pending_remap: bool | None = None
    remap_failure: bool | None = None
    throttle_reasons: int | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    nvlink_active: int | None = None
    nvlink_total: int | None = None
    errors: dict[str, str] = field(default_factory=dict)


def _try(snap: GpuSnapshot, key: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:
        snap.errors[key] = f"{type(e).__name__}: {e}"
        return None


def snapshot_gpu(nvml: Any, handle: Any, index: int) -> GpuSnapshot:
    s = GpuSnapshot(index=index)
    s.name = _try(s, "name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
    s.bus_id = _try(s, "bus_id", lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId))
    s.temperature_c = _try(s, "temperature", nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
    s.ecc_uncorrected = _try(s, "ecc", nvml.nvmlDeviceGetTotalEccErrors, handle,
                             nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
    remap = _try(s, "remap", nvml.nvmlDeviceGetRemappedRows, handle)
    if remap is not None:
        s.pending_remap, s.remap_failure = bool(remap[2]), bool(remap[3])
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    s.throttle_reasons = _try(s, "throttle", reasons, handle)
    s.sm_clock_mhz = _try(s, "clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
    s.max_sm_clock_mhz = _try(s, "clock", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
    s.pcie_gen = _try(s, "pcie", nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle)
    s.pcie_width = _try(s, "pcie", nvml.nvmlDeviceGetCurrPcieLinkWidth, handle)
    s.pcie_max_gen = _try(s, "pcie_max", nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
    s.pcie_max_width = _try(s, "pcie_max", nvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
    active = total = 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as e:
            if total == 0:
                s.errors["nvlink"] = f"{type(e).__name__}: {e}"
            break
        total += 1
        active += int(state == 1)
    if total:
        s.nvlink_active, s.nvlink_total = active, total
    return s


@dataclass
class _GpuJudgement:
    """The results and skips of one GPU's snapshot, each judged by its row in the check's RULES (rules.py)."""

    snap: GpuSnapshot
    th: PreflightThresholds
    node: str
    gpu: int
    results: list[CheckResult] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)

    @property
    def label(self) -> str:
        s = self.snap
        return f"GPU {self.gpu}" + (f" ({s.bus_id})" if s.bus_id else "") + f" on node {self.node}"

    def add(self, name: str, value: float | None, message: str, **fields: Any) -> None:
        self.results.append(_result(name, value, self.th, node=self.node, gpu=self.gpu,
                                    message=f"{self.label}{message}", **fields))

    def missing(self, name: str, key: str) -> None:
        """An unreadable value: a failure where a threshold needs it, else a skip."""
        err = self.snap.errors.get(key, "not reported")
        if RULES.needs_value(name, self.th):
            self.add(name, None, f": cannot read {name} ({err})" + _unsupported_hint(name, err))
        else:
            self.skipped.append(Skip(check="preflight", name=f"{name} gpu {self.gpu}", reason=f"{self.label}: {err}"))


def _unsupported_hint(name: str, err: str) -> str:
    """What to change where NVML says the GPU has no such reading at all (a floor the hardware cannot report, e.g.
    NVLink on one GPU passed through alone to a VM): the floor that needs it, as the spec spells it. A read that
    failed (a GPU fallen off the bus) gets no hint: that is the node's fault, not the test's."""
    found = RULES.find(name)
    unsupported = "notsupported" in err.lower().replace(" ", "").replace("_", "")
    if found is None or found.key is None or found.comparison != "ge" or not unsupported:
        return ""
    check, _, alias = found.key.partition(".")
    return (f"; this GPU does not report it at all, and spec.checks.{check}.thresholds.{alias} needs it: where the "
            "hardware truly has none, set it to 0 (not judged; a run looser than its profile never admits a node)")


def _model(j: _GpuJudgement, s: GpuSnapshot) -> None:
    want = RULES.expected("gpu_model", j.th)
    ok = want is None or want.lower() in s.name.lower()
    j.add("gpu_model", float(ok), f" is {s.name}" + ("" if ok else f"; expected {want}"), observed=s.name,
          expected=want)


def _temperature(j: _GpuJudgement, s: GpuSnapshot) -> None:
    j.add("temperature", float(s.temperature_c), f" at {s.temperature_c} C")


def _ecc(j: _GpuJudgement, s: GpuSnapshot) -> None:
    j.add("ecc_uncorrected", float(s.ecc_uncorrected), f": {s.ecc_uncorrected} volatile uncorrected ECC errors")


def _remap(j: _GpuJudgement, s: GpuSnapshot) -> None:
    msg = f": row remap pending={s.pending_remap}, remap failure={s.remap_failure}"
    if s.pending_remap:
        msg += "; reset the GPU (or reboot the node) to apply the pending remap"
    j.add("pending_row_remaps", float(s.pending_remap), msg)
    if s.remap_failure:
        j.add("row_remap_failure", 0.0, ": row remapping failed; the GPU needs service")


def _throttle(j: _GpuJudgement, s: GpuSnapshot) -> None:
    bad = [text for bit, text in BAD_THROTTLE.items() if s.throttle_reasons & bit]
    clocks = f"SM {s.sm_clock_mhz}/{s.max_sm_clock_mhz} MHz" if s.sm_clock_mhz is not None else ""
    msg = ": " + (", ".join(bad) if bad else "no hardware/thermal/power-brake slowdown") + \
        (f" ({clocks})" if clocks else "")
    j.add("throttle", float(not bad), msg, observed=f"0x{s.throttle_reasons:x}")


def _pcie(j: _GpuJudgement, s: GpuSnapshot) -> None:
    link = f"gen{s.pcie_gen} x{s.pcie_width} (max gen{s.pcie_max_gen} x{s.pcie_max_width})"
    j.add("pcie_generation", float(s.pcie_gen), f": PCIe link {link} under load", observed=link)
    j.add("pcie_width", float(s.pcie_width), f": PCIe link {link} under load", observed=link)


def _nvlink(j: _GpuJudgement, s: GpuSnapshot) -> None:
    j.add("nvlink_active_links", float(s.nvlink_active), f": {s.nvlink_active} of {s.nvlink_total} NVLink links active")


# One entry per GPU item: (result named when unreadable, NVML error key, readable?, judge of the readable value).
GPU_ITEMS: tuple[tuple[str, str, Callable[[GpuSnapshot], bool], Callable[[_GpuJudgement, GpuSnapshot], None]],
                 ...] = (
    ("gpu_model", "name", lambda s: s.name is not None, _model),
    ("temperature", "temperature", lambda s: s.temperature_c is not None, _temperature),
    ("ecc_uncorrected", "ecc", lambda s: s.ecc_uncorrected is not None, _ecc),
    ("pending_row_remaps", "remap", lambda s: s.pending_remap is not None, _remap),
    ("throttle", "throttle", lambda s: s.throttle_reasons is not None, _throttle),
    ("pcie_link", "pcie", lambda s: s.pcie_gen is not None and s.pcie_width is not None, _pcie),
    ("nvlink_active_links", "nvlink", lambda s: s.nvlink_active is not None, _nvlink),
)


def judge_gpu(s: GpuSnapshot, th: PreflightThresholds, node: str, gpu: int) -> tuple[list[CheckResult], list[Skip]]:
    """Results for one GPU; an unreadable item is a failure only where a threshold needs it."""
    j = _GpuJudgement(s, th, node, gpu)
    for name, key, readable, judge_item in GPU_ITEMS:
        if readable(s):
            judge_item(j, s)
        else:
            j.missing(name, key)
    return j.results, j.skipped



@contextlib.contextmanager
def gpu_under_load(device: Any) -> Iterator[None]:
    """Keep host-to-device copies and matmuls in flight while NVML is read, so the PCIe link reports its
    working generation and width rather than its idle power-saving state."""
    import torch

    host = torch.empty(32 << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(host.shape, dtype=torch.uint8, device=device)
    a = torch.randn(2048, 2048, device=device)
    for _ in range(200):  # ~6 GiB of copies: a few hundred ms at PCIe gen5 speed
        dev.copy_(host, non_blocking=True)
        a = (a @ a).clamp_(-1, 1)
    try:
        yield
    finally:
        torch.cuda.synchronize(device)


def own_gpu_handle(nvml: Any, device_index: int) -> Any:
    """The NVML handle of CUDA device `device_index` (by UUID, else PCI bus id, else index)."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    # nvidia-ml-py takes bytes in older releases and str in newer ones: try both.
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        text = text if text.startswith("GPU-") else f"GPU-{text}"
        for candidate in (text, text.encode()):
            with contextlib.suppress(Exception):
                return nvml.nvmlDeviceGetHandleByUUID(candidate)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        pci = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
        for candidate in (pci, pci.encode()):
            with contextlib.suppress(Exception):
                return nvml.nvmlDeviceGetHandleByPciBusId(candidate)
    return nvml.nvmlDeviceGetHandleByIndex(device_index)


# ----------------------------------------------------------------------------- the check on a session


@dataclass
class PreflightOutcome:
    results: list[CheckResult] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    nodes: list[NodeFacts] = field(default_factory=list)  # each node's identity facts and host load (nodefacts.py)

    def failed_nodes(self) -> list[str]:
        return sorted({r.node for r in self.results if not r.passed and r.node})

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]


def local_preflight(config: RunConfig, node: str, local_rank: int, device: Any, versions: Versions | None, *,
                    sys_root: str | os.PathLike = "/", shm_path: str | os.PathLike = "/dev/shm",
                    environ: Mapping[str, str] | None = None, occupancy: Occupancy | None = None,
                    ) -> PreflightOutcome:
    """This rank's part: its GPU, plus the node's items when it is local rank 0.

    `occupancy`: the GPU as NVML saw it before this process created its CUDA context (gpu_in_use).
    """
    th = config.checks.preflight.thresholds
    env = os.environ if environ is None else environ
    out = PreflightOutcome()
    if local_rank == 0:
        out.results.append(shm_check(th, node, shm_path))
        out.results.append(memlock_check(th, node, rdma=config.nodes > 1 and config.fabric != "ethernet"))
        if config.mode == "cpu-smoke":
            out.skipped.append(Skip(check="preflight", name="gpus", reason="CPU smoke run: no GPU checks"))
            out.skipped.append(Skip(check="preflight", name="ib_ports", reason="CPU smoke run: no fabric checks"))
        else:
            results, skipped = ib_checks(th, node, fabric=config.fabric, nodes=config.nodes, sys_root=sys_root,
                                         hca_filter=env.get("NCCL_IB_HCA"))
            out.results += results
            out.skipped += skipped
            out.results += version_checks(th, node, versions or collect_versions(), config.gpus_per_node)
    results, skipped = binding.preflight_binding(config, node, local_rank, env, sys_root)
    out.results += results
    out.skipped += skipped
    if config.mode == "cpu-smoke":
        return out
    in_use = judge_in_use(occupancy, th, node)
    if in_use is None:
        out.skipped.append(Skip(check="preflight", name=f"gpu_in_use gpu {local_rank}",
                                reason=f"GPU {local_rank} on node {node}: "
                                + (occupancy.describe() if occupancy else "not read")))
    else:
        out.results.append(in_use)
    try:
        nvml = nvml_init()
        if getattr(device, "type", None) == "cuda":
            handle = own_gpu_handle(nvml, device.index)
            with gpu_under_load(device):
                snap = snapshot_gpu(nvml, handle, local_rank)
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(local_rank)
            snap = snapshot_gpu(nvml, handle, local_rank)
    except Exception as e:
        out.results.append(_result("gpu_health", None, th, node=node, gpu=local_rank,
                                   message=f"GPU {local_rank} on node {node} could not be inspected through NVML: "
                                   f"{type(e).__name__}: {e}"))
        return out
    results, skipped = judge_gpu(snap, th, node, local_rank)
    out.results += results
    out.results.append(mig.judge_mig(nvml, handle, th, node, local_rank))
    out.skipped += skipped
    return out


def run_preflight(session: Session, config: RunConfig, watchdog: Watchdog,
                  versions: Versions | None, occupancy: Occupancy | None = None) -> PreflightOutcome | None:
    """Every rank's part, gathered on rank 0 (None elsewhere), with each node's facts (nodefacts, hostload)."""
    local_rank, node = session.env.local_rank, session.env.node
    with watchdog.step("preflight"):
        mine = local_preflight(config, node, local_rank, session.device, versions, occupancy=occupancy)
        load = None
        if local_rank == 0:
            with contextlib.suppress(Exception):  # host load is context: never a reason the preflight fails
                load = hostload.measure()
                mine.results.append(hostload.host_result(load, node))
        facts = nodefacts.rank_facts(local_rank, versions, gpus=config.mode != "cpu-smoke", host_load=load)
    gathered = session.control.gather("preflight", {
        "results": [r.to_wire() for r in mine.results], "skipped": [s.to_wire() for s in mine.skipped],
        "facts": facts})
    if gathered is None:
        return None
    out = PreflightOutcome()
    for part in gathered:
        out.results += [CheckResult.model_validate(r) for r in part["results"]]
        out.skipped += [Skip.model_validate(s) for s in part["skipped"]]
    out.nodes = nodefacts.merge((info.node, part.get("facts")) for info, part in zip(session.ranks, gathered,
                                                                                         strict=True))
    return out
