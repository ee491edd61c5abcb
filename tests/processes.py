"""Process helpers the test servers and the benchmarks share: free ports, liveness, process groups, log tails.

No pytest import here: tests/apiserver.py's command line and bench/ use it too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now (all held open together so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """preexec_fn: SIGKILL the child when the process that started it dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def alive(pid: int) -> bool:
    """Whether pid is a live process (not a zombie): /proc where there is one, else signal 0."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, IndexError, ProcessLookupError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not Path("/proc").is_dir()


def cmdline(pid: int) -> str:
    """The command line of pid, arguments joined by spaces ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_group(pid: int, proc: subprocess.Popen | None = None, grace: float = 10.0) -> None:
    """SIGTERM the process group led by pid; SIGKILL it if the leader outlives `grace` seconds."""

    def gone() -> bool:
        return proc.poll() is not None if proc is not None else not alive(pid)

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while not gone() and time.monotonic() < deadline:
            time.sleep(0.05)
        if gone():
            break
    # The leader is gone; make sure nothing else of its group survives.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
