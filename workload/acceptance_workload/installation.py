"""`python -m acceptance_workload --check-install`: does this environment have what the workload needs?

Run at the end of hack/install-workload.sh (so an image build fails on a
missing piece instead of the first acceptance run) and by the
workload-install-check make target.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable


def _probe(name: str, fn: Callable[[], str]) -> tuple[str, str | None, str | None]:
    try:
        return name, fn(), None
    except Exception as e:
        return name, None, f"{type(e).__name__}: {e}"


def _version(module: str) -> Callable[[], str]:
    def get() -> str:
        mod = importlib.import_module(module)
        return str(getattr(mod, "__version__", "present"))

    return get


def _torch_distributed() -> str:
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("torch was built without torch.distributed")
    backends = [b for b, ok in (("gloo", dist.is_gloo_available()), ("nccl", dist.is_nccl_available())) if ok]
    if "gloo" not in backends:
        raise RuntimeError("the gloo backend is missing")
    return ",".join(backends)


def _nccl() -> str:
    import torch

    if not torch.distributed.is_nccl_available():
        return "not built in (CPU-only torch: gpu-acceptance local --cpu only)"
    raw = torch.cuda.nccl.version()
    return ".".join(map(str, raw)) if isinstance(raw, tuple) else str(raw)


def _which(binary: str, *fallbacks: str) -> Callable[[], str]:
    def get() -> str:
        path = shutil.which(binary) or next((p for p in fallbacks if os.access(p, os.X_OK)), None)
        if not path:
            raise FileNotFoundError(f"{binary} not found")
        return path

    return get


def check_installation(args: list[str]) -> int:
    """Print each component with its version; exit 1 when a required one is missing."""
    from acceptance_workload import __version__

    probes = [
        ("python", lambda: sys.version.split()[0]),
        ("gpu-acceptance", lambda: __version__),
        ("pydantic", _version("pydantic")),
        ("torch", _version("torch")),
        ("torch.distributed", _torch_distributed),
        ("nccl", _nccl),
        ("nvidia-ml-py (pynvml)", lambda: (importlib.import_module("pynvml"), "present")[1]),
        ("kubernetes client", _version("kubernetes")),
        ("pyyaml", _version("yaml")),
    ]
    if "--mpi" in args:
        probes += [("mpirun", _which("mpirun")), ("sshd", _which("sshd", "/usr/sbin/sshd")),
                   ("ssh host key", lambda: _host_key())]
    missing = 0
    for name, fn in probes:
        label, value, error = _probe(name, fn)
        if error:
            missing += 1
            print(f"MISSING  {label:<24} {error}")
        else:
            print(f"ok       {label:<24} {value}")
    print("installation complete" if not missing else f"{missing} component(s) missing")
    return 0 if not missing else 1


def _host_key() -> str:
    keys = [p for p in ("/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key") if os.path.exists(p)]
    if not keys:
        raise FileNotFoundError("no sshd host key in /etc/ssh (run ssh-keygen -A)")
    return keys[0]
