"""Rank programs for the multi-process tests: `python -m tests.workload.workers SCENARIO OUTDIR`.

Each process is one rank (RANK / WORLD_SIZE / MASTER_ADDR set by the test, as
torchrun would) and uses the workload's real modules over real gloo process
groups. Rank r writes OUTDIR/rank{r}.json with what the test asserts on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import acceptance_workload.checks.registry  # noqa: F401  # first, as every entry point: it declares the checks' names
from acceptance_workload.checks.nccl.nccl import OPS, run_sweeps
from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.runtime import launch
from acceptance_workload.runtime.control import Blame, Blamer, hard_exit
from acceptance_workload.runtime.watchdog import Heartbeat, Watchdog


def small_check(**overrides: Any) -> NcclCheck:
    base = {"minBytes": 8, "maxBytes": 4096, "stepFactor": 8, "warmupIters": 1, "iters": 2,
            "collectiveTimeoutSeconds": 30, "perNode": True}
    base.update(overrides)
    return NcclCheck.model_validate(base)


def write(outdir: Path, rank: int, data: Any) -> None:
    tmp = outdir / f"rank{rank}.json.tmp"
    tmp.write_text(json.dumps(data))
    tmp.rename(outdir / f"rank{rank}.json")


def session(timeout: float) -> launch.Session:
    backend = os.environ.get("WORKER_BACKEND", "gloo")  # nccl in the GPU tests
    s = launch.start(launch.DistEnv.from_environ(), backend, rendezvous_timeout=60, collective_timeout=timeout)
    Heartbeat.connect(s.control).start()  # as the workload does: alive while the process runs
    return s


def watchdog_for(s: launch.Session, outdir: Path) -> Watchdog:
    def fatal(blame: Blame) -> None:
        write(outdir, s.rank, {"fatal": blame.message, "culprits": [[c.rank, c.kind] for c in blame.culprits]})
        hard_exit(3)

    return Watchdog(s.control, Blamer.connect(s.control), on_fatal=fatal).start()


def sweep(outdir: Path, ops: dict, check: NcclCheck) -> None:
    s = session(check.collective_timeout_seconds)
    wd = watchdog_for(s, outdir)
    out = run_sweeps(s, check, wd, ops=ops)
    wd.stop()
    result: dict[str, Any] = {"rank": s.rank, "nodes": s.nodes()}
    if out is not None:
        result.update(sweeps=[x.to_wire() for x in out.sweeps], results=[r.to_wire() for r in out.results],
                      skipped=[k.to_wire() for k in out.skipped])
    s.control.finish(0)
    launch.stop(s)
    write(outdir, s.rank, result)


def corrupting(collective: str) -> dict:
    """The real operation, then one element of rank 1's result is off: the check must count it."""
    base = OPS[collective]

    def op(send, recv, group):
        base(send, recv, group)
        if group.rank == 1:
            recv.view(-1)[0] += 1000

    return {**OPS, collective: op}


def unsupported(collective: str) -> dict:
    def op(send, recv, group):
        raise RuntimeError(f"ProcessGroupGloo does not support {collective}")

    return {**OPS, collective: op}


def hang(outdir: Path) -> None:
    """Rank 1 joins the job, then never enters the collective; rank 0 sweeps under a 3 s watchdog."""
    s = session(3)
    if s.rank == 1:
        write(outdir, 1, {"joined": True})
        time.sleep(120)
        return
    wd = watchdog_for(s, outdir)
    t0 = time.monotonic()
    run_sweeps(s, small_check(collectives=["all_reduce"], perNode=False), wd)
    write(outdir, s.rank, {"finished": time.monotonic() - t0})


def join_then_sleep(outdir: Path) -> None:
    """A rank that joins (rendezvous, rank exchange, process group) and then hangs."""
    s = session(float(os.environ.get("HANG_TIMEOUT", "10")))
    write(outdir, s.rank, {"joined": True})
    time.sleep(120)


def localize_after_job_failure(outdir: Path) -> None:
    """The localisation stage as the runner starts it after a job-wide failure that no absolute floor judged.

    A CPU run cannot fail its job-wide sweep (it has no absolute thresholds), so this rank program passes
    failed=True as the runner would after one; the rest is the real stage over real gloo groups.
    """
    from acceptance_workload.checks.nccl import localize

    check = NcclCheck.model_validate({"maxBytes": "1Mi", "warmupIters": 1, "collectiveTimeoutSeconds": 60,
                                      "thresholds": {"interNodeRatioToMedian": 0.5}})
    s = session(check.collective_timeout_seconds)
    wd = watchdog_for(s, outdir)

    def progress(message: str) -> None:
        print(f"[worker] {message}", file=sys.stderr, flush=True)
    detail = localize.run_stage(s, check, wd, failed=True, floor=None, progress=progress)
    wd.stop()
    if detail is not None:
        write(outdir, s.rank, {"detail": detail.to_wire(),
                               "results": [r.to_wire() for r in localize.results(detail, s.nodes())]})
    s.control.finish(0)
    launch.stop(s)


def crash_in_ddp() -> int:
    """The real workload, except that this rank's DDP check raises, as a GPU fault would."""
    from acceptance_workload import run
    from acceptance_workload.checks.ddp import ddp

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    ddp.run_ddp = boom
    return run.main([])


def main() -> None:
    scenario, outdir = sys.argv[1], Path(sys.argv[2])
    if scenario == "sweep":
        sweep(outdir, OPS, small_check())
    elif scenario == "corrupt":
        sweep(outdir, corrupting("all_gather"), small_check(collectives=["all_reduce", "all_gather"]))
    elif scenario == "unsupported":
        sweep(outdir, unsupported("alltoall"),
              small_check(collectives=["all_reduce", "alltoall"], perNode=False,
                          thresholds={"alltoallBusbwGBps": 0.000001}))
    elif scenario == "hang":
        hang(outdir)
    elif scenario == "join-then-sleep":
        join_then_sleep(outdir)
    elif scenario == "localize-after-job-failure":
        localize_after_job_failure(outdir)
    elif scenario == "crash-in-ddp":
        sys.exit(crash_in_ddp())
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()
