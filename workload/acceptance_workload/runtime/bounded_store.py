"""A client of the rendezvous store whose calls give up after a time limit (the watchdog's, control.py)."""

from __future__ import annotations

import queue
import threading
from datetime import timedelta
from typing import Any


class BoundedStore:
    """A store client whose calls give up after a time limit instead of blocking for good.

    A frozen rank 0 (SIGSTOP) keeps the store's socket open but never answers,
    and a client call then blocks for ever, whatever the store's own timeout.
    Calls run one at a time on a daemon thread; while one is stuck, the next
    ones time out too (the store is unreachable), so the watchdog still acts.
    """

    def __init__(self, store: Any, seconds: float):
        self.store = store
        self.seconds = seconds
        self._calls: queue.Queue = queue.Queue()
        threading.Thread(target=self._serve, name="gpu-acceptance-store", daemon=True).start()

    def _serve(self) -> None:
        while True:
            fn, args, box, done = self._calls.get()
            try:
                box.append((True, fn(*args)))
            except Exception as e:
                box.append((False, e))
            done.set()

    def _call(self, name: str, *args: Any, limit: float | None = None) -> Any:
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._calls.put((getattr(self.store, name), args, box, done))
        limit = self.seconds if limit is None else limit
        if not done.wait(limit):
            raise TimeoutError(f"the rendezvous store did not answer '{name}' within {limit:.0f}s")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def set(self, key: str, value: str) -> None:
        self._call("set", key, value)

    def get(self, key: str) -> bytes:
        return self._call("get", key)

    def add(self, key: str, amount: int) -> int:
        return self._call("add", key, amount)

    def check(self, keys: list[str]) -> bool:
        return self._call("check", keys)

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        self._call("wait", keys, timeout, limit=timeout.total_seconds() + self.seconds)
