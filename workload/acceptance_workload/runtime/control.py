"""The control plane: results, decisions and liveness exchanged through the rendezvous store.

Preflight results, sweep timings and the final verdict travel through the
c10d TCP store rather than through NCCL, so a broken NCCL or fabric (exactly
what is being tested) cannot hide them. Each rank also counts the steps it has
entered in the store, and beats a heartbeat key from a thread of its own (a
collective stuck in the main thread does not stop it; a frozen or dead process
does). Rank 0's watchdog names a rank whose beat stays unchanged for
checks.heartbeatTimeoutSeconds, in whatever step, however long that step may
take; the other ranks name rank 0 when the store it hosts stays silent as long.
A rank whose process ended is named at once, with its exit code or signal,
from what the process that started it wrote down (deaths.py: the local
launcher, in pods each rank's guard). When a step does not finish in time, or
a rank fails, the Blamer names the culprits in this order: ranks whose process
ended, ranks whose heartbeat stopped, ranks that reported an error, ranks alive
but behind the others. No culprit at all means every rank is alive and at the
same step: the collective itself hung (fabric, NCCL, GPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from acceptance_workload.runtime import deaths
from acceptance_workload.runtime.bounded_store import BoundedStore

if TYPE_CHECKING:
    from acceptance_workload.contract.results import CheckName, CheckResult

MAX_NAMED_RANKS = 8
HEARTBEAT_SECONDS = 1.0  # how often each rank beats
# How long the Blamer watches the heartbeats: a live rank beats at least twice
# in it, so an unchanged beat means a stopped rank (no clocks compared).
HEARTBEAT_WATCH_SECONDS = 3 * HEARTBEAT_SECONDS + 0.5
STORE_CONNECT_SECONDS = 15
FINAL_WAIT_SECONDS = 180  # how long other ranks wait for rank 0's verdict: the status writer retries for 120 s
ABORTED = b'"gpu-acceptance: stage aborted"'  # a key's value that ends a wait for a rank that raised (release)


@dataclass(frozen=True)
class RankInfo:
    rank: int
    node: str
    gpu: int
    host: str
    pid: int


class RankTimeout(RuntimeError):
    """Some ranks did not deliver their part of an exchange in time."""

    def __init__(self, message: str, ranks: list[int]):
        super().__init__(message)
        self.ranks = ranks


class StageAborted(Exception):
    """Another rank raised inside the running stage: this rank stops waiting for it and goes to the stage's end."""


class Control:
    """Gather / broadcast of JSON values and step counters over a c10d Store.

    Every rank must call gather/broadcast/allgather in the same order: each
    call gets the next sequence number, which keeps the keys of calls apart.
    """

    def __init__(self, store: Any, rank: int, world_size: int, *, timeout: float,
                 master: tuple[str, int] | None = None):
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.timeout = timeout
        self.master = master
        self._seq = 0
        self.ranks: list[RankInfo] = []
        self._waiting: list[str] = []  # the keys the main thread waits for now
        self.stage: str | None = None  # the check's stage running under stages.guarded (None: between stages)
        self.abort: Callable[[], None] | None = None  # ends this rank's blocked collectives (stages.guarded sets it)
        self.last_step = ""  # the step this rank entered last (mark)

    def set_ranks(self, ranks: list[RankInfo]) -> None:
        self.ranks = sorted(ranks, key=lambda r: r.rank)

    def describe(self, rank: int) -> str:
        if rank < len(self.ranks):
            info = self.ranks[rank]
            return f"rank {rank} (node {info.node}, GPU {info.gpu})"
        return f"rank {rank}"

    def describe_many(self, ranks: list[int]) -> str:
        named = ", ".join(self.describe(r) for r in ranks[:MAX_NAMED_RANKS])
        more = len(ranks) - MAX_NAMED_RANKS
        return named + (f" and {more} more" if more > 0 else "")

    # exchanges ----------------------------------------------------------------
    def _key(self, kind: str, name: str) -> str:
        self._seq += 1
        return f"{kind}/{self._seq}/{name}"

    def _wait(self, keys: dict[int, str], what: str) -> None:
        """Wait for every rank's key; on timeout name the ranks whose key is missing.

        Inside a stage, a rank that raised never delivers its key: the watchdog then fills the missing keys
        with ABORTED (release), and this rank leaves the stage (StageAborted) instead of waiting out the timeout.
        """
        self._waiting = list(keys.values())
        try:
            self.store.wait(list(keys.values()), timedelta(seconds=self.timeout))
            if self.stage is not None and self.stage_errors(self.stage) and any(
                    self.store.get(k) == ABORTED for k in keys.values()):
                raise StageAborted(f"another rank raised in stage {self.stage}")
        except StageAborted:
            raise
        except Exception as e:
            missing = [r for r, k in keys.items() if not self._exists(k)]
            if not missing:
                raise
            raise RankTimeout(
                f"{self.describe_many(missing)} did not deliver '{what}' within {self.timeout:.0f}s "
                f"({type(e).__name__})",
                missing,
            ) from e
        finally:
            self._waiting = []

    def release(self, store: Any) -> None:
        """From the watchdog's thread (its own connection): another rank raised in the running stage, so the keys
        this rank's main thread waits for may never come; ABORTED in each missing one ends the wait."""
        for key in list(self._waiting):
            if not store.check([key]):
                store.set(key, ABORTED.decode())
        abort, self.abort = self.abort, None
        if abort is not None:
            abort()

    def _exists(self, key: str) -> bool:
        try:
            return bool(self.store.check([key]))
        except Exception:
            return False

    def gather(self, name: str, value: Any) -> list[Any] | None:
        """Every rank's value, in rank order, on rank 0; None elsewhere.

        Rank 0 alone reads a gather's keys, so it deletes them once read: a burn-in gathers every 30 s for hours,
        and the store (held in memory by the job's rendezvous) must not grow with the duration."""
        base = self._key("gather", name)
        self.store.set(f"{base}/{self.rank}", json.dumps(value))
        if self.rank != 0:
            return None
        keys = {r: f"{base}/{r}" for r in range(self.world_size)}
        self._wait(keys, name)
        values = [json.loads(self.store.get(keys[r])) for r in range(self.world_size)]
        for key in keys.values():
            self.store.delete_key(key)
        return values

    def broadcast(self, name: str, value: Any = None) -> Any:
        """Rank 0's value on every rank."""
        key = self._key("broadcast", name)
        if self.rank == 0:
            self.store.set(key, json.dumps(value))
            return value
        self._wait({0: key}, name)
        return json.loads(self.store.get(key))

    def allgather(self, name: str, value: Any) -> list[Any]:
        return self.broadcast(name, self.gather(name, value))

    # liveness -----------------------------------------------------------------
    def mark(self, label: str) -> None:
        """This rank has entered step `label` (one counter per rank, compared on a timeout)."""
        self.last_step = label
        self.store.set(f"step/{self.rank}", label)
        self.store.add(f"progress/{self.rank}", 1)

    def report_error(self, message: str, *, own: bool = True) -> None:
        """Tell the other ranks this one failed, so they stop waiting for it.

        own=False: this rank only timed out waiting for others; it is then not
        a culprit itself (the Blamer looks at the ranks it waited for).
        """
        with contextlib.suppress(Exception):
            if not own:
                self.store.set(f"waited/{self.rank}", "1")
            self.store.set(f"error/{self.rank}", message[:2000])
            self.store.add("errors", 1)

    def stage_errors(self, stage: str, store: Any = None) -> int:
        """How many ranks raised inside `stage` (stages.py posts them)."""
        return int((store or self.store).add(f"stage-errors/{stage}", 0))

    def finish(self, code: int, wait: float = 10.0, absent: int = 0, via: Any = None) -> int:
        """End of the run: rank 0 announces the exit code and waits (bounded) for the others to read it.

        Other ranks wait for the code and exit with it, so every process of the
        job agrees and none is torn down while rank 0 is still writing the report
        (which may take the status writer's whole retry budget). `absent`: ranks
        rank 0 already knows are gone, whose acknowledgement it does not wait for. `via`: another
        connection to the store, for a thread other than the (possibly blocked) main one.
        """
        store = self.store if via is None else via
        if self.rank == 0:
            store.set("final", str(code))
            deadline = time.monotonic() + wait
            expected = self.world_size - 1 - absent
            while time.monotonic() < deadline and expected > 0:
                try:
                    if store.add("done", 0) >= expected:
                        break
                except Exception:
                    break
                time.sleep(0.1)
            return code
        try:
            store.wait(["final"], timedelta(seconds=max(wait, self.timeout, FINAL_WAIT_SECONDS)))
            final = int(store.get("final"))
            store.add("done", 1)
            return final
        except Exception:
            return code


class Blamer:
    """Reads the other ranks' heartbeats, counters and errors over its own store connection.

    Its own connection: the main thread may hold the shared client while
    blocked (NCCL's communicator setup waits on the store).
    """

    def __init__(self, control: Control, store: Any, watch_seconds: float = HEARTBEAT_WATCH_SECONDS,
                 deaths_dir: str | None = None):
        self.control = control
        self.store = store
        self.watch_seconds = watch_seconds
        self.deaths_dir = os.environ.get(deaths.DEATHS_ENV) if deaths_dir is None else deaths_dir
        self._seen: dict[int, tuple[float | None, float]] = {}  # rank -> (its last beat, when it changed here)

    @classmethod
    def connect(cls, control: Control) -> Blamer:
        return cls(control, BoundedStore(own_connection(control), STORE_CONNECT_SECONDS))

    def peer_errors(self) -> dict[int, str]:
        if self.store.add("errors", 0) == 0:
            return {}
        out = {}
        for r in range(self.control.world_size):
            key = f"error/{r}"
            if r != self.control.rank and self.store.check([key]):
                out[r] = self.store.get(key).decode(errors="replace")
        return out

    def died(self) -> list[Culprit]:
        """Ranks whose process ended, as their launcher or guard wrote it down (deaths.py), with their last step.

        A death written into this node's directory goes into the store too: a guard takes seconds to get there
        itself (it imports torch only then), and rank 0 may be on another node.
        """
        told = deaths.from_store(self.store, self.control.world_size)
        local = deaths.read(self.deaths_dir)
        for r in sorted(set(local) - set(told)):  # this node's guards wrote it: rank 0 may be on another node
            deaths.tell_store(self.store, r, local[r])
        ended = {**told, **local}
        ended = {r: text for r, text in ended.items() if r != self.control.rank and r < self.control.world_size}
        out = []
        for r, text in sorted(ended.items()):
            step = "?"
            with contextlib.suppress(Exception):
                step = self._step(r)
            out.append(Culprit(r, "died", f"{text}, at step '{step}'"))
        return out

    def root_death(self, wait_seconds: float) -> list[Culprit]:
        """Rank 0's death as its guard or launcher wrote it down, waited for briefly: a collective broken by that
        death can reach another rank before the word of it does (deaths.py)."""
        deadline = time.monotonic() + wait_seconds
        while True:
            with contextlib.suppress(Exception):
                dead = [c for c in self.died() if c.rank == 0]
                if dead:
                    return dead
            if time.monotonic() > deadline:
                return []
            time.sleep(0.2)

    def stage_errors(self, stage: str) -> dict[int, str]:
        """The errors ranks raised inside `stage`, by rank (stages.py posts them)."""
        out = {}
        for r in range(self.control.world_size):
            key = f"stage-error/{stage}/{r}"
            if self.store.check([key]):
                out[r] = self.store.get(key).decode(errors="replace")
        return out

    def final_code(self) -> int | None:
        if not self.store.check(["final"]):
            return None
        return int(self.store.get("final"))

    def _step(self, rank: int) -> str:
        key = f"step/{rank}"
        return self.store.get(key).decode(errors="replace") if self.store.check([key]) else "not started"

    def unreachable(self) -> Exception | None:
        """The error the store gives now, None when it answers (rank 0, which hosts it, is alive)."""
        try:
            self.store.check(["final"])
            return None
        except Exception as e:
            return e

    def heartbeats(self) -> dict[int, float | None]:
        """Every other rank's last beat (its wall-clock time), None for a rank that never beat."""
        out: dict[int, float | None] = {}
        for r in range(self.control.world_size):
            key = f"heartbeat/{r}"
            if r != self.control.rank:
                out[r] = float(self.store.get(key)) if self.store.check([key]) else None
        return out

    def stopped(self) -> dict[int, float | None]:
        """Ranks whose heartbeat did not change while watched, with how long ago they last beat (None: never)."""
        before = self.heartbeats()
        time.sleep(self.watch_seconds)
        after = self.heartbeats()
        now = time.time()
        return {r: (None if beat is None else max(0.0, now - beat))
                for r, beat in after.items() if beat == before.get(r)}

    def silent(self, limit: float) -> list[Culprit]:
        """Ranks whose heartbeat has not changed for `limit` seconds, as this rank's own clock counts them.

        Called again and again (the watchdog's loop): each call notes which
        beats changed since the last one, so no two hosts' clocks are compared.
        """
        now = time.monotonic()
        out = []
        for r, beat in self.heartbeats().items():
            seen = self._seen.get(r)
            if seen is None or seen[0] != beat:
                self._seen[r] = (beat, now)
            elif now - seen[1] >= limit:
                out.append(Culprit(r, "stopped", f"no heartbeat for {now - seen[1]:.0f}s"
                                   + ("" if beat is not None else ", never beat one")
                                   + f", last at step '{self._step(r)}'"))
        return out

    def stopped_culprits(self) -> list[Culprit]:
        """The ranks whose heartbeat stopped, as culprits (watched for HEARTBEAT_WATCH_SECONDS)."""
        return [Culprit(r, "stopped", "never beat a heartbeat" if ago is None else f"last heartbeat {ago:.0f}s ago")
                for r, ago in sorted(self.stopped().items())]

    def blame(self, suspects: list[int] | tuple[int, ...] = ()) -> list[Culprit]:
        """The culprits of a hang or failure: dead ranks, else stopped ranks, else failed ranks, else ranks behind,
        else `suspects`.

        Only the first kind found is blamed: when a rank dies, its peers' errors
        (connection closed) and their waiting are its consequences, not causes.
        Its launcher may write its end down while the heartbeats are watched
        (its peers can see a closed connection first): the deaths are read again then.
        """
        c = self.control
        dead = self.died()
        if dead:
            return dead
        stopped = self.stopped_culprits()
        dead = self.died()
        if dead:
            return dead
        if stopped:
            return stopped
        errors = {r: m for r, m in self.peer_errors().items() if not self.store.check([f"waited/{r}"])}
        if c.stage is not None:  # a rank that raised inside the running stage and left a collective (stages.py)
            errors = self.stage_errors(c.stage) | errors
        if errors:
            return [Culprit(r, "failed", msg) for r, msg in sorted(errors.items())]
        counters = {r: self.store.add(f"progress/{r}", 0) for r in range(c.world_size)}
        top = max(counters.values())
        behind = [r for r, n in sorted(counters.items()) if n < top]
        if behind:
            return [Culprit(r, "behind", f"still at '{self._step(r)}'") for r in behind]
        return [Culprit(r, "behind", f"still at '{self._step(r)}'") for r in suspects]

    def explain(self, label: str, timeout: float) -> Blame:
        """Why step `label` did not finish: who stopped, failed or fell behind, or a hang of all ranks."""
        c = self.control
        try:
            culprits = self.blame()
        except Exception as e:
            return root_unreachable(c, f"'{label}' did not complete within {timeout:.0f}s", e)
        if culprits:
            return Blame(f"'{label}' did not complete within {timeout:.0f}s: {describe_culprits(c, culprits)}",
                         culprits)
        return Blame(f"'{label}' did not complete within {timeout:.0f}s although all {c.world_size} ranks reached "
                     f"it and are alive: the collective itself hung (fabric, NCCL or a GPU); "
                     f"seen from {c.describe(c.rank)}", [])


CulpritKind = Literal["died", "stopped", "failed", "behind"]
# One row per kind of culprit: the result's name, and what the sentence says it did.
CULPRIT_KINDS: dict[CulpritKind, tuple[str, str]] = {
    "died": ("rank_exited", "died"),
    "stopped": ("rank_responding", "stopped responding"),
    "failed": ("rank_error", "failed"),
    "behind": ("rank_progress", "is alive but fell behind"),
}


@dataclass(frozen=True)
class Culprit:
    """A rank to blame for a hang or a failure, and the evidence."""

    rank: int
    kind: CulpritKind
    detail: str


@dataclass(frozen=True)
class Blame:
    """A timed-out or failed step explained: the sentence for the report, and the ranks it blames."""

    message: str
    culprits: list[Culprit]
    store_reachable: bool = True


def root_unreachable(control: Control, what: str, error: Exception) -> Blame:
    """Rank 0 hosts the store: when the store does not answer, rank 0 is the one to name."""
    where = f"{control.master[0]}:{control.master[1]}" if control.master else "the store"
    return Blame(f"{what} and the rendezvous store at {where} (hosted by {control.describe(0)}) is unreachable "
                 f"({type(error).__name__}: {error}): rank 0 is probably frozen or dead, or its node is down",
                 [Culprit(0, "stopped", "the rendezvous store it hosts is unreachable")], store_reachable=False)


def describe_culprit(control: Control, culprit: Culprit) -> str:
    """'rank 1 on node X, GPU 1, stopped responding (last heartbeat 12s ago)'."""
    what = CULPRIT_KINDS[culprit.kind][1]
    where = ""
    if culprit.rank < len(control.ranks):
        info = control.ranks[culprit.rank]
        where = f" on node {info.node}, GPU {info.gpu},"
    said = culprit.kind in ("failed", "died")  # its own words, or its launcher's
    sep = ": " if said else " "
    detail = culprit.detail if said else f"({culprit.detail})"
    return f"rank {culprit.rank}{where} {what}{sep}{detail}"


def describe_culprits(control: Control, culprits: list[Culprit]) -> str:
    named = "; ".join(describe_culprit(control, c) for c in culprits[:MAX_NAMED_RANKS])
    more = len(culprits) - MAX_NAMED_RANKS
    return named + (f"; and {more} more" if more > 0 else "")


def culprit_results(control: Control, check: CheckName, culprits: list[Culprit]) -> list[CheckResult]:
    """One failed result per culprit, under the check that was running, naming its node and GPU.

    They have the usual one-measurement shape, so the report's failed nodes
    (and the operator's summary.failedNodes) include the culprits' nodes.
    """
    from acceptance_workload.contract import rules

    out = []
    for c in culprits:
        info = control.ranks[c.rank] if c.rank < len(control.ranks) else None
        out.append(rules.liveness(
            check, CULPRIT_KINDS[c.kind][0], observed=c.kind, expected="alive and in step",
            message=describe_culprit(control, c)[:1000], node=info.node if info else None,
            gpu=info.gpu if info else None))
    return out


def own_connection(control: Control) -> Any:
    """A new client of the rendezvous store, for a thread that must not wait behind the main one's calls."""
    if control.master is None:
        return control.store
    import torch.distributed as dist

    host, port = control.master
    client = dist.TCPStore(host, port, None, False, timedelta(seconds=STORE_CONNECT_SECONDS),
                           wait_for_workers=False)
    return dist.PrefixStore("gpu-acceptance", client)


def hard_exit(code: int) -> None:
    """Leave now, even while another thread is blocked inside a collective."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
