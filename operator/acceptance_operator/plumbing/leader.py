"""Who reconciles: the leader lease's timing rules, as a pure state machine that takes times (no API, no sleeping).

Several operator replicas (the chart's two, or operators started by hand)
share one coordination.k8s.io/v1 Lease; only its holder reconciles. The rules
are client-go's leader election (what controller-runtime operators use):

- A replica that sees the lease held by another waits until the lease's
  record has not changed for leaseDurationSeconds *of its own clock*
  (observed time, never the renewTime written by another machine's clock:
  clocks may differ), then takes it over with a write that carries the
  record's resourceVersion, so of two replicas that try at once one wins.
- The holder renews every retry period. Its leadership lasts until
  renewDeadline after the start of its last successful write; a holder that
  could not renew by then stops reconciling. Every other replica counts
  leaseDuration from when it *read* that write, which is later than the
  write was sent: with renewDeadline < leaseDuration the old leader has
  stopped at least leaseDuration - renewDeadline before another may start.
- An empty holder is a released lease (a clean shutdown): anyone takes it at once.

The defaults are controller-runtime's (15 s / 10 s / 2 s): a crashed leader
is replaced within leaseDuration + two retry periods (13-19 s: its last
renewal and the standby's read of it may each be a retry period old), a clean
shutdown (a rolling update) within one retry period, the lease costs one
read and one write per retry period per replica, and a holder has 5 s
between its deadline and anyone else's start for work in flight to end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Action = Literal["create", "acquire", "renew", "wait"]
LEASE_NAME = "gpu-acceptance-operator"


@dataclass(frozen=True)
class LeaseTiming:
    """Seconds: how long a record holds (duration), how long a holder may fail to renew before it stops
    (renew_deadline), and how often every replica tries (retry_period)."""

    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """What makes these timings unsafe, as lines naming the settings; [] when they are usable."""
        out = []
        if self.retry_period <= 0:
            out.append("the lease's retry period must be above 0 seconds")
        if self.renew_deadline <= self.retry_period:
            out.append(f"the lease's renew deadline ({self.renew_deadline:g}s) must be longer than its retry period "
                       f"({self.retry_period:g}s): a holder must get more than one try to renew")
        if self.duration <= self.renew_deadline:
            out.append(f"the lease's duration ({self.duration:g}s) must be longer than its renew deadline "
                       f"({self.renew_deadline:g}s): a holder that cannot renew must stop before another may start")
        return out

    @property
    def drain_seconds(self) -> float:
        """How long work in flight may go on after the holder's deadline before another replica may start."""
        return self.duration - self.renew_deadline


@dataclass(frozen=True)
class LeaseRecord:
    """What the Lease says (spec.holderIdentity, ...) and its resourceVersion, the precondition of a write."""

    holder: str | None
    duration_seconds: float | None
    renew_time: str | None
    acquire_time: str | None
    transitions: int
    version: str | None

    @property
    def stamp(self) -> tuple[str | None, str | None, str | None]:
        """What changes with every write of the record: a new stamp restarts the observer's clock."""
        return (self.holder, self.renew_time, self.version)


class Elector:
    """One replica's view of the lease: what to do next (decide), and until when it leads (leading_until)."""

    def __init__(self, identity: str, timing: LeaseTiming) -> None:
        self.identity, self.timing = identity, timing
        self._stamp: tuple[str | None, str | None, str | None] | None = None
        self._seen_at = 0.0  # when this replica first read the record with _stamp
        self._until = float("-inf")  # this replica leads while now < _until
        self.leader: str | None = None  # the holder named by the last record read (None: nobody, or unknown)

    def observe(self, record: LeaseRecord | None, now: float) -> bool:
        """A record just read (None: there is no Lease); True when it names another leader than before."""
        stamp = record.stamp if record is not None else None
        if stamp != self._stamp:
            self._stamp, self._seen_at = stamp, now
        holder = (record.holder or None) if record is not None else None
        changed = holder != self.leader
        self.leader = holder
        return changed

    def expired(self, record: LeaseRecord, now: float) -> bool:
        """The holder has not written the record for its whole duration, by this replica's clock."""
        duration = record.duration_seconds or self.timing.duration
        return now - self._seen_at >= duration

    def decide(self, record: LeaseRecord | None, now: float) -> Action:
        """What to write now, given the record just observed (observe() first)."""
        if record is None:
            return "create"
        if record.holder == self.identity:
            return "renew"
        if not record.holder or self.expired(record, now):
            return "acquire"
        return "wait"

    def wrote(self, sent_at: float) -> float:
        """Our create/acquire/renew, sent at `sent_at`, succeeded: we lead until the returned time."""
        self._until = sent_at + self.timing.renew_deadline
        self.leader = self.identity
        return self._until

    def leading(self, now: float) -> bool:
        return now < self._until

    def leading_until(self) -> float:
        return self._until

    def step_down(self) -> None:
        """Stop leading now (a clean shutdown, or a write another replica won)."""
        self._until = float("-inf")

    def next_try(self, now: float) -> float:
        """Seconds until the next read/write: the retry period, or sooner when the leadership ends before it."""
        wait = self.timing.retry_period
        if self.leading(now):
            wait = min(wait, max(0.0, self._until - now))
        return wait
