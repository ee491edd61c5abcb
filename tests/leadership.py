"""Two leaders at once, seen from outside: the one test both leader watches (tests/cluster, tests/e2e) apply."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def leading_at_once(replicas: Sequence[T], leads: Callable[[T], bool]) -> list[T]:
    """The replicas that led at one same moment (none or one: []), from reads taken one after the other.

    Why not one pass: its reads can straddle a handover (the old leader read before it stepped down, its successor
    after it took over, 0.1 s later on a loaded machine) and look like two leaders. When a pass finds more than
    one, they are read again in reverse order, and only those that said they lead in both passes count: their read
    times nest (the first read first and last), and leadership is one stretch of time, so they did lead at once."""
    first = [r for r in replicas if leads(r)]
    if len(first) < 2:
        return []
    again = [r for r in reversed(first) if leads(r)]
    return again if len(again) > 1 else []
