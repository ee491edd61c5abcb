"""spec.schedule: cron expressions in UTC, read with cronsim (the operator extra installs it).

A scheduled test has at most one run due at a time: the latest slot at or
before now that came after the last run started. Slots missed while the
operator was down, or while a run was still going, are not replayed one by
one: they collapse into that one run, started as soon as the operator sees it
(a kubelet-like "catch up once", never a backlog).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from cronsim import CronSim, CronSimError

MAX_SCHEDULE = 128  # characters
# How far back a slot is looked for: a yearly schedule with a run older than this simply runs again.
LOOK_BACK = timedelta(days=400)



def _field(value: str, extra: str = "") -> str:
    """One cron field: a comma list of *, a value or a range, each with an optional /step (and `extra` forms)."""
    item = rf"((\*|{value}(-{value})?)(/[1-9][0-9]?)?{extra})"
    return rf"{item}(,{item})*"


_MONTHS = "JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC"
_DAYS = "SUN|MON|TUE|WED|THU|FRI|SAT"
# The syntax the CRD checks at admission (RE2 and Python alike): exactly five fields, each value in its range.
# cronsim reads a sixth field as seconds, so six are refused here. What a pattern cannot see (a range written
# backwards, a day that never comes: '0 0 31 2 *') cronsim refuses: the operator ends such a test as InvalidSpec.
CRON_PATTERN = (r"(?i)^\s*" + r"\s+".join([
    _field(r"[0-5]?[0-9]"),
    _field(r"([01]?[0-9]|2[0-3])"),
    _field(r"(0?[1-9]|[12][0-9]|3[01])", "|L"),
    _field(rf"(0?[1-9]|1[0-2]|{_MONTHS})"),
    _field(rf"([0-7]|{_DAYS})", r"|([0-7]|" + _DAYS + r")(L|#[1-5])"),
]) + r"\s*$")
_CRON = re.compile(CRON_PATTERN)


def schedule_problem(expression: str) -> str | None:
    """Why `expression` is not a five-field cron schedule cronsim understands; None when it is."""
    try:
        if not _CRON.match(expression):
            raise CronSimError(f"{len(expression.split())} fields" if len(expression.split()) != 5
                               else "a field is out of its range")
        next(CronSim(expression, datetime(2000, 1, 1, tzinfo=timezone.utc)))
    except (CronSimError, StopIteration) as e:
        return (f"{expression!r} is not a cron schedule ({e or 'it never fires'}): five fields, minute hour "
                "day-of-month month day-of-week, in UTC, e.g. '0 3 * * *' for 03:00 every day")
    return None


def _utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(second=0, microsecond=0)


def last_slot(expression: str, now: datetime) -> datetime | None:
    """The latest time at or before `now` the schedule fires (None if not within LOOK_BACK)."""
    start = _utc(now) + timedelta(minutes=1)  # cronsim's reverse iteration excludes its start minute
    for slot in CronSim(expression, start, reverse=True):
        return slot if now - slot <= LOOK_BACK else None
    return None


def next_slot(expression: str, now: datetime) -> datetime:
    """The first time after `now` the schedule fires."""
    return next(CronSim(expression, _utc(now)))
