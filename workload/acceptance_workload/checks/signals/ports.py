"""The RDMA ports a pod can see, read from sysfs: each port's state, physical state, rate, error counters and
extended (hw_counters) error counters, and its network interface: the ports NCCL_IB_HCA selects, as the preflight
takes them. Read at the run's start and at its end by one rank
of each node (watch.py); judged on what changed (judge.py).

/sys/class/infiniband/<device>/ports/<n>/{state,phys_state,rate,counters/*,hw_counters/*}, and the interface from
/sys/class/infiniband/<device>/device/net/*. The directory standing for /sys is GPU_ACCEPTANCE_SYSFS_ROOT where that
is set (the tests' own tree; the operator reserves GPU_ACCEPTANCE_* names, so a user's spec.pod.env cannot set it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from acceptance_workload.checks.preflight.preflight import hca_selected
from acceptance_workload.checks.signals.rules import PORT_COUNTERS

SYSFS_ROOT_ENV = "GPU_ACCEPTANCE_SYSFS_ROOT"
# Extended error counters some drivers add under hw_counters (mlx5): sequence errors, timeouts and retries of the
# transport, each a sign of a lossy link. Other hw_counters (congestion notifications, packet counts) are not errors.
HW_ERRORS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err",
             "implied_nak_seq_err", "req_cqe_error", "resp_cqe_error", "rx_icrc_encapsulated",
             "req_remote_invalid_request", "resp_local_length_error")
ACTIVE, LINK_UP = "ACTIVE", "LinkUp"


def sysfs_root(environ: Any = os.environ) -> Path:
    return Path(environ.get(SYSFS_ROOT_ENV) or "/sys")


def _text(path: Path) -> str:
    return path.read_text().strip()


def _word(value: str) -> str:
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    return value.split(":", 1)[-1].strip()


def netdev(device: Path, port: int) -> str | None:
    """The network interface of a port: device/net/*, the one whose dev_port is the port's (ports count from 1)."""
    nets = sorted(p for p in (device / "device" / "net").glob("*")) if (device / "device" / "net").is_dir() else []
    if not nets:
        return None
    for net in nets:
        try:
            if int(_text(net / "dev_port")) == port - 1:
                return net.name
        except (OSError, ValueError):
            continue
    return ",".join(n.name for n in nets)


def read_port(device: Path, port: Path) -> dict[str, Any]:
    """One port: its state words, rate, interface and counters; a file that cannot be read is named with why."""
    out: dict[str, Any] = {"device": device.name, "port": int(port.name), "netdev": netdev(device, int(port.name)),
                           "counters": {}, "hw": {}, "unreadable": {}}
    for name in ("state", "phys_state", "rate"):
        try:
            value = _text(port / name)
            out[name] = value if name == "rate" else _word(value)
        except OSError as e:
            out["unreadable"][name] = f"{type(e).__name__}: {e.strerror or e}"
    for name in PORT_COUNTERS:
        path = port / "counters" / name
        if not path.exists():
            continue
        try:
            out["counters"][name] = float(_text(path))
        except (OSError, ValueError) as e:
            out["unreadable"][name] = f"{type(e).__name__}: {e}"[:200]
    for name in HW_ERRORS:
        path = port / "hw_counters" / name
        if path.exists():
            try:
                out["hw"][name] = float(_text(path))
            except (OSError, ValueError) as e:
                out["unreadable"][name] = f"{type(e).__name__}: {e}"[:200]
    return out


def snapshot(root: Path, hca_filter: str | None = None) -> dict[str, Any]:
    """Every RDMA port under root/class/infiniband that NCCL_IB_HCA (`hca_filter`, NCCL's own syntax, as the
    preflight reads it) selects: {"ports": [...]} or {"ports": [], "none": why there are none}."""
    base = root / "class" / "infiniband"
    if not base.is_dir():
        return {"ports": [], "none": f"no RDMA device: {base} does not exist in the pod"}
    ports = []
    for device in sorted(base.iterdir()):
        for port in sorted((device / "ports").glob("*"), key=lambda p: p.name):
            if port.name.isdigit() and hca_selected(device.name, int(port.name), hca_filter):
                ports.append(read_port(device, port))
    where = base if not hca_filter else f"{base} matching NCCL_IB_HCA={hca_filter}"
    return {"ports": ports} if ports else {"ports": [], "none": f"no RDMA port under {where}"}


def label(port: dict[str, Any]) -> str:
    """'mlx5_0 port 1 (ib0)': how every message names a port."""
    return f"{port['device']} port {port['port']}" + (f" ({port['netdev']})" if port.get("netdev") else "")
