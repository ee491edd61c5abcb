"""The leader lease's rules (leader.Elector, election.Gate/Election) on a fake clock: no sleeping, no API server."""

from __future__ import annotations

import copy
import threading

import pytest
from acceptance_operator.plumbing.election import Election, Gate, record_of, written_lease
from acceptance_operator.plumbing.leader import Elector, LeaseRecord, LeaseTiming
from acceptance_operator.plumbing.metrics import OperatorMetrics
from kubernetes.client.exceptions import ApiException

T = LeaseTiming()  # 15 s / 10 s / 2 s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def held_by(holder: str | None, renewed: str, version: str = "1") -> LeaseRecord:
    return LeaseRecord(holder=holder, duration_seconds=15, renew_time=renewed, acquire_time="t0", transitions=0,
                       version=version)


def test_default_timings_are_safe_and_unsafe_ones_are_named():
    assert T.problems() == [] and T.drain_seconds == 5
    assert "longer than its renew deadline" in LeaseTiming(10, 10, 2).problems()[0]
    assert "longer than its retry period" in LeaseTiming(15, 2, 2).problems()[0]


def test_a_standby_takes_over_only_after_the_record_stood_still_for_the_duration_by_its_own_clock():
    e = Elector("b", T)
    e.observe(held_by("a", "12:00:00"), now=100.0)
    assert e.decide(held_by("a", "12:00:00"), now=100.0) == "wait"
    e.observe(held_by("a", "12:00:00"), now=114.9)
    assert e.decide(held_by("a", "12:00:00"), now=114.9) == "wait"
    # The holder renews: the standby's count starts again from when it read the new record.
    e.observe(held_by("a", "12:00:02", "2"), now=114.9)
    assert e.decide(held_by("a", "12:00:02", "2"), now=129.8) == "wait"
    assert e.decide(held_by("a", "12:00:02", "2"), now=129.9) == "acquire"


def test_a_renew_time_far_in_the_future_changes_nothing_a_skewed_clock_cannot_hold_the_lease():
    e = Elector("b", T)
    e.observe(held_by("a", "2999-01-01T00:00:00Z"), now=0.0)
    assert e.decide(held_by("a", "2999-01-01T00:00:00Z"), now=15.0) == "acquire"


def test_no_lease_a_released_one_and_ones_own_record():
    e = Elector("b", T)
    assert e.decide(None, now=0) == "create"
    assert e.decide(held_by(None, "x"), now=0) == "acquire"  # released: at once
    assert e.decide(held_by("b", "x"), now=0) == "renew"  # a container restarted in the same pod


def test_the_leader_stops_at_its_renew_deadline_before_any_other_replica_may_start():
    """The holder counts from when it sent its last successful write; the others from when they read it (later):
    the holder has stopped leaseDuration - renewDeadline before the earliest takeover."""
    a, b = Elector("a", T), Elector("b", T)
    sent = 100.0
    until = a.wrote(sent)
    b.observe(held_by("a", "r1"), now=sent + 0.01)  # the standby reads the write right after it landed
    assert a.leading(until - 0.001) and not a.leading(until)
    earliest_takeover = next(t / 100 for t in range(10000, 20000) if b.decide(held_by("a", "r1"), t / 100) != "wait")
    assert earliest_takeover - until >= T.drain_seconds - 0.01
    assert a.next_try(until - 0.5) == 0.5  # the holder tries again before its deadline, not a whole period later


class FakeLeaseApi:
    """One Lease in memory with resourceVersion checks, and a switch that makes every call fail (an outage)."""

    def __init__(self) -> None:
        self.namespace = "ops"
        self.lease: dict | None = None
        self.version = 0
        self.down = False

    def read(self) -> dict | None:
        if self.down:
            raise ConnectionRefusedError("connection refused")
        return copy.deepcopy(self.lease)

    def write(self, lease: dict, create: bool) -> None:
        if self.down:
            raise ConnectionRefusedError("connection refused")
        if create and self.lease is not None:
            raise ApiException(status=409, reason="Conflict")
        if not create and lease["metadata"].get("resourceVersion") != str(self.version):
            raise ApiException(status=409, reason="Conflict")
        self.version += 1
        self.lease = copy.deepcopy(lease)
        self.lease["metadata"]["resourceVersion"] = str(self.version)


def election(api: FakeLeaseApi, identity: str, clock: Clock, exits: list[int] | None = None,
             lost: list[str] | None = None) -> Election:
    return Election(api, identity, T, Gate(clock), OperatorMetrics(), clock=clock,  # type: ignore[arg-type]
                    on_lose=lambda: (lost if lost is not None else []).append(identity),
                    exit_process=lambda code: (exits if exits is not None else []).append(code))


def test_two_replicas_one_leads_and_the_other_takes_over_when_the_lease_lapses():
    api, clock = FakeLeaseApi(), Clock()
    a, b = election(api, "a", clock), election(api, "b", clock)
    a.step()
    b.step()
    assert a.gate.leading() and not b.gate.leading()
    assert api.lease["spec"]["holderIdentity"] == "a" and b.status()["leader"] == "a"
    for _ in range(20):  # a renews every 2 s: b never takes over
        clock.now += 2
        a.step()
        b.step()
        assert a.gate.leading() and not b.gate.leading()
    # a dies (no more steps): b takes over once the record stood still for 15 s by b's clock, not before.
    last = clock.now
    while not b.gate.leading():
        clock.now += 0.5
        b.step()
    assert 15 <= clock.now - last <= 15.5
    assert api.lease["spec"]["holderIdentity"] == "b" and api.lease["spec"]["leaseTransitions"] == 1
    assert not a.gate.leading()  # its deadline passed long before


def test_an_outage_longer_than_the_lease_the_leader_stops_before_the_standby_may_start():
    api, clock, lost = FakeLeaseApi(), Clock(), []
    a, b = election(api, "a", clock, lost=lost), election(api, "b", clock)
    a.step()
    b.step()
    renewed = clock.now
    api.down = True
    stopped = None
    for _ in range(60):  # 30 s down, every replica trying every 0.5 s
        clock.now += 0.5
        a.step()
        b.step()
        if stopped is None and a.gate.lapsed():
            stopped = clock.now
    assert stopped is not None and stopped - renewed <= T.renew_deadline + 0.5
    assert a.problem and "connection refused" in a.problem
    api.down = False
    # Back: the record stood still for 30 s by b's clock (its reads failed meanwhile), so b takes over at once, as
    # client-go's elector does; a, stopped 20 s ago, reads b's record and stands by.
    b.step()
    a.step()
    assert b.gate.leading() and not a.gate.leading() and api.lease["spec"]["holderIdentity"] == "b"
    assert a.status()["leader"] == "b"


def test_a_takeover_race_has_one_winner():
    api, clock = FakeLeaseApi(), Clock()
    a, b = election(api, "a", clock), election(api, "b", clock)
    lease = api.read()
    a.elector.observe(None, clock.now)
    b.elector.observe(None, clock.now)
    api.write(written_lease("create", lease, "a", "ops", T, "now"), create=True)  # a's create lands first
    with pytest.raises(ApiException):
        api.write(written_lease("create", lease, "b", "ops", T, "now"), create=True)
    b.step()
    assert not b.gate.leading() and b.status()["leader"] == "a"


def test_the_gate_refuses_new_work_at_the_deadline_and_the_fence_exits_if_work_outlives_the_drain_time():
    clock = Clock()
    gate = Gate(clock)
    gate.extend(clock.now + 10)
    assert gate.begin()  # a reconcile in flight
    clock.now += 10
    assert not gate.begin()  # no new one after the deadline, whatever the lease thread does
    assert gate.lapsed() and not gate.lapsed()  # told once
    assert not gate.wait_idle(clock.now)  # still busy
    gate.end()
    assert gate.wait_idle(clock.now)


def test_a_clean_stop_gives_the_lease_back_and_the_standby_takes_it_at_its_next_try():
    api, clock = FakeLeaseApi(), Clock()
    a, b = election(api, "a", clock), election(api, "b", clock)
    a.step()
    b.step()
    a.stop()
    assert api.lease["spec"]["holderIdentity"] is None and not a.gate.leading()
    clock.now += 2
    b.step()
    assert b.gate.leading() and api.lease["spec"]["holderIdentity"] == "b"


def test_a_stopping_leader_shows_0_before_it_gives_the_lease_back():
    """Its gauge reads 0 as it stops reconciling: the write that releases the lease already sees 0, so a scrape
    never finds it and the replica that takes over both at 1."""
    seen: list[float] = []

    class Watching(FakeLeaseApi):
        def write(self, lease: dict, create: bool) -> None:
            if lease["spec"]["holderIdentity"] is None:  # the release
                seen.append(a.metrics.leader._value.get())
            super().write(lease, create)

    api, clock = Watching(), Clock()
    a = election(api, "a", clock)
    a.step()
    assert a.gate.leading() and a.metrics.leader._value.get() == 1
    a.stop()
    assert seen == [0] and api.lease["spec"]["holderIdentity"] is None


def test_a_leader_stopping_without_giving_the_lease_back_shows_0_and_leaves_the_lease_to_expire():
    api, clock = FakeLeaseApi(), Clock()
    a = election(api, "a", clock)
    a.step()
    a.stop(release=False)
    assert api.lease["spec"]["holderIdentity"] == "a"  # left to expire
    assert a.metrics.leader._value.get() == 0 and not a.gate.leading()


def test_a_forbidden_lease_names_the_missing_grant():
    class Forbidden(FakeLeaseApi):
        def read(self) -> dict | None:
            raise ApiException(status=403, reason="Forbidden")

    e = election(Forbidden(), "a", Clock())
    e.step()
    assert not e.gate.leading()
    assert "get, create and update on leases in namespace ops" in (e.problem or "")


def test_workers_work_only_while_the_gate_is_open():
    from acceptance_operator.plumbing.workqueue import WorkQueue, start_workers

    gate, queue, done = Gate(), WorkQueue(), []
    worked = threading.Event()
    start_workers(queue, lambda key: (done.append(key), worked.set()), 2, "t", gate=gate)
    queue.add("k1")
    assert not worked.wait(0.3) and done == []  # standing by: the key waits in the queue
    gate.extend(float("inf"))
    assert worked.wait(5) and done == ["k1"]
    gate.close()
    queue.close()


def test_record_of_reads_what_the_api_server_stores():
    lease = written_lease("create", None, "a", "ops", T, "2026-01-01T00:00:00.000000Z")
    lease["metadata"]["resourceVersion"] = "7"
    assert record_of(lease) == LeaseRecord("a", 15.0, "2026-01-01T00:00:00.000000Z",
                                           "2026-01-01T00:00:00.000000Z", 0, "7")


def test_a_standby_exports_its_own_state_only_and_the_leader_everything():
    """Two replicas exporting the same test and node series would double every sum and alert: the standby keeps
    them (current at takeover) but shows only its process's families."""
    from prometheus_client import generate_latest

    api, clock = FakeLeaseApi(), Clock()
    a, b = election(api, "a", clock), election(api, "b", clock)
    for e in (a, b):
        e.metrics.standby = True  # as start() sets it
        e.metrics.set_phase("lab", "t", "Running")
        e.step()
    shown = {e.identity: generate_latest(e.metrics).decode() for e in (a, b)}  # type: ignore[arg-type]
    assert 'gpu_acceptance_test_phase{name="t",namespace="lab",phase="Running"} 1.0' in shown["a"]
    assert "gpu_acceptance_test_phase" not in shown["b"]
    assert "gpu_acceptance_operator_leader 0.0" in shown["b"] and "gpu_acceptance_runs_total" in shown["b"]
    assert b.metrics.phase.labels(namespace="lab", name="t", phase="Running")._value.get() == 1  # kept, not shown
