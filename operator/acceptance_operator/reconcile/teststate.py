"""What the operator keeps about each AcceptanceTest between reconciles: one object per test.

Created when the test is first seen (or first needs something kept) and
dropped in one place, when the test is deleted (States.drop): a test created
again under the same name starts from nothing, never from what its namesake
left (a start time of a refused job, a retry count, an echo to skip).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TestKey = tuple[str, str]  # (namespace, name)


@dataclass
class TestState:
    """One test's memory in the operator (none of it is needed for correctness after a restart)."""

    # kopf's object logger and the context of the test's last event (kopf.info/warn post through it).
    logger: logging.Logger | None = None
    context: contextvars.Context | None = None
    failures: int = 0  # consecutive failed reconciles: the retry backs off
    own_write: str | None = None  # the resourceVersion our last status write made (its echo is skipped)
    seen: str | None = None  # what of the test a reconcile depends on, as last seen (handlers._fingerprint)
    # A run whose job exists and whose other children and status are still to come (the second step of a start):
    # (run id, start time, job adopted, earlier runs stopped).
    begun: tuple[str, datetime, bool, list[str]] | None = None
    # The body its watch event brought: the first reconcile of a new run starts from it, without a GET.
    fresh: dict[str, Any] | None = None
    # Since when the API server has refused the run's job because the backend's admission webhook did not answer.
    unreachable_since: datetime | None = None
    legacy_told: set[str] = field(default_factory=set)  # runs of an earlier version whose status.report was read
    # A sweep in its single-node stage: a node joining, leaving or cordoned may change what it starts next.
    sweeping_nodes: bool = False


TestState.__test__ = False  # type: ignore[attr-defined]  # not a pytest test class


class States:
    """TestState by test; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[TestKey, TestState] = {}

    def get(self, key: TestKey) -> TestState:
        """The test's state, created empty on first use."""
        with self._lock:
            return self._states.setdefault(key, TestState())

    def peek(self, key: TestKey) -> TestState | None:
        with self._lock:
            return self._states.get(key)

    def keys_where(self, wanted: Callable[[TestState], bool]) -> list[TestKey]:
        """The tests whose state `wanted` says yes to."""
        with self._lock:
            return [k for k, s in self._states.items() if wanted(s)]

    def drop(self, key: TestKey) -> None:
        """The test is gone: everything kept about it goes."""
        with self._lock:
            self._states.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)
