"""Calm under outages: one short line per kind of failing call, at most once per period, never a traceback.

Why: while the API server is down every reconcile fails the same way. A
traceback per failure (and urllib3's retry warnings per attempt) once wrote
54.5 MB of log in a 150 s outage with 240 tests, burying the one line that
matters. Here a failure is described in one line (`describe_error`), and lines with
the same key (what failed and why, not which test) are let through once per
period; the next one says how many were held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

from kubernetes.client.exceptions import ApiException

PERIOD_SECONDS = 30.0
OWN_LOGGER = "gpu_acceptance"


class RateLimit:
    """Per key: allow one event per period; count the ones held back in between."""

    def __init__(self, period: float = PERIOD_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.period, self._clock = period, clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}

    def allow(self, key: Hashable) -> int | None:
        """None: hold this one back. Otherwise allowed, with the number held back since the last allowed one."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.period:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)


def describe_error(error: BaseException) -> str:
    """One line: the HTTP status of an API answer, or the kind of connection failure (no traceback)."""
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason}"
    reason = getattr(error, "reason", None)  # urllib3's MaxRetryError wraps the real cause
    cause = reason if isinstance(reason, BaseException) else error
    text = str(cause).split("\n", 1)[0]
    # urllib3 prefixes the connection object's repr, which changes with each attempt: keep the message.
    text = text.split(">: ", 1)[-1]
    return f"{type(cause).__name__}: {text[:200]}"


class CalmFilter(logging.Filter):
    """For loggers we do not own (urllib3, kopf): drop tracebacks from warnings and rate-limit repeated lines.

    A record's key is its logger and message template (not its arguments, which
    name the object or the attempt), so the 240th "Retrying ..." of an outage
    is held back while a different message still gets through.
    """

    def __init__(self, limit: RateLimit | None = None, min_level: int = logging.WARNING) -> None:
        super().__init__()
        self.limit = limit or RateLimit()
        self.min_level = min_level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.min_level or record.levelno >= logging.CRITICAL:
            return True
        if record.name.startswith(OWN_LOGGER):  # our own lines are rate-limited where they are written
            return True
        template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
        held = self.limit.allow((record.name, _shape(template)))
        if held is None:
            return False
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()} ({describe_error(record.exc_info[1])})"
            record.args = None
            record.exc_info, record.exc_text = None, None
        if held:
            record.msg = f"{record.getMessage()} [{held} similar lines held back]"
            record.args = None
        return True


def _shape(text: str) -> str:
    """A message with its changing parts (numbers, bracketed values) removed: its key."""
    out, depth = [], 0
    for ch in text[:200]:
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and depth:
            depth -= 1
        elif not depth and not ch.isdigit():
            out.append(ch)
    return "".join(out)
