"""The control plane: results, decisions and liveness exchanged through the rendezvous store.

Preflight results, sweep timings and the final verdict travel through the
c10d TCP store rather than through NCCL, so a broken NCCL or fabric (exactly
what is being tested) cannot hide them. Each rank also counts the steps it has
entered in the store; when a step does not finish in time, comparing the
counters names the rank that never got there.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

MAX_NAMED_RANKS = 8
FINAL_WAIT_SECONDS = 180  # how long other ranks wait for rank 0's verdict: the status writer retries for 120 s


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
        """Wait for every rank's key; on timeout name the ranks whose key is missing."""
        try:
            self.store.wait(list(keys.values()), timedelta(seconds=self.timeout))
        except Exception as e:
            missing = [r for r, k in keys.items() if not self._exists(k)]
            if not missing:
                raise
            raise RankTimeout(
                f"{self.describe_many(missing)} did not deliver '{what}' within {self.timeout:.0f}s "
                f"({type(e).__name__})",
                missing,
            ) from e

    def _exists(self, key: str) -> bool:
        try:
            return bool(self.store.check([key]))
        except Exception:
            return False

    def gather(self, name: str, value: Any) -> list[Any] | None:
        """Every rank's value, in rank order, on rank 0; None elsewhere."""
        base = self._key("gather", name)
        self.store.set(f"{base}/{self.rank}", json.dumps(value))
        if self.rank != 0:
            return None
        keys = {r: f"{base}/{r}" for r in range(self.world_size)}
        self._wait(keys, name)
        return [json.loads(self.store.get(keys[r])) for r in range(self.world_size)]

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
        self.store.set(f"step/{self.rank}", label)
        self.store.add(f"progress/{self.rank}", 1)

    def report_error(self, message: str) -> None:
        """Tell the other ranks this one failed, so they stop waiting for it."""
        with contextlib.suppress(Exception):
            self.store.set(f"error/{self.rank}", message[:2000])
            self.store.add("errors", 1)

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
    """Reads the other ranks' counters and errors over its own store connection.

    Its own connection: the main thread may hold the shared client while
    blocked (NCCL's communicator setup waits on the store).
    """

    def __init__(self, control: Control, store: Any):
        self.control = control
        self.store = store

    @classmethod
    def connect(cls, control: Control) -> Blamer:
        if control.master is None:
            return cls(control, control.store)
        import torch.distributed as dist

        host, port = control.master
        client = dist.TCPStore(host, port, None, False, timedelta(seconds=15), wait_for_workers=False)
        return cls(control, dist.PrefixStore("gpu-acceptance", client))

    def peer_errors(self) -> dict[int, str]:
        if self.store.add("errors", 0) == 0:
            return {}
        out = {}
        for r in range(self.control.world_size):
            key = f"error/{r}"
            if r != self.control.rank and self.store.check([key]):
                out[r] = self.store.get(key).decode(errors="replace")
        return out

    def final_code(self) -> int | None:
        if not self.store.check(["final"]):
            return None
        return int(self.store.get("final"))

    def _step(self, rank: int) -> str:
        key = f"step/{rank}"
        return self.store.get(key).decode(errors="replace") if self.store.check([key]) else "not started"

    def culprits(self) -> str | None:
        """Ranks that fell behind the others and ranks that reported an error; None when all look alike."""
        c = self.control
        errors = self.peer_errors()
        counters = {r: self.store.add(f"progress/{r}", 0) for r in range(c.world_size)}
        top = max(counters.values())
        behind = [r for r, n in sorted(counters.items()) if n < top and r not in errors]
        parts = []
        if behind:
            steps = "; ".join(f"{c.describe(r)} is still at '{self._step(r)}'" for r in behind[:MAX_NAMED_RANKS])
            parts.append(f"{len(behind)} of {c.world_size} ranks fell behind: {steps}"
                         + (" ..." if len(behind) > MAX_NAMED_RANKS else ""))
        parts += [f"{c.describe(r)} failed: {msg}" for r, msg in sorted(errors.items())]
        return "; ".join(parts) or None

    def explain(self, label: str, timeout: float) -> str:
        """Why step `label` did not finish: ranks that never reached it, failed ranks, or a hang of all."""
        c = self.control
        try:
            who = self.culprits()
        except Exception as e:
            where = f"{c.master[0]}:{c.master[1]}" if c.master else "the store"
            return (f"'{label}' did not complete within {timeout:.0f}s and the rendezvous store at {where} "
                    f"is unreachable ({type(e).__name__}: {e}): rank 0 or its node is probably down")
        if who:
            return f"'{label}' did not complete within {timeout:.0f}s: {who}"
        return (f"'{label}' did not complete within {timeout:.0f}s although all {c.world_size} ranks reached it: "
                f"the collective itself hung (fabric, NCCL or a GPU); seen from {c.describe(c.rank)}")


class Watchdog:
    """Ends a step that outlives its timeout, or any step once another rank has failed.

    `on_fatal(message)` runs once, on the watchdog's thread, and must end the
    process (it is what turns a hang into a report and an exit code).
    `on_final(code)` runs when rank 0 has already decided the run's outcome
    while this rank is still blocked.
    """

    def __init__(self, control: Control, blamer: Blamer, on_fatal: Callable[[str], None],
                 on_final: Callable[[int], None] | None = None, poll_seconds: float = 0.25,
                 peer_poll_seconds: float = 2.0):
        self.control = control
        self.blamer = blamer
        self.on_fatal = on_fatal
        self.on_final = on_final
        self.poll = poll_seconds
        self.peer_poll = peer_poll_seconds
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._label = ""
        self._timeout = 0.0
        self._fired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-acceptance-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @contextlib.contextmanager
    def step(self, label: str, timeout: float | None = None) -> Iterator[None]:
        """Run a step that every rank runs, under a deadline (the collective timeout by default)."""
        t = self.control.timeout if timeout is None else timeout
        self.control.mark(label)
        with self._lock:
            self._label, self._timeout, self._deadline = label, t, time.monotonic() + t
        try:
            yield
        finally:
            with self._lock:
                self._deadline = None

    def _fire(self, message: str) -> None:
        with self._lock:
            if self._fired:
                return
            self._fired = True
        self.on_fatal(message)

    def _loop(self) -> None:
        last_peer_poll = time.monotonic()
        while not self._stop.wait(self.poll):
            with self._lock:
                deadline, label, timeout = self._deadline, self._label, self._timeout
            now = time.monotonic()
            if deadline is not None and now > deadline:
                self._fire(self.blamer.explain(label, timeout))
                return
            if now - last_peer_poll < self.peer_poll:
                continue
            last_peer_poll = now
            try:
                errors = self.blamer.peer_errors()
                final = self.blamer.final_code() if self.control.rank != 0 else None
            except Exception:
                continue  # the deadline above still bounds the wait
            if errors:
                try:
                    who = self.blamer.culprits()
                except Exception:
                    who = None
                self._fire(who or "; ".join(f"{self.control.describe(r)} failed: {m}" for r, m in errors.items()))
                return
            if final is not None and self.on_final is not None:
                self.on_final(final)
                return


def hard_exit(code: int) -> None:
    """Leave now, even while another thread is blocked inside a collective."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
