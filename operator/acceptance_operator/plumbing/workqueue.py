"""The keys (namespace, name) of AcceptanceTests that need a reconcile, and the threads that work them off.

Why not a kopf timer per test: a timer looks at every test every few seconds
whether anything changed or not, so API requests grow with the number of tests
and a change waits for the next tick. Here a watch event about a test, its job
or its pods puts the test's key in the queue at once; a key already waiting is
not added twice (a burst of events is one reconcile); one key is never worked
on by two threads; and a key can be scheduled for later (`add_after`): the
next moment the clock alone can change a run (timeout, report grace,
unschedulable grace), a slow safety resync, or a retry after an error.
This is the work queue of Kubernetes' own controllers (client-go), in small,
with one addition: an urgent lane (`add(key, urgent=True)`) that workers serve
first. A test whose run is due and has no job yet (a new test, a changed
spec, a rerun asked for after the last verdict) is urgent: when hundreds are
created at once, every one gets its job before any running test is looked at
again (a job's own watch events, a status echo), so the time to the last job
does not include the follow-up work of all the others. With `burst_hold`,
the other keys also wait while urgent keys keep arriving (one came within
`burst_hold` seconds), each at most `burst_hold_max` seconds: the follow-up
work of the first tests of a burst (their RBAC, evidence ConfigMaps and status)
does not compete for the API server with the creations still coming in.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """A thread-safe set of keys to process, in arrival order, each by one worker at a time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, burst_hold: float = 0.0,
                 burst_hold_max: float = 1.0) -> None:
        self._clock = clock
        self._burst_hold, self._burst_hold_max = burst_hold, burst_hold_max
        self._last_urgent = float("-inf")  # when an urgent key last arrived
        self._ready_at: dict[K, float] = {}  # when each key in _ready was put there
        self._cond = threading.Condition()
        self._ready: deque[K] = deque()
        self._urgent: deque[K] = deque()  # served before _ready
        self._urgent_keys: set[K] = set()  # waiting keys that are urgent (in _urgent, or once done())
        self._waiting: set[K] = set()  # in _ready, or to be re-added when its worker is done
        self._processing: set[K] = set()
        self._later: list[tuple[float, int, K]] = []  # (due, tie-breaker, key), a heap
        self._due: dict[K, float] = {}  # the earliest time each key is scheduled for
        self._seq = itertools.count()
        self._closed = False

    def add(self, key: K, urgent: bool = False) -> None:
        """Process `key` as soon as a worker is free (once, however often it is added meanwhile).

        `urgent`: before every key that is not (a waiting key is moved up).
        """
        with self._cond:
            self._add(key, urgent)

    def _add(self, key: K, urgent: bool = False) -> None:
        if key in self._waiting:
            if urgent and key not in self._urgent_keys:
                self._urgent_keys.add(key)
                self._last_urgent = self._clock()
                if key not in self._processing:  # O(n), only when a waiting key turns urgent
                    self._ready.remove(key)
                    self._ready_at.pop(key, None)
                    self._urgent.append(key)
            return
        self._waiting.add(key)
        if urgent:
            self._urgent_keys.add(key)
            self._last_urgent = self._clock()
        if key not in self._processing:  # else done() puts it back
            self._enqueue(key)

    def _enqueue(self, key: K) -> None:
        if key in self._urgent_keys:
            self._urgent.append(key)
        else:
            self._ready.append(key)
            self._ready_at[key] = self._clock()
        self._cond.notify()

    def _held(self) -> float:
        """Seconds the other keys still wait for a burst of urgent ones (0: serve them now)."""
        now = self._clock()
        if now - self._last_urgent >= self._burst_hold:
            return 0.0
        oldest = self._ready_at.get(self._ready[0], now)
        return max(0.0, min(self._last_urgent + self._burst_hold, oldest + self._burst_hold_max) - now)

    def has_urgent(self) -> bool:
        """Urgent keys are waiting for a worker."""
        with self._cond:
            return bool(self._urgent)

    def add_after(self, key: K, delay: float) -> None:
        """Process `key` in `delay` seconds (an earlier schedule of the same key wins)."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            due = self._clock() + delay
            if self._due.get(key, float("inf")) <= due:
                return
            self._due[key] = due
            heapq.heappush(self._later, (due, next(self._seq), key))
            self._cond.notify()

    def forget(self, key: K) -> None:
        """Drop the key's schedule (a deleted test); a pending immediate add still runs and finds nothing."""
        with self._cond:
            self._due.pop(key, None)

    def _promote_due(self) -> float | None:
        """Move keys whose time has come to the ready queue; the seconds until the next one, if any."""
        now = self._clock()
        while self._later:
            due, _, key = self._later[0]
            if self._due.get(key) != due:  # superseded by an earlier schedule, or forgotten
                heapq.heappop(self._later)
                continue
            if due > now:
                return due - now
            heapq.heappop(self._later)
            del self._due[key]
            self._add(key)
        return None

    def get(self, timeout: float | None = None) -> K | None:
        """The next key to process (the caller must call done(key)); None when closed or after `timeout`."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                wait = self._promote_due()
                if self._closed:
                    return None
                held = 0.0 if self._urgent or not self._ready else self._held()
                if self._urgent or (self._ready and not held):
                    key = (self._urgent or self._ready).popleft()
                    self._ready_at.pop(key, None)
                    self._waiting.discard(key)
                    self._urgent_keys.discard(key)
                    self._processing.add(key)
                    return key
                if held:
                    wait = held if wait is None else min(wait, held)
                if deadline is not None:
                    left = deadline - self._clock()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        """The worker finished `key`; if it was added meanwhile, it is processed again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._waiting:
                self._enqueue(key)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        """Keys waiting now or scheduled for later."""
        with self._cond:
            return len(self._waiting | set(self._due))


class WorkGate(Protocol):
    """What decides whether a worker may work now (election.Gate: only while this replica leads)."""

    def wait_leading(self) -> bool: ...

    def begin(self) -> bool: ...

    def end(self) -> None: ...


def start_workers(queue: WorkQueue[K], work: Callable[[K], None], count: int, name: str,
                  gate: WorkGate | None = None) -> list[threading.Thread]:
    """`count` daemon threads that process keys until the queue is closed; `work` must not raise.

    With a `gate`, a worker waits for it before taking a key, and a key taken while the gate closed goes back
    to the queue unworked (a standby keeps its queue current and works it off once it leads).
    """

    def loop() -> None:
        while True:
            if gate is not None and not gate.wait_leading():
                return
            key = queue.get()
            if key is None:
                return
            if gate is not None and not gate.begin():
                queue.add(key)  # back in the queue (re-enqueued by done() below)
                queue.done(key)
                continue
            try:
                work(key)
            finally:
                if gate is not None:
                    gate.end()
                queue.done(key)

    threads = [threading.Thread(target=loop, name=f"{name}-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads
