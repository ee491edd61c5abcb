"""spec.schedule: cron expressions in UTC, read with cronsim (the operator extra installs it).

A scheduled test has at most one run due at a time: the latest slot at or
before now that came after the last run started. Slots missed while the
operator was down, or while a run was still going, are not replayed one by
one: they collapse into that one run, started as soon as the operator sees it
(a kubelet-like "catch up once", never a backlog).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cronsim import CronSim, CronSimError

MAX_SCHEDULE = 128  # characters
# How far back a slot is looked for: a yearly schedule with a run older than this simply runs again.
LOOK_BACK = timedelta(days=400)


def schedule_problem(expression: str) -> str | None:
    """Why `expression` is not a cron schedule cronsim understands; None when it is."""
    try:
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
