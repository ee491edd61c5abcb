"""Liveness: each rank's heartbeat thread, and the watchdog that ends a step which outlived its timeout.

The protocol they speak (keys in the rendezvous store, who is to blame) is control.py's; this module holds the two
threads every rank runs beside its checks, so that a collective stuck in the main thread cannot hide a stopped,
dead or failed rank.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from acceptance_workload.runtime.control import (
    HEARTBEAT_SECONDS,
    Blame,
    Blamer,
    Control,
    Culprit,
    describe_culprits,
    own_connection,
    root_unreachable,
)


class Heartbeat:
    """Beats `heartbeat/{rank}` (the wall-clock time) every second until the process ends.

    Its own thread and store connection: a collective or a store wait stuck in
    another thread does not stop it, but a frozen (SIGSTOP) or dead process
    does, which is what tells a stopped rank from a hung collective.
    """

    def __init__(self, store: Any, rank: int, interval: float = HEARTBEAT_SECONDS):
        self.store = store
        self.key = f"heartbeat/{rank}"
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-acceptance-heartbeat", daemon=True)

    @classmethod
    def connect(cls, control: Control) -> Heartbeat:
        return cls(own_connection(control), control.rank)

    def start(self) -> Heartbeat:
        self._beat()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        with contextlib.suppress(Exception):  # a store gone for good ends the run elsewhere
            self.store.set(self.key, f"{time.time():.3f}")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._beat()


class Watchdog:
    """Ends a step that outlives its timeout, or any step once another rank has failed.

    `on_fatal(blame)` runs once, on the watchdog's thread, and must end the
    process (it is what turns a hang into a report and an exit code).
    `on_final(code)` runs when rank 0 has already decided the run's outcome
    while this rank is still blocked.
    """

    def __init__(self, control: Control, blamer: Blamer, on_fatal: Callable[[Blame], None],
                 on_final: Callable[[int], None] | None = None, poll_seconds: float = 0.25,
                 peer_poll_seconds: float = 2.0, heartbeat_timeout: float | None = None):
        self.control = control
        self.blamer = blamer
        # Silent this long: a rank is frozen or dead (rank 0 watches the others' beats; the others
        # watch the store rank 0 hosts). Unset: the collective timeout, as before.
        self.heartbeat_timeout = control.timeout if heartbeat_timeout is None else heartbeat_timeout
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

    def _fire(self, blame: Blame) -> None:
        with self._lock:
            if self._fired or self._stop.is_set():  # stopped: the main thread handles the failure itself
                return
            self._fired = True
        self.on_fatal(blame)

    def _loop(self) -> None:
        last_peer_poll = time.monotonic()
        unreachable_since: float | None = None  # the store stopped answering (rank 0 frozen or gone)
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
                blame = self._look()
                unreachable_since = None
            except Exception as e:
                # The store rank 0 hosts is silent: after the heartbeat timeout, rank 0 is the one to name.
                unreachable_since = unreachable_since or now  # since the call that failed began
                if time.monotonic() - unreachable_since >= self.heartbeat_timeout:
                    self._fire(root_unreachable(self.control, f"{self.control.describe(self.control.rank)} "
                                                f"heard nothing for {self.heartbeat_timeout:.0f}s "
                                                "(checks.heartbeatTimeoutSeconds)", e))
                    return
                continue
            if blame is not None:
                self._fire(blame)
                return
            final = self.blamer.final_code() if self.control.rank != 0 else None
            if final is not None and self.on_final is not None:
                self.on_final(final)
                return

    def _look(self) -> Blame | None:
        """One look at the others: a rank whose process ended, one that failed, or (rank 0) one silent for the
        heartbeat timeout."""
        dead = self.blamer.died()
        if dead:
            label = self.control.last_step  # the stage or step this rank entered last (a step's label outlives it)
            # Rank 0 dead (its guard said so; torchrun's agent keeps the store up): no report will come, as when
            # the store it hosts is unreachable.
            return Blame(describe_culprits(self.control, dead)
                         + (f"; rank 0's last step: '{label}'" if label and self.control.rank == 0 else ""), dead,
                         store_reachable=all(c.rank != 0 for c in dead))
        errors = self.blamer.peer_errors()
        if errors:
            try:
                culprits = self.blamer.blame()
            except Exception:
                culprits = [Culprit(r, "failed", m) for r, m in sorted(errors.items())]
            said = "; ".join(f"{self.control.describe(r)}: {m}" for r, m in sorted(errors.items()))
            return Blame(describe_culprits(self.control, culprits) if culprits else said, culprits)
        self._release_after_stage_error()
        if self.control.rank != 0:
            return None
        silent = self.blamer.silent(self.heartbeat_timeout)
        if not silent:
            return None
        label = self.control.last_step
        return Blame(f"{describe_culprits(self.control, silent)}: silent for longer than "
                     f"checks.heartbeatTimeoutSeconds ({self.heartbeat_timeout:.0f}s)"
                     + (f"; rank 0's last step: '{label}'" if label else ""), silent)

    def _release_after_stage_error(self) -> None:
        """Another rank raised in the stage this rank still runs: end this rank's waits for it (Control.release).
        A rank that still does not reach the stage's end is named by the stage's agreement (stages.py) or, in a
        collective that did not end, by this watchdog's step deadline, as any hung collective is."""
        stage = self.control.stage
        if stage is not None and self.control.stage_errors(stage, self.blamer.store):
            self.control.release(self.blamer.store)
