"""An exception in a check's stage is a failed result of that check, and the run goes on where the ranks can.

Every rank runs each check's stage under `guarded`. An exception it raises
there (an OSError, a torch error, a bug in a check) is caught, posted to the
control plane under the stage's name, and the rank goes to the stage's end.
There every rank says how its stage ended (fixed keys in the store, so a rank
that left the stage's exchanges early is not out of step with the others), and
rank 0 turns each error into a failed `stage_error` result of the check naming
the rank, its node and GPU, the step it was in, the error's type and first
line; the traceback is in the report's `stageErrors` (the evidence). The next
check then runs: the checks after preflight do not depend on each other.

A rank waiting for the failed one is released: the failed rank aborts its
process groups (a gloo collective waiting for it ends with an error), and each
other rank's watchdog fills the control-plane keys it waits for and, with NCCL,
aborts its own. A new process group then replaces the aborted one. A rank that
still has not reached the stage's end a collective timeout later is hung: the
ranks can no longer go on together and the run ends as a failed collective
ends it (the culprits as `rank_error`, report.error). Errors of the
collective machinery itself (gloo, NCCL, a timed-out exchange: RankTimeout)
are not caught here either: a broken process group ends the run as before, and
the Blamer names dead and hung ranks first.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from acceptance_workload.contract import rules
from acceptance_workload.contract.results import CheckName, CheckResult
from acceptance_workload.report.model import StageError
from acceptance_workload.runtime.control import (
    Blamer,
    Culprit,
    RankTimeout,
    StageAborted,
    describe_culprits,
)

if TYPE_CHECKING:
    from pathlib import Path

    from acceptance_workload.contract.config import RunConfig
    from acceptance_workload.report.model import ReportBase
    from acceptance_workload.runtime.launch import Session

RESULT = rules.STAGE_ERROR  # the failed result of a check whose stage raised (a liveness row of every check)
MAX_TRACEBACK = 4000  # characters of a traceback kept (its end: where it was raised)
# Text of an error from the collective machinery (gloo's transport, NCCL): the process group is broken.
COLLECTIVE_ERRORS = ("third_party/gloo", "Connection closed by peer", "Connection reset by peer", "NCCL",
                     "ProcessGroup")
POLL_SECONDS = 0.1


class StageRunner(Protocol):
    """What a check's stage needs of the run (run.Runner has it): its config, its report, its logging, how a check
    is entered and measured, and what the run read before the checks (the node's versions, this rank's GPU before
    the run, NCCL's log file). A protocol, not run.Runner itself, so the checks do not import the run."""

    config: RunConfig
    report: ReportBase
    versions: Any
    occupancy: Any  # checks.preflight.occupancy.Occupancy or None
    nccl_log: Path | None
    stage: CheckName  # the check running now (an event a watch sees is stamped with it)
    watches: dict[str, Any]  # each watching check's watch (checks.contract.Check.watch), by name, for its stage to end

    @property
    def is_root(self) -> bool: ...

    def progress(self, message: str) -> None: ...

    def enter(self, stage: CheckName, session: Session) -> None: ...

    def run_stage(self, session: Session, check: Any, line: str, measure: Callable[[], Any]) -> Any: ...

    def skip_after(self, check: CheckName, reason: str) -> None: ...


class StageBroken(RuntimeError):
    """Rank 0: a rank raised and another did not reach the stage's end; the run ends naming the culprits."""

    def __init__(self, message: str, culprits: list[Culprit]):
        super().__init__(message)
        self.culprits = culprits


def collective_failure(error: BaseException) -> bool:
    """An error of the process group itself (a dead peer, NCCL), which no rank can go on after."""
    if isinstance(error, RankTimeout):
        return True
    try:
        import torch.distributed as dist

        if isinstance(error, dist.DistError):
            return True
    except ImportError:
        pass
    text = str(error)[:500]
    return any(s in text for s in COLLECTIVE_ERRORS)


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else repr(error)}"[:500]


def describe(error: BaseException, session: Session, check: CheckName,
             explain: Callable[[BaseException], str | None] | None = None) -> StageError:
    """The error as its result names it: its type and first line, or what `explain` says of it instead (an
    out-of-memory error: whose memory it is, run.Runner.explain); the traceback is kept either way."""
    info = session.ranks[session.rank]
    said = explain(error) if explain is not None else None
    return StageError(check=check, rank=session.rank, node=info.node, gpu=info.gpu,
                      step=session.control.last_step,
                      error=first_line(error) if said is None else f"{type(error).__name__}: {said}"[:1000],
                      traceback="".join(traceback.format_exception(error))[-MAX_TRACEBACK:])


def message(e: StageError) -> str:
    return f"rank {e.rank} on node {e.node}, GPU {e.gpu}, raised in stage {e.check} (step '{e.step}'): {e.error}"


def results(errors: list[StageError]) -> list[CheckResult]:
    """One failed result of the check per rank that raised, naming its node and GPU."""
    return [rules.liveness(e.check, RESULT, observed=e.error.split(":", 1)[0], expected="no exception",
                           message=message(e)[:1000], node=e.node, gpu=e.gpu) for e in errors]


@dataclass
class Outcome:
    """How a stage ended on every rank: this rank's value (None where it raised) and every rank's error."""

    value: Any
    errors: list[StageError]


def guarded(session: Session, check: CheckName, fn: Callable[[], Any], blamer: Blamer | None,
            explain: Callable[[BaseException], str | None] | None = None) -> Outcome:
    """Run `fn` (this rank's part of the check's stage); an error it raises becomes a StageError on every rank.

    The rank that raised aborts its process groups, which ends the gloo collectives other ranks wait in for it
    (not those of a DDP or FSDP model it still held: they wait out the collective timeout, naming it); with NCCL
    each other rank's watchdog aborts its own (Control.release). A collective error on a rank after
    another raised is that abort, not a fault of its own. Once every rank is at the stage's end, a new process
    group replaces the aborted one and the next check runs on it.
    """
    from acceptance_workload.runtime import launch

    control = session.control
    control.stage, control.abort, value, mine = check, None, None, None
    if session.backend == "nccl":
        control.abort = launch.abort_collectives
    try:
        value = fn()
    except StageAborted:
        pass  # another rank raised: this one only stopped waiting for it
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)) or (
                collective_failure(e) and not _aborted_by_another(control, check, e)):
            control.stage = control.abort = None
            raise
        if not collective_failure(e):
            mine = describe(e, session, check, explain)
            print(f"gpu-acceptance: {message(mine)}\n{mine.traceback}", file=sys.stderr, flush=True)
            control.store.set(f"stage-error/{check}/{session.rank}",
                              f"{mine.error} (stage {check}, step '{mine.step}')")
            control.store.add(f"stage-errors/{check}", 1)
    control.stage = control.abort = None
    if mine is not None:
        # Out of the except block, the stage's frames (its models, DDP's reducer: each holds a process group) are
        # gone; aborted and collected, the groups close their connections, which ends the others' gloo waits.
        launch.abort_collectives()
        gc.collect()
    errors = agree(session, check, mine, blamer)
    if errors:
        launch.renew(session, check)
    return Outcome(value, errors)


def _aborted_by_another(control: Any, check: CheckName, error: BaseException) -> bool:
    """A collective error after another rank raised in this stage: that rank (or this one's watchdog) aborted it."""
    try:
        return control.stage_errors(check) > 0 and not isinstance(error, RankTimeout)
    except Exception:
        return False


def agree(session: Session, check: CheckName, mine: StageError | None, blamer: Blamer | None) -> list[StageError]:
    """Every rank's end of the stage: rank 0 waits for all (at most a collective timeout), says which ranks
    raised, and every rank takes up the control plane's sequence where the furthest rank left it."""
    control = session.control
    base = f"stage-end/{check}"
    control.store.set(f"{base}/{session.rank}", json.dumps(
        {"error": None if mine is None else mine.to_wire(), "seq": control._seq}))
    if session.rank == 0:
        ends = _gather_ends(session, check, base, blamer)
        verdict = {"errors": [e["error"] for e in ends if e["error"]], "seq": max(e["seq"] for e in ends)}
        control.store.set(f"{base}/verdict", json.dumps(verdict))
    else:
        key = f"{base}/verdict"
        try:
            control.store.wait([key], timedelta(seconds=2 * control.timeout))
        except Exception as e:
            raise RankTimeout(f"{control.describe(0)} did not say how stage {check} ended within "
                              f"{2 * control.timeout:.0f}s ({type(e).__name__})", [0]) from e
        verdict = json.loads(control.store.get(key))
    control._seq = verdict["seq"]
    return [StageError.model_validate(e) for e in verdict["errors"]]


def _gather_ends(session: Session, check: CheckName, base: str, blamer: Blamer | None) -> list[dict[str, Any]]:
    """Rank 0: every rank's end of the stage. A rank still missing a collective timeout later hangs: after another
    rank raised, in a collective it could not be released from (StageBroken), else as any hung rank (RankTimeout)."""
    control = session.control
    keys = {r: f"{base}/{r}" for r in range(session.world_size)}
    deadline = time.monotonic() + control.timeout
    while True:
        missing = [r for r, k in keys.items() if not control.store.check([k])]
        if not missing:
            return [json.loads(control.store.get(keys[r])) for r in range(session.world_size)]
        if time.monotonic() >= deadline:
            if control.stage_errors(check):
                raise _broken(session, check, missing, blamer)
            raise RankTimeout(f"{control.describe_many(missing)} did not finish stage {check} within "
                              f"{control.timeout:.0f}s", missing)
        time.sleep(POLL_SECONDS)


def _broken(session: Session, check: CheckName, missing: list[int], blamer: Blamer | None) -> StageBroken:
    """The culprits of a stage some rank raised in and others could not leave: stopped ranks, else those that raised."""
    control = session.control
    culprits: list[Culprit] = []
    if blamer is not None:
        culprits = blamer.stopped_culprits() or [Culprit(r, "failed", m)
                                                 for r, m in sorted(blamer.stage_errors(check).items())]
    return StageBroken(f"{describe_culprits(control, culprits)}; {control.describe_many(missing)} did not reach the "
                       f"end of stage {check} within {control.timeout:.0f}s (a collective it could not be released "
                       "from), so the ranks cannot go on together", culprits)
