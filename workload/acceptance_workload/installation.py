"""`python -m acceptance_workload --check-install`: does this environment have what the workload needs?

Run at the end of hack/install-workload.sh (so an image build fails on a
missing piece instead of the first acceptance run) and by the
workload-install-check make target. Options add groups: --mpi, --rdma,
--nccl-tests, --efa (the aws-ofi-nccl plugin and libfabric's efa provider).
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from acceptance_workload.contract import exits


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


def _numpy() -> str:
    """numpy, and torch able to use it: without it torch warns "Failed to initialize NumPy" at import."""
    import numpy
    import torch

    torch.from_numpy(numpy.zeros(1))  # raises when torch's numpy bridge failed to initialise
    return numpy.__version__


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


# rdma-core's user-space libraries, as NCCL's IB/RoCE transport dlopen()s them: without them NCCL silently falls
# back to sockets, and an InfiniBand cluster would be measured (and judged) over TCP.
RDMA_LIBRARIES = {
    "libibverbs.so.1": "libibverbs1",  # verbs: NCCL's NET/IB plugin
    "libmlx5.so.1": "ibverbs-providers",  # the ConnectX (mlx5) provider the verbs library loads
    "librdmacm.so.1": "librdmacm1",  # connection manager: RoCE GID resolution, UCX
}


def _shared_library(soname: str) -> Callable[[], str]:
    """The library loads as the dynamic linker finds it (ld.so.cache, LD_LIBRARY_PATH): what NCCL will do."""
    def get() -> str:
        import ctypes

        try:
            ctypes.CDLL(soname)
        except OSError as e:
            package = RDMA_LIBRARIES.get(soname, "rdma-core")
            raise FileNotFoundError(f"{soname} does not load ({e}); install {package} "
                                    "(Debian/Ubuntu: libibverbs1 ibverbs-providers librdmacm1)") from None
        return "loads"

    return get


# AWS EFA (network.fabric efa): NCCL reaches EFA only through a network plugin, aws-ofi-nccl, over libfabric's efa
# provider. Without them NCCL falls back to sockets (the run then fails its transport check); this says so at build.
NET_PLUGIN_ENV = "NCCL_NET_PLUGIN"
PLUGIN_DIR_ENV = "GPU_ACCEPTANCE_AWS_OFI_NCCL_DIR"  # the image's plugin folder (Dockerfile.workload)
# The names aws-ofi-nccl installs (libnccl-net.so, and libnccl-net-ofi.so for NCCL_NET_PLUGIN=ofi).
NET_PLUGIN_FILES = ("libnccl-net.so", "libnccl-net-ofi.so")
# NCCL's plugin entry points, newest first; the struct's first member is the network's name.
NET_PLUGIN_SYMBOLS = tuple(f"ncclNetPlugin_v{v}" for v in range(12, 1, -1))
LIBFABRIC = "libfabric.so.1"
FI_INFO_DIRS = ("/opt/amazon/efa/bin",)  # the EFA installer's libfabric
LIBFABRIC_NETWORKS = ("libfabric", "aws libfabric")


def net_plugin_candidates(environ: dict[str, str]) -> list[str]:
    """The files NCCL would load as its network plugin: NCCL_NET_PLUGIN's (a name X: libnccl-net-X.so; a file name
    or path as given), else aws-ofi-nccl's two names."""
    given = environ.get(NET_PLUGIN_ENV, "").strip()
    if not given:
        return list(NET_PLUGIN_FILES)
    return [given] if given.endswith(".so") or "/" in given else [f"libnccl-net-{given}.so"]


def _efa_plugin() -> str:
    """The aws-ofi-nccl plugin loads as NCCL loads it (dlopen through LD_LIBRARY_PATH and ld.so.cache) and is a
    libfabric network."""
    import ctypes

    tried = []
    for name in net_plugin_candidates(dict(os.environ)):
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            tried.append(f"{name}: {str(e).split(':')[-1].strip() or e}")
            continue
        symbol = next((s for s in NET_PLUGIN_SYMBOLS if hasattr(lib, s)), None)
        if symbol is None:
            raise RuntimeError(f"{name} loads but is no NCCL network plugin (no ncclNetPlugin_v* symbol)")
        network = (ctypes.c_char_p.in_dll(lib, symbol).value or b"").decode(errors="replace")
        if network.lower() not in LIBFABRIC_NETWORKS:
            raise RuntimeError(f"{name} is the NCCL network plugin {network!r}, not aws-ofi-nccl's libfabric one")
        return f"{name} ({symbol}, network {network!r})"
    skipped = Path(os.environ.get(PLUGIN_DIR_ENV, "/nonexistent")) / "SKIPPED"
    why = f"this image was {skipped.read_text().strip()}; " if skipped.is_file() else ""
    raise FileNotFoundError(f"no aws-ofi-nccl plugin on the library path ({'; '.join(tried)}): {why}build the "
                            "image with AWS_OFI_NCCL_SRC (hack/build-images.sh) or add the plugin's lib folder to "
                            "LD_LIBRARY_PATH")


def _libfabric() -> str:
    import ctypes

    try:
        ctypes.CDLL(LIBFABRIC)
    except OSError as e:
        raise FileNotFoundError(f"{LIBFABRIC} does not load ({e}); install libfabric with the efa provider "
                                "(the EFA installer's /opt/amazon/efa, or Debian's libfabric1)") from None
    return "loads"


def _efa_provider() -> str:
    """libfabric lists the efa provider (`fi_info -l`): it is built in, whether or not this machine has EFA."""
    import subprocess

    fi_info = _which("fi_info", *(f"{d}/fi_info" for d in FI_INFO_DIRS))()
    done = subprocess.run([fi_info, "-l"], capture_output=True, text=True, timeout=60, check=False)
    providers = {line.strip().rstrip(":") for line in done.stdout.splitlines() if line.strip().endswith(":")}
    if "efa" not in providers:
        listed = ", ".join(sorted(providers)) or "none"
        raise RuntimeError(f"libfabric has no efa provider ({fi_info} -l lists: {listed}); install the EFA "
                           "installer's libfabric")
    return f"{fi_info}: efa"


def _nccl_tests(collective: str) -> Callable[[], str]:
    """nccl-tests' binary is where the workload looks (nccltests.find_binary) and loads: `-h` prints its usage.

    Loading needs libnccl.so.2 (the NCCL torch uses, as the cross-check runs it) and the CUDA runtime it was
    linked with; `-h` parses the arguments before touching a GPU, so this runs on a machine without one.
    """
    def get() -> str:
        import subprocess

        from acceptance_workload.checks.nccl import nccltests

        binary = nccltests.find_binary(collective)  # type: ignore[arg-type]
        done = subprocess.run([str(binary), "-h"], env=nccltests.child_env(os.environ), capture_output=True,
                              text=True, timeout=60, check=False)
        if done.returncode != 0 or "USAGE" not in done.stdout:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"{binary} -h failed (exit code {done.returncode}): {tail[0][:300]}")
        return str(binary)

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
        ("numpy", _numpy),
        ("nccl", _nccl),
        ("nvidia-ml-py (pynvml)", lambda: (importlib.import_module("pynvml"), "present")[1]),
        ("kubernetes client", _version("kubernetes")),
        ("pyyaml", _version("yaml")),
    ]
    if "--mpi" in args:
        probes += [("mpirun", _which("mpirun")), ("sshd", _which("sshd", "/usr/sbin/sshd")),
                   ("ssh host key", lambda: _host_key())]
    if "--rdma" in args:
        probes += [(soname, _shared_library(soname)) for soname in RDMA_LIBRARIES]
    if "--efa" in args:  # network.fabric efa: aws-ofi-nccl over libfabric's efa provider
        probes += [("aws-ofi-nccl plugin", _efa_plugin), ("libfabric", _libfabric),
                   ("libfabric efa provider", _efa_provider)]
    if "--nccl-tests" in args:  # the cross-check's binaries (checks.nccl.crossCheck)
        from acceptance_workload.contract.terms import COLLECTIVES

        probes += [(f"nccl-tests {c}_perf", _nccl_tests(c)) for c in COLLECTIVES]
    missing = 0
    for name, fn in probes:
        label, value, error = _probe(name, fn)
        if error:
            missing += 1
            print(f"MISSING  {label:<24} {error}")
        else:
            print(f"ok       {label:<24} {value}")
    print("installation complete" if not missing else f"{missing} component(s) missing")
    return exits.YES if not missing else exits.NO


def _host_key() -> str:
    keys = [p for p in ("/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_rsa_key") if os.path.exists(p)]
    if not keys:
        raise FileNotFoundError("no sshd host key in /etc/ssh (run ssh-keygen -A)")
    return keys[0]
