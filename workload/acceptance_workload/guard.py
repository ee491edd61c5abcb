"""`python -m acceptance_workload.guard`: a rank's parent in a pod, which tells rank 0 how the rank ended.

torchrun's agent and mpirun see a rank die, but tell nobody: they stop the
other ranks (rank 0 with them, before it could write a report), and the
heartbeat would name the rank only after checks.heartbeatTimeoutSeconds, as
"stopped responding", without the signal. So in pods the launcher starts this
instead of the rank. It starts `python -m acceptance_workload` with the same
environment and passes signals on. When the rank ends by a signal or an exit
code that is not the workload's own (0, 1, 2), it writes that end where rank
0's watchdog looks (deaths.py): the node's deaths directory (rank 0 on this
node reads it at once) and the rendezvous store (rank 0 on another node reads
it there), then waits, bounded, until rank 0 has announced the run's outcome,
so that its launcher does not stop the others before rank 0 has named it. It
then ends as the rank ended (the same signal), as its launcher would have seen.

`gpu-acceptance local` needs no guard: its launcher is the ranks' parent and
writes the deaths directory itself.

`python -m acceptance_workload.guard --launcher torchrun ...` is the pod's
first process, above the launcher: torchrun's agent exits 1 for any failed
rank, so a report that could not be delivered (2) and a failed check (1)
would look the same to Kubernetes and the operator. Each guard writes how its
rank ended into a directory this process names (EXIT_DIR_ENV), and the
container ends with the workload's own code (exits.py): 0 passed, 1 failed, 2
could not answer (also a rank that died, or a launcher that failed before any
rank ended). Signals reach the launcher as they reached it before (this
process is PID 1 in the container: it passes them on).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from acceptance_workload.contract import exits
from acceptance_workload.runtime import deaths

MODULE = "acceptance_workload.guard"  # what the pods' launchers start (job_builders.py)
LAUNCHER_FLAG = "--launcher"  # `-m acceptance_workload.guard --launcher torchrun ...`: the container's command
EXIT_DIR_ENV = "GPU_ACCEPTANCE_EXIT_DIR"  # where each guard writes its rank's exit code for the container's end
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
STORE_CONNECT_SECONDS = 15


def node_deaths_dir(environ: dict[str, str]) -> str:
    """The deaths directory every rank of this node agrees on: one per launcher process (torchrun's agent,
    mpirun's daemon), which is every guard's parent; DEATHS_ENV when the environment names one."""
    given = environ.get(deaths.DEATHS_ENV)
    if given:
        return given
    path = Path(tempfile.gettempdir()) / f"gpu-acceptance-deaths-{os.getppid()}"
    path.mkdir(exist_ok=True)
    return str(path)


def tell_store(rank: int, text: str, master: tuple[str, int], wait_seconds: float) -> None:
    """Write the rank's end into the rendezvous store, then wait until rank 0 announces the outcome ('final').

    torch is imported only now (a second or more): a healthy run never pays it here.
    """
    import torch.distributed as dist

    client = dist.TCPStore(master[0], master[1], None, False, timedelta(seconds=STORE_CONNECT_SECONDS),
                           wait_for_workers=False)
    store = dist.PrefixStore("gpu-acceptance", client)
    deaths.tell_store(store, rank, text)
    if rank != 0:  # rank 0 dead: nobody will announce an outcome
        store.wait(["final"], timedelta(seconds=wait_seconds))


def end_as(code: int) -> int:
    """Leave as the rank left: killed by the same signal (its launcher reports it so), else its exit code."""
    if code < 0:
        sys.stdout.flush()
        sys.stderr.flush()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's action cannot be set, nor need be
            signal.signal(-code, signal.SIG_DFL)
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), -code)
        return 128 - code
    return code


def record_exit(environ: dict[str, str], code: int, pid: int) -> None:
    """This rank's exit code (a Popen returncode: negative for a signal) where the container's first process
    reads it (launch_main); nothing when no such process asked."""
    directory = environ.get(EXIT_DIR_ENV)
    if directory:
        with contextlib.suppress(OSError):
            deaths.record(directory, int(environ.get("RANK", "") or pid), str(code))


def container_code(launcher: int, ranks: list[int], stopped: bool) -> int:
    """The container's exit code from the launcher's and this pod's ranks' (exits.py's rule).

    Every rank exits with the code rank 0 decided, so the ranks' own codes are the answer (the highest: 2, could
    not answer, over 1). torchrun stops a pod's other ranks with SIGTERM as soon as one exits non-zero, so a rank
    ended by SIGTERM beside one that answered was stopped by the launcher after the answer: it changes nothing.
    A rank that ended otherwise (another signal) or none that answered (the launcher failed first): the run
    could not complete, 2. Stopped from outside (the kubelet's SIGTERM to the guard): the launcher's own end.
    """
    if stopped:
        return launcher if launcher >= 0 else 128 - launcher
    if launcher == exits.YES:
        return exits.YES
    answered = [c for c in ranks if c in (exits.YES, exits.NO, exits.CANNOT)]
    others = [c for c in ranks if c not in answered and c != -signal.SIGTERM]
    if answered and not others and max(answered) > exits.YES:
        return max(answered)
    return exits.CANNOT


def launch_main(argv: list[str]) -> int:
    """Run the launcher (`torchrun ...`) and end with the workload's own exit code (container_code)."""
    directory = tempfile.mkdtemp(prefix="gpu-acceptance-exits-")
    env = {**os.environ, EXIT_DIR_ENV: directory}
    stopped: list[int] = []
    children: list[subprocess.Popen] = []

    def forward(sig: int, _frame: object) -> None:
        stopped.append(sig)
        for child in children:
            with contextlib.suppress(OSError):
                child.send_signal(sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        children.append(subprocess.Popen(argv, env=env))
    except OSError as e:
        print(f"gpu-acceptance: cannot start the launcher {argv[0]!r}: {e}", file=sys.stderr, flush=True)
        return exits.CANNOT
    if stopped:
        forward(stopped[0], None)
    launcher = children[0].wait()
    ranks = [int(code) for code in deaths.read(directory).values() if code.strip().lstrip("-").isdigit()]
    code = container_code(launcher, ranks, bool(stopped))
    if code != launcher:
        print(f"gpu-acceptance: {argv[0]} ended with code {launcher}, this pod's ranks with {sorted(set(ranks))}: "
              f"the container ends with the workload's code {code} (0 passed, 1 failed, 2 could not answer)",
              file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == [LAUNCHER_FLAG]:
        if len(args) < 2:
            print(f"usage: python -m {MODULE} {LAUNCHER_FLAG} LAUNCHER [ARGS...]", file=sys.stderr)
            return exits.CANNOT
        return launch_main(args[1:])
    return guard_main(args)


def guard_main(args: list[str]) -> int:
    """Run this rank under its guard (the module's docstring)."""
    from acceptance_workload.runtime.control import FINAL_WAIT_SECONDS
    from acceptance_workload.runtime.launch import DistEnv, LaunchError

    env = dict(os.environ)
    env[deaths.DEATHS_ENV] = node_deaths_dir(env)
    oom = deaths.OomWatch()
    stopped: list[int] = []  # signals the guard got: its launcher (or the kubelet) is stopping the job
    children: list[subprocess.Popen] = []

    def forward(sig: int, _frame: object) -> None:
        stopped.append(sig)
        for child in children:
            with contextlib.suppress(OSError):
                child.send_signal(sig)

    for sig in FORWARDED:  # before the rank starts: a stop right away must reach it too
        signal.signal(sig, forward)
    child = subprocess.Popen([sys.executable, "-m", "acceptance_workload", *args], env=env)
    children.append(child)
    if stopped:
        forward(stopped[0], None)
    code = child.wait()
    record_exit(env, code, child.pid)
    if code in (exits.YES, exits.NO, exits.CANNOT) or stopped:  # its own exit, or stopped with the job: no death
        return end_as(code)
    text = deaths.describe_death(code, child.pid, oom)
    try:
        me = DistEnv.from_environ(env)
    except LaunchError:
        return end_as(code)
    rank = me.rank
    print(f"gpu-acceptance: rank {rank} {text}", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):
        deaths.record(env[deaths.DEATHS_ENV], rank, text)
    try:
        tell_store(rank, text, (me.master_addr, me.master_port), FINAL_WAIT_SECONDS)
    except Exception as e:  # the store is gone (rank 0 ended) or never came up: nobody left to tell
        print(f"gpu-acceptance: rank {rank}'s end could not be written to the rendezvous store: "
              f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return end_as(code)


if __name__ == "__main__":
    sys.exit(main())
