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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance_workload import binding, mig
from acceptance_workload.checks import PreflightThresholds
from acceptance_workload.occupancy import Occupancy, judge_in_use, nvml_init
from acceptance_workload.render import human_bytes
from acceptance_workload.report import CheckResult, Skip, judge
from acceptance_workload.wire import format_bytes, parse_bytes

if TYPE_CHECKING:
    from acceptance_workload.config import WorkloadConfig
    from acceptance_workload.control import Watchdog
    from acceptance_workload.launch import Session

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


def version_tuple(text: str) -> tuple[int, ...]:
    """'535.104.05' -> (535, 104, 5); non-numeric tails are ignored ('12.4+cu' -> (12, 4))."""
    out = []
    for part in str(text).split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _result(name: str, value: float | None, threshold: float | None, comparison: str, *, unit: str = "",
            node: str | None, gpu: int | None = None, message: str = "", observed: str | None = None,
            expected: str | None = None) -> CheckResult:
    comp = comparison if threshold is not None else "info"
    return CheckResult(check="preflight", name=name, value=value, unit=unit, threshold=threshold,
                       comparison=comp, passed=judge(value, threshold, comp), message=message, node=node,
                       gpu=gpu, observed=observed, expected=expected)


def _flag(name: str, ok: bool | None, *, node: str | None, gpu: int | None = None, message: str,
          observed: str | None = None, expected: str | None = None, judged: bool = True) -> CheckResult:
    """A yes/no item: value 1 (good) or 0 (bad), None when it could not be read."""
    value = None if ok is None else float(ok)
    return _result(name, value, 1.0 if judged else None, "eq", node=node, gpu=gpu, message=message,
                   observed=observed, expected=expected)


# ----------------------------------------------------------------------------- node: limits, /dev/shm, IB


def shm_check(th: PreflightThresholds, node: str, shm_path: str | os.PathLike = "/dev/shm") -> CheckResult:
    need = parse_bytes(th.min_shm_bytes) if th.min_shm_bytes is not None else None
    try:
        st = os.statvfs(shm_path)
    except OSError as e:
        return _result("shm_size", None, need, "ge", unit="bytes", node=node,
                       message=f"cannot stat {shm_path}: {e}; mount a Memory emptyDir there (spec.pod.shmSize)")
    size = st.f_frsize * st.f_blocks
    msg = f"{shm_path} is {human_bytes(size)} ({size} bytes)"
    if need is not None and size < need:
        msg += f"; needs >= {format_bytes(need)}: raise spec.pod.shmSize (NCCL's SHM transport and DDP use it)"
    return _result("shm_size", float(size), None if need is None else float(need), "ge", unit="bytes",
                   node=node, message=msg, observed=human_bytes(size))


def memlock_check(th: PreflightThresholds, node: str, limits: tuple[int, int] | None = None,
                  rdma: bool = True) -> CheckResult:
    """Judged only where RDMA is used (several nodes on infiniband/roce): verbs pin memory against this limit."""
    soft, _hard = limits if limits is not None else resource.getrlimit(resource.RLIMIT_MEMLOCK)
    unlimited = soft == resource.RLIM_INFINITY
    shown = "unlimited" if unlimited else f"{human_bytes(soft)} ({soft} bytes)"
    required = bool(th.require_unlimited_memlock) and rdma
    msg = f"RLIMIT_MEMLOCK of the workload process is {shown}"
    if required and not unlimited:
        msg += f"; {MEMLOCK_HINT}"
    elif th.require_unlimited_memlock and not rdma:
        msg += " (not judged: this run uses no RDMA)"
    return _flag("memlock_unlimited", unlimited, node=node, message=msg, observed=shown,
                 expected="unlimited" if required else None, judged=required)


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
        return [_result("ib_ports", None, 1.0, "ge", unit="ports", node=node,
                        message=f"no RDMA port{where} under /sys/class/infiniband in the pod on node {node}: "
                        "request the RDMA device resource (spec.resources.extra) and check the device plugin")], []
    results = []
    judged = nodes > 1  # a single-node run sends nothing over the fabric: its ports are recorded, not judged
    note = "" if judged else " (single node: not judged)"
    for p in ports:
        name = f"{p.device}:{p.port}"
        active = p.state.upper().endswith("ACTIVE")
        results.append(_flag("ib_port_state", active, node=node, observed=f"{name} {p.state}", expected="ACTIVE",
                             judged=judged, message=f"{name} ({p.link_layer}) state {p.state}{note}"))
        need = th.min_ib_rate_gbps if judged else None
        msg = f"{name} rate {p.rate_text or 'unknown'}{note}"
        if need is not None and (p.rate_gbps or 0) < need:
            msg += f"; needs >= {need:g} Gb/s (a degraded link or cable)"
        results.append(_result("ib_port_rate", p.rate_gbps, need, "ge", unit="Gb/s", node=node, message=msg,
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
    out.append(_result("gpu_count", float(v.cuda_gpus), float(expected_gpus), "ge", unit="GPUs", node=node,
                       message=msg, observed=visible))
    for name, have, need in (("driver_version", v.driver, th.min_driver_version),
                             ("cuda_version", v.cuda, th.min_cuda_version),
                             ("nccl_version", v.nccl, th.min_nccl_version)):
        if need is None:
            if have is not None:
                out.append(_flag(name, True, node=node, observed=have, message=f"{name} {have}", judged=False))
            continue
        ok = None if have is None else version_tuple(have) >= version_tuple(need)
        msg = f"{name} {have or 'unknown'}" + ("" if ok else f"; needs >= {need}")
        out.append(_flag(name, ok, node=node, observed=have, expected=f">= {need}", message=msg))
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


def judge_gpu(s: GpuSnapshot, th: PreflightThresholds, node: str, gpu: int) -> tuple[list[CheckResult], list[Skip]]:
    """Results for one GPU; an unreadable item is a failure only where a threshold needs it."""
    results: list[CheckResult] = []
    skipped: list[Skip] = []
    label = f"GPU {gpu}" + (f" ({s.bus_id})" if s.bus_id else "") + f" on node {node}"

    def missing(name: str, key: str, needed: bool) -> bool:
        """True when the value is unreadable; records a failure (needed) or a skip (not judged)."""
        err = s.errors.get(key, "not reported")
        if needed:
            results.append(_result(name, None, 1.0, "ge", node=node, gpu=gpu,
                                   message=f"{label}: cannot read {name} ({err})"))
        else:
            skipped.append(Skip(check="preflight", name=f"{name} gpu {gpu}", reason=f"{label}: {err}"))
        return True

    if s.name is None:
        missing("gpu_model", "name", th.gpu_model is not None)
    else:
        ok = th.gpu_model is None or th.gpu_model.lower() in s.name.lower()
        results.append(_flag("gpu_model", ok, node=node, gpu=gpu, observed=s.name, expected=th.gpu_model,
                             judged=th.gpu_model is not None,
                             message=f"{label} is {s.name}" + ("" if ok else f"; expected {th.gpu_model}")))
    if s.temperature_c is None:
        missing("temperature", "temperature", th.max_gpu_temperature_c is not None)
    else:
        results.append(_result("temperature", float(s.temperature_c), th.max_gpu_temperature_c, "le", unit="C",
                               node=node, gpu=gpu, message=f"{label} at {s.temperature_c} C"))
    if s.ecc_uncorrected is None:
        missing("ecc_uncorrected", "ecc", th.max_uncorrected_ecc_errors is not None)
    else:
        thr = th.max_uncorrected_ecc_errors
        results.append(_result("ecc_uncorrected", float(s.ecc_uncorrected), None if thr is None else float(thr),
                               "le", unit="errors", node=node, gpu=gpu,
                               message=f"{label}: {s.ecc_uncorrected} volatile uncorrected ECC errors"))
    if s.pending_remap is None:
        missing("pending_row_remaps", "remap", th.max_pending_row_remaps is not None)
    else:
        thr = th.max_pending_row_remaps
        msg = f"{label}: row remap pending={s.pending_remap}, remap failure={s.remap_failure}"
        if s.pending_remap:
            msg += "; reset the GPU (or reboot the node) to apply the pending remap"
        results.append(_result("pending_row_remaps", float(s.pending_remap), None if thr is None else float(thr),
                               "le", node=node, gpu=gpu, message=msg))
        if s.remap_failure:
            results.append(_flag("row_remap_failure", False, node=node, gpu=gpu,
                                 message=f"{label}: row remapping failed; the GPU needs service"))
    if s.throttle_reasons is None:
        missing("throttle", "throttle", bool(th.fail_on_throttle))
    else:
        bad = [text for bit, text in BAD_THROTTLE.items() if s.throttle_reasons & bit]
        clocks = f"SM {s.sm_clock_mhz}/{s.max_sm_clock_mhz} MHz" if s.sm_clock_mhz is not None else ""
        msg = f"{label}: " + (", ".join(bad) if bad else "no hardware/thermal/power-brake slowdown") + \
            (f" ({clocks})" if clocks else "")
        results.append(_flag("throttle", not bad, node=node, gpu=gpu, judged=bool(th.fail_on_throttle),
                             observed=f"0x{s.throttle_reasons:x}", message=msg))
    if s.pcie_gen is None or s.pcie_width is None:
        missing("pcie_link", "pcie", th.min_pcie_generation is not None or th.min_pcie_width is not None)
    else:
        link = f"gen{s.pcie_gen} x{s.pcie_width} (max gen{s.pcie_max_gen} x{s.pcie_max_width})"
        results.append(_result("pcie_generation", float(s.pcie_gen), _num(th.min_pcie_generation), "ge", node=node,
                               gpu=gpu, observed=link, message=f"{label}: PCIe link {link} under load"))
        results.append(_result("pcie_width", float(s.pcie_width), _num(th.min_pcie_width), "ge", unit="lanes",
                               node=node, gpu=gpu, observed=link, message=f"{label}: PCIe link {link} under load"))
    if s.nvlink_active is None:
        missing("nvlink_active_links", "nvlink", bool(th.min_nvlink_active_links))
    else:
        results.append(_result("nvlink_active_links", float(s.nvlink_active), _num(th.min_nvlink_active_links),
                               "ge", unit="links", node=node, gpu=gpu,
                               message=f"{label}: {s.nvlink_active} of {s.nvlink_total} NVLink links active"))
    return results, skipped


def _num(x: int | float | None) -> float | None:
    return None if x is None else float(x)


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

    def failed_nodes(self) -> list[str]:
        return sorted({r.node for r in self.results if not r.passed and r.node})

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]


def local_preflight(config: WorkloadConfig, node: str, local_rank: int, device: Any, versions: Versions | None, *,
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
        out.results.append(_result("gpu_health", None, 1.0, "ge", node=node, gpu=local_rank,
                                   message=f"GPU {local_rank} on node {node} could not be inspected through NVML: "
                                   f"{type(e).__name__}: {e}"))
        return out
    results, skipped = judge_gpu(snap, th, node, local_rank)
    out.results += results
    out.results.append(mig.judge_mig(nvml, handle, th, node, local_rank))
    out.skipped += skipped
    return out


def run_preflight(session: Session, config: WorkloadConfig, watchdog: Watchdog,
                  versions: Versions | None, occupancy: Occupancy | None = None) -> PreflightOutcome | None:
    """Every rank's part, gathered on rank 0 (None elsewhere)."""
    with watchdog.step("preflight"):
        mine = local_preflight(config, session.env.node, session.env.local_rank, session.device, versions,
                               occupancy=occupancy)
    gathered = session.control.gather("preflight", {
        "results": [r.to_wire() for r in mine.results], "skipped": [s.to_wire() for s in mine.skipped]})
    if gathered is None:
        return None
    out = PreflightOutcome()
    for part in gathered:
        out.results += [CheckResult.model_validate(r) for r in part["results"]]
        out.skipped += [Skip.model_validate(s) for s in part["skipped"]]
    return out
