"""Two leaders at once, seen from outside: the one test both leader watches (tests/cluster, tests/e2e) apply."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def leading_at_once(leading: Sequence[T], leads: Callable[[T], bool]) -> list[T]:
    """Of `leading` (the replicas one pass of reads, one after the other, found leading), those that led at one same
    moment (none or one: []).

    Why not the pass alone: its reads can straddle a handover (the old leader read before it stepped down, its
    successor after it took over, 0.1 s later on a loaded machine) and look like two leaders. They are read again
    in reverse order, and only those that said they lead in both passes count: their read times nest (the first
    read first and last), and leadership is one stretch of time, so they did lead at once."""
    if len(leading) < 2:
        return []
    again = [r for r in reversed(leading) if leads(r)]
    return again if len(again) > 1 else []
