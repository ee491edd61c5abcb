"""`python -m acceptance_workload`: join the job, run the enabled checks in the registry's order, deliver the report.

Every rank runs this. Rank 0 assembles the report and delivers it (stdout
table, status.report, termination log, an optional JSON file); every rank
exits with the code rank 0 decided: 0 passed, 1 a check failed, 2 the run
could not complete. A hung or dead rank cannot make the run wait forever: the
control plane's timeouts and the watchdog end it with a report naming the rank
(a failed `rank_*` result under the check that was running, so its node is in
failedNodes). An exception a rank raises inside a check's stage is a failed
`stage_error` result of that check and the next check runs (stages.py). When
rank 0 itself stops, no report can be written (it hosts the store): the other
ranks exit 2 and write a termination message naming rank 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from acceptance_workload import __version__
from acceptance_workload.checks import contention
from acceptance_workload.checks.preflight import hostload, nodefacts, occupancy
from acceptance_workload.checks.preflight.occupancy import Occupancy
from acceptance_workload.checks.registry import enabled
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract import exits
from acceptance_workload.contract.config import CONFIG_ENV, run_started
from acceptance_workload.contract.results import CheckName
from acceptance_workload.report.model import Environment, Skip
from acceptance_workload.report.status import TERMINATION_LOG
from acceptance_workload.runtime import stages
from acceptance_workload.runtime.control import (
    Blame,
    Blamer,
    Culprit,
    RankTimeout,
    culprit_results,
    describe_culprits,
    hard_exit,
    root_unreachable,
)
from acceptance_workload.runtime.launch import DistEnv, LaunchError, Session
from acceptance_workload.runtime.watchdog import Heartbeat, Watchdog
from acceptance_workload.writers.text import full_text

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR = exits.YES, exits.NO, exits.CANNOT  # the rule: exits.py
ROOT_DEATH_WAIT_SECONDS = 3.0  # a broken collective may come before the word that rank 0 died (its guard writes it)
MIN_RENDEZVOUS_SECONDS = 600  # pods of a job can start minutes apart (image pulls)


def now() -> datetime:
    return datetime.now(timezone.utc)


def exit_code(report: Report) -> int:
    if report.error:
        return EXIT_ERROR
    return EXIT_PASSED if report.passed else EXIT_FAILED


class Runner:
    """One rank's run. Only rank 0's report is delivered; the lock keeps the watchdog and main thread apart."""

    def __init__(self, config: WorkloadConfig, env: DistEnv, nccl_log: Path | None):
        self.config = config
        self.env = env
        self.nccl_log = nccl_log
        self.session: Session | None = None
        self.blamer: Blamer | None = None
        self.report = Report(
            mode=config.mode,
            generation=config.test.generation if config.test else None,
            uid=config.test.uid if config.test else None,
            run=config.test.run if config.test else None,
            started_at=now(),
            checks_run=[c.name for c in enabled(config.checks)],
        )
        # The check running now: a culprit's result goes under it.
        self.stage: CheckName = self.report.checks_run[0] if self.report.checks_run else "preflight"
        self._lock = threading.Lock()
        self._code: int | None = None
        self._absent: set[int] = set()  # ranks known to be gone: rank 0 does not wait for them at the end
        self.occupancy: Occupancy | None = None  # this rank's GPU before its CUDA context (gpu_in_use)
        self.versions: Any = None  # local rank 0: the node's driver, CUDA, NCCL and torch versions (preflight)
        self.hostwatch: hostload.Watch | None = None  # local rank 0: the host's load stage by stage
        self._t0 = run_started()  # progress lines say how far into the run they are (where a run's time goes)
        self.termination_log: str = TERMINATION_LOG  # where Kubernetes reads the container's termination message
        self.unreachable = False  # the API server could not be reached before the checks (delivery.probe)
        self.neighbours = occupancy.Neighbours(env.local_rank)  # the others on this GPU during the run (OOM)
        self.watches: dict[str, Any] = {}  # each enabled check's watch of the whole run (contract.Check.watch)

    @property
    def is_root(self) -> bool:
        return self.env.rank == 0

    def progress(self, message: str) -> None:
        if self.is_root:
            tag = "gpu-acceptance cpu-smoke" if self.config.mode == "cpu-smoke" else "gpu-acceptance"
            print(f"[{tag}] {message} (+{time.time() - self._t0:.1f} s)", file=sys.stderr, flush=True)

    # delivery ------------------------------------------------------------------
    def deliver(self) -> int:
        """Finalize and deliver the report once (rank 0); later calls return the same exit code.

        A report that could not be delivered is exit 2, and the termination message leads with why (the
        operator's evidence of last resort: delivery.not_delivered), also while the delivery is still retried."""
        with self._lock:
            if self._code is not None:
                return self._code
            r = self.report
            r.finished_at = now()
            with contextlib.suppress(Exception):  # context for the failures: never a reason the report is lost
                contention.annotate(r)  # a timing failure on a saturated host says so
                nodefacts.annotate(r)  # a failure naming a GPU gives its serial and bus id
            r.finalize()
            code = exit_code(r)
            sys.stdout.write(full_text(r))
            sys.stdout.flush()
            if self.config.report_file:
                Path(self.config.report_file).write_text(json.dumps(r.to_wire(), indent=2) + "\n")
                with contextlib.suppress(OSError):
                    Path(str(self.config.progress_file)).unlink(missing_ok=True)
            from acceptance_workload.report import delivery
            from acceptance_workload.report.status import write_termination_log

            if self.config.test is None:
                write_termination_log(r, self.termination_log)
            else:
                code = delivery.deliver(self.config.test, r, code, termination_log=self.termination_log,
                                        timeout_seconds=self.config.timeout_seconds,
                                        elapsed=time.time() - self._t0, unreachable=self.unreachable,
                                        log=self.progress)
            self._code = code
            return code

    def blame(self, culprits: list[Culprit], message: str) -> None:
        """Rank 0: the run could not complete; the culprits' nodes become failed results of the running check."""
        if self.session is not None:
            self.report.results += culprit_results(self.session.control, self.stage, culprits)
        self._absent.update(c.rank for c in culprits if c.kind in ("died", "stopped"))  # none will ack
        if self.report.error is None:
            self.report.error = message

    def _on_fatal(self, blame: Blame) -> None:
        """Watchdog: a step hung or another rank failed. Deliver (rank 0) and leave."""
        control = self.session.control if self.session is not None else None
        if self.is_root:
            self.blame(blame.culprits, blame.message)
            code = self.deliver()
            if control is not None and self.blamer is not None:
                control.finish(code, via=self.blamer.store, absent=len(self._absent))
            hard_exit(code)
        print(f"gpu-acceptance: {self.env.describe()}: {blame.message}", file=sys.stderr, flush=True)
        if not blame.store_reachable:
            orphaned(self.report, self.session, self.stage, blame)
            hard_exit(EXIT_ERROR)
        code = EXIT_ERROR
        if control is not None and self.blamer is not None:
            # The watchdog's own connection: the main thread may be blocked inside the shared one.
            code = control.finish(EXIT_ERROR, via=self.blamer.store)
        hard_exit(code)

    def _on_final(self, code: int) -> None:
        """Watchdog: rank 0 has already decided while this rank is still blocked."""
        if self.blamer is not None:
            with contextlib.suppress(Exception):
                self.blamer.store.add("done", 1)
        hard_exit(code)

    # the run -------------------------------------------------------------------
    def run(self) -> int:
        from acceptance_workload.runtime import launch

        nccl_cfg = self.config.checks.nccl
        timeout = float(nccl_cfg.collective_timeout_seconds)
        backend = "gloo" if self.config.mode == "cpu-smoke" else "nccl"
        self.progress(f"{self.env.world_size} ranks, backend {backend}, launcher {self.env.launcher}")
        if backend == "nccl":  # before anything of ours is on the GPU: what is in use is someone else's
            self.occupancy = occupancy.read_own(self.env.local_rank)
        try:
            self.session = launch.start(
                self.env, backend, collective_timeout=timeout,
                rendezvous_timeout=min(float(self.config.timeout_seconds), max(MIN_RENDEZVOUS_SECONDS, timeout)))
        except Exception as e:
            message = f"could not join the job: {e}" + self._gpu_facts()
            if not self.is_root:
                print(f"gpu-acceptance: {message}", file=sys.stderr, flush=True)
                return EXIT_ERROR
            self.report.error = message
            return self.deliver()
        session = self.session
        control = session.control
        if self.env.local_rank == 0:
            self.hostwatch = hostload.Watch()
        Heartbeat.connect(control).start()  # beats until the process ends
        self.blamer = Blamer.connect(control)
        watchdog = Watchdog(control, self.blamer, on_fatal=self._on_fatal, on_final=self._on_final,
                            heartbeat_timeout=float(self.config.checks.heartbeat_timeout_seconds)).start()
        code: int | None = None
        try:
            self.checks(session, watchdog)
            nodefacts.gather_loads(session, self.hostwatch, self.report)
            self.progress("checks done")
        except BaseException as e:  # dcp's CheckpointException is a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            watchdog.stop()  # this thread explains the failure; the watchdog must not deliver meanwhile
            code = self._failed(e, session)
        watchdog.stop()
        # Rank 0's code is the run's; another rank keeps its own only if rank 0 never announces one.
        fallback = self.deliver() if self.is_root else (EXIT_ERROR if code is None else code)
        code = control.finish(fallback, absent=len(self._absent))
        launch.stop(session)
        return code

    def _failed(self, error: BaseException, session: Session) -> int:
        """This rank raised outside a check's stage or broke the process group: tell the others; rank 0 records
        who is to blame (an error inside a stage is a failed result of its check instead: stages.py).

        A timed-out exchange blames the ranks that did not deliver (or whichever
        stopped beating); any other error blames the ranks that stopped or failed
        (a dead peer breaks the collective), else this rank itself (e.g. a CUDA OOM).
        """
        if isinstance(error, stages.StageBroken):  # rank 0: a rank raised and the others could not go on
            self.blame(error.culprits, str(error))
            return EXIT_ERROR
        waited = isinstance(error, RankTimeout)
        facts = ""
        if waited:
            message = str(error)
            self._absent.update(error.ranks)
        else:
            facts = self._gpu_facts()  # an allocation or NCCL error on a busy GPU says whose memory it is
            message = f"{self.env.describe()} failed: {type(error).__name__}: {error}{facts}"
            print(traceback.format_exc(), file=sys.stderr, flush=True)
        # Others name this rank themselves; they need only what went wrong.
        session.control.report_error(message if waited else f"{type(error).__name__}: {error}{facts}",
                                     own=not waited)
        if not self.is_root:
            print(f"gpu-acceptance: {message}", file=sys.stderr, flush=True)
            lost = self.blamer.unreachable() if waited and 0 in error.ranks and self.blamer else None
            if lost is not None:  # rank 0 is gone: nobody will announce an exit code to wait for
                orphaned(self.report, self.session, self.stage, root_unreachable(session.control, message, lost))
                hard_exit(EXIT_ERROR)
            root_death = self.blamer.root_death(ROOT_DEATH_WAIT_SECONDS) if self.blamer is not None else []
            if root_death:  # its guard said so (torchrun's agent keeps the store up): no report will come
                blame = Blame(describe_culprits(session.control, root_death), root_death, store_reachable=False)
                orphaned(self.report, self.session, self.stage, blame)
                hard_exit(EXIT_ERROR)
            return EXIT_ERROR
        culprits: list[Culprit] = []
        if self.blamer is not None:
            with contextlib.suppress(Exception):
                culprits = self.blamer.blame(suspects=error.ranks if waited else ())
        if not culprits and not waited:
            culprits = [Culprit(self.env.rank, "failed", f"{type(error).__name__}: {error}{facts}")]
        elif culprits and not waited:  # the error here is a consequence: say so after the culprits
            message = (f"{describe_culprits(session.control, culprits)}; {self.env.describe()} then saw "
                       f"{type(error).__name__}: {error}")
        elif culprits and culprits[0].kind != "behind":
            message = f"{describe_culprits(session.control, culprits)}; {message}"
        self.blame(culprits, message)
        return EXIT_ERROR

    def enter(self, stage: CheckName, session: Session) -> None:
        """Every rank starts a check: culprits go under it, and a rank silent before its first step says so."""
        self.stage = stage
        session.control.mark(stage)
        if self.hostwatch is not None:
            self.hostwatch.mark(stage)
        self.save_progress()

    def save_progress(self) -> None:
        """Rank 0, with a report file: what has completed and the check now running, for its launcher to write the
        report if rank 0 itself dies (local.write_unfinished); whole or not at all (written aside, then renamed)."""
        path = self.config.progress_file
        if not self.is_root or path is None:
            return
        with contextlib.suppress(OSError), self._lock:
            scratch = Path(path + ".part")
            scratch.write_text(json.dumps({"stage": self.stage, "report": self.report.to_wire()}))
            scratch.replace(path)

    def _gpu_facts(self) -> str:
        """This rank's GPU before the run and now, for the message of an error it raised ('' on CPU)."""
        with contextlib.suppress(Exception):
            return occupancy.failure_facts(self.occupancy, self.env.local_rank)
        return ""

    def checks(self, session: Session, watchdog: Watchdog) -> None:
        """Every enabled check in the registry's order, each under stages.guarded; a failed gate (preflight) skips
        the rest, and so does an API server the report cannot reach (delivery.reach_stage)."""
        from acceptance_workload.checks.preflight import preflight
        from acceptance_workload.report import delivery

        cfg = self.config
        self.versions = preflight.collect_versions() if session.env.local_rank == 0 else None
        facts = session.control.gather("environment", None if self.versions is None else self.versions.__dict__)
        if self.is_root:
            self.report.environment = environment(session, [f for f in facts or [] if f])
        if cfg.test is not None and not delivery.reach_stage(session, cfg.test, self.report, self.progress):
            self.unreachable = True  # no check runs; the delivery is tried briefly
            return
        self.start_watches(enabled(cfg.checks))
        for check in enabled(cfg.checks):
            if not check.gate:
                if not self.neighbours.noted:  # after the gates: this rank's CUDA context is on its GPU
                    self.neighbours.note_own_pids(self.occupancy)
                if self.neighbours.taken is not None:  # every check runs on every GPU: none on the one taken
                    if self.is_root:
                        self.report.skipped.append(Skip(check=check.name, name=check.name,
                                                        reason=self.neighbours.taken))
                    continue
            out = self.guarded(session, check.name, lambda c=check: c.stage(self, session, watchdog))
            if not check.gate:
                continue
            if out.errors and out.value is not False and self.is_root:
                self.skip_after(check.name, f"{check.name} failed ({stages.message(out.errors[0])}): "
                                            "later checks not run")
            if out.errors or not out.value:
                return

    def start_watches(self, checks: Any) -> None:
        """The watch of the whole run of each of `checks` (the enabled ones) that has one (checks.contract.Check.watch),
        started before the first check; one that raises is kept as its error, for the check's own stage to report (it
        never stops the run)."""
        for check in checks:
            if check.watch is None:
                continue
            try:
                self.watches[check.name] = check.watch(self, self.session)
            except Exception as e:
                print(f"gpu-acceptance: {check.name}: the watch did not start: {type(e).__name__}: {e}",
                      file=sys.stderr, flush=True)
                self.watches[check.name] = e

    def guarded(self, session: Session, check: CheckName, stage: Callable[[], Any]) -> stages.Outcome:
        """One check's stage: an exception a rank raises in it is a failed result of the check (rank 0 keeps it).
        Out of memory because another process holds it (every rank sees the same errors): the later checks are
        skipped with that reason, so the holder is named once."""
        out = stages.guarded(session, check, stage, self.blamer,
                             lambda e: self.neighbours.explain(e, self.occupancy, session))
        self.neighbours.take(out.errors, check)
        if out.errors and self.is_root:
            self.report.results += stages.results(out.errors)
            self.report.stage_errors += out.errors
            self.progress(f"{check}: {len(out.errors)} rank(s) raised, the check fails: "
                          f"{stages.message(out.errors[0])}")
        return out

    def run_stage(self, session: Session, check: CheckName, line: str, measure: Callable[[], Any]) -> Any:
        """One check's stage on every rank: entered, announced, measured; rank 0 keeps its results and skips and
        gets its detail back (None on the other ranks). `measure` gives (results, skipped, detail) on rank 0."""
        self.enter(check, session)
        self.progress(line)
        out = measure()
        if not self.is_root:
            return None
        assert out is not None
        results, skipped, detail = out
        self.report.results += results
        self.report.skipped += skipped
        return detail

    def skip_after(self, check: CheckName, reason: str) -> None:
        """Rank 0: every enabled check after `check` is skipped, saying why (a failed gate)."""
        from acceptance_workload.checks import registry

        for later in registry.after(check):
            if later.enabled_in(self.config.checks):
                self.report.skipped.append(Skip(check=later.name, name=later.name, reason=reason))


def orphaned(report: Report, session: Session | None, stage: CheckName, blame: Blame) -> None:
    """Rank 0 (and the store it hosts) is gone: only a termination message can say so, naming its node."""
    from acceptance_workload.report.render import summary
    from acceptance_workload.report.status import write_termination_log

    orphan = report.model_copy(update={"error": blame.message, "finished_at": now()})
    if session is not None:
        orphan.results = culprit_results(session.control, stage, blame.culprits)
    orphan.finalize()
    print(f"gpu-acceptance: no report can be written without rank 0:\n{summary(orphan)}", file=sys.stderr,
          flush=True)
    write_termination_log(orphan)


def environment(session: Session, facts: list[dict]) -> Environment:
    first = facts[0] if facts else {}
    return Environment(
        gpu_model=first.get("gpu_model"),
        gpus_per_node=session.env.local_world_size,
        nodes=len(session.nodes()),
        world_size=session.world_size,
        driver_version=first.get("driver"),
        cuda_version=first.get("cuda"),
        nccl_version=first.get("nccl"),
        torch_version=first.get("torch"),
        workload_version=__version__,
        hostnames=session.nodes(),
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--check-install":
        from acceptance_workload.installation import check_installation

        return check_installation(args[1:])
    if args:
        print("usage: python -m acceptance_workload [--check-install [--mpi] [--rdma] [--nccl-tests]]\n"
              f"  runs the checks described by {CONFIG_ENV} (set by the operator or `gpu-acceptance local`)",
              file=sys.stderr)
        return EXIT_ERROR
    try:
        config = WorkloadConfig.from_env()
    except Exception as e:
        print(f"gpu-acceptance: cannot read the run's configuration from {CONFIG_ENV}: {e}", file=sys.stderr)
        return EXIT_ERROR
    try:
        env = DistEnv.from_environ()
    except LaunchError as e:
        print(f"gpu-acceptance: cannot tell which rank this is: {e}", file=sys.stderr)
        return EXIT_ERROR
    # Before torch (and NCCL) start: GPU indices as nvidia-smi numbers them, NCCL's log to a file we parse.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    nccl_log = None
    if config.mode == "gpu":
        from acceptance_workload.checks.nccl.transport import configure_logging

        nccl_log = configure_logging(os.environ, env.rank, Path(tempfile.gettempdir()) / "gpu-acceptance")
    try:
        return Runner(config, env, nccl_log).run()
    except BaseException as e:  # a bug outside every check's stage: "could not complete", not Python's 1 ("failed")
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        traceback.print_exc()
        print(f"gpu-acceptance: {env.describe()}: the run ended with the unexpected error above", file=sys.stderr,
              flush=True)
        return EXIT_ERROR
