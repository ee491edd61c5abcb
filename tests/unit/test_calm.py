"""Calm under outages: one line per kind of failure and period, no tracebacks, a count of what was held back."""

from __future__ import annotations

import logging

from acceptance_operator.plumbing.calm import CalmFilter, RateLimit, describe_error
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rate_limit_lets_one_through_per_period_and_counts_the_rest():
    clock = Clock()
    limit = RateLimit(period=30, clock=clock)
    assert limit.allow("refused") == 0
    assert [limit.allow("refused") for _ in range(5)] == [None] * 5
    assert limit.allow("other") == 0  # another kind of failure is told at once
    clock.now = 30
    assert limit.allow("refused") == 5


def test_describe_error_is_one_line_naming_the_cause():
    assert describe_error(ApiException(status=503, reason="Service Unavailable")) == "HTTP 503 Service Unavailable"
    cause = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")
    text = describe_error(MaxRetryError(None, "/apis/x", reason=cause))
    assert text.startswith("NewConnectionError: ") and "Connection refused" in text and "\n" not in text


def record(msg: str, *args, level: int = logging.WARNING, name: str = "urllib3.connectionpool",
           exc: BaseException | None = None) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, (type(exc), exc, None) if exc else None)


def test_calm_filter_rate_limits_by_message_shape_and_drops_tracebacks():
    clock = Clock()
    calm = CalmFilter(RateLimit(period=30, clock=clock))
    retry = "Retrying (Retry(total=%d)) after connection broken by '%r': /apis/x"
    assert calm.filter(record(retry, 0, "NewConnectionError(...)"))
    assert not calm.filter(record(retry, 1, "NewConnectionError(...)"))  # same shape, other numbers
    assert calm.filter(record("Request attempt #3/9 failed; will retry: GET /pods -> Err(1)", name="kopf.x"))
    assert not calm.filter(record("Request attempt #4/9 failed; will retry: GET /pods -> Err(2)", name="kopf.x"))
    assert calm.filter(record("Pool is full", level=logging.INFO))  # below WARNING: untouched
    clock.now = 31
    held = record(retry, 2, "x")
    assert calm.filter(held)
    assert "[1 similar lines held back]" in held.getMessage()

    failed = record("Watcher for %s has failed", "pods", name="kopf.tasks", exc=OSError("connection reset"))
    assert calm.filter(failed)
    assert failed.exc_info is None and "OSError: connection reset" in failed.getMessage()


def test_calm_filter_leaves_our_own_lines_alone():
    calm = CalmFilter(RateLimit(period=30, clock=Clock()))
    assert all(calm.filter(record("reconcile failed", name="gpu_acceptance.operator")) for _ in range(3))
