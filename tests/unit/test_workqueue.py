"""The reconcile queue: a key once however often it is added, never on two workers, due keys on time."""

from __future__ import annotations

import threading
import time

from acceptance_operator.plumbing.workqueue import WorkQueue, start_workers


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_key_added_many_times_is_processed_once():
    q: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a", "b"):
        q.add(key)
    assert [q.get(timeout=0), q.get(timeout=0), q.get(timeout=0)] == ["a", "b", None]


def test_a_key_added_while_processed_comes_back_after_done_not_to_a_second_worker():
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")  # an event arrives while a worker reconciles "a"
    assert q.get(timeout=0) is None  # no second worker gets it meanwhile
    q.done("a")
    assert q.get(timeout=0) == "a"
    q.done("a")
    assert q.get(timeout=0) is None


def test_add_after_is_due_at_its_time_and_the_earliest_schedule_wins():
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 10)
    q.add_after("a", 30)  # later: ignored
    q.add_after("b", 5)
    assert q.get(timeout=0) is None
    assert len(q) == 2
    clock.now += 5
    assert q.get(timeout=0) == "b"
    clock.now += 5
    assert q.get(timeout=0) == "a"
    clock.now += 100
    assert q.get(timeout=0) is None  # the ignored later schedule does not fire again


def test_an_earlier_schedule_replaces_a_later_one_and_forget_drops_it():
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 300)  # the slow resync
    q.add_after("a", 1)  # a deadline sooner
    clock.now += 1
    assert q.get(timeout=0) == "a"
    q.done("a")
    q.add_after("b", 1)
    q.forget("b")  # the test was deleted
    clock.now += 10
    assert q.get(timeout=0) is None


def test_workers_never_run_one_key_twice_at_once_and_stop_on_close():
    q: WorkQueue[int] = WorkQueue()
    running: set[int] = set()
    overlaps: list[int] = []
    done = []
    guard = threading.Lock()

    def work(key: int) -> None:
        with guard:
            if key in running:
                overlaps.append(key)
            running.add(key)
        time.sleep(0.002)
        with guard:
            running.discard(key)
            done.append(key)

    threads = start_workers(q, work, 4, "test")
    for _ in range(50):
        for key in range(5):
            q.add(key)
        time.sleep(0.001)
    deadline = time.monotonic() + 5
    while len(q) and time.monotonic() < deadline:
        time.sleep(0.01)
    q.close()
    for t in threads:
        t.join(timeout=5)
    assert not overlaps
    assert set(done) == set(range(5))
    assert not any(t.is_alive() for t in threads)


def test_urgent_keys_are_served_before_the_others_in_their_own_order():
    q: WorkQueue[str] = WorkQueue()
    q.add("follow-a")
    q.add("new-1", urgent=True)
    q.add("follow-b")
    q.add("new-2", urgent=True)
    assert [q.get(timeout=0) for _ in range(5)] == ["new-1", "new-2", "follow-a", "follow-b", None]


def test_a_waiting_key_that_turns_urgent_moves_up_once():
    q: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "c"):
        q.add(key)
    q.add("c", urgent=True)
    q.add("c", urgent=True)
    q.add("c")  # a later plain add does not take the urgency away
    assert [q.get(timeout=0) for _ in range(4)] == ["c", "a", "b", None]


def test_an_urgent_add_while_processed_comes_back_urgent_after_done():
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    assert q.get(timeout=0) == "a"
    q.add("a", urgent=True)
    q.done("a")
    assert [q.get(timeout=0), q.get(timeout=0)] == ["a", "b"]
    q.done("a")
    q.add("a")  # urgency is spent once served
    assert [q.get(timeout=0), q.get(timeout=0)] == ["a", None]


def test_other_keys_wait_while_urgent_ones_keep_arriving_but_not_longer_than_the_cap():
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock, burst_hold=0.25, burst_hold_max=1.0)
    q.add("follow-up")
    q.add("new-1", urgent=True)
    assert q.get(timeout=0) == "new-1"
    assert q.get(timeout=0) is None  # an urgent key came just now: more may follow
    clock.now += 0.2
    q.add("new-2", urgent=True)
    assert q.get(timeout=0) == "new-2"
    clock.now += 0.2
    assert q.get(timeout=0) is None  # 0.2 s after the last urgent key
    clock.now += 0.05
    assert q.get(timeout=0) == "follow-up"  # the burst has paused for 0.25 s
    # A steady stream of urgent keys holds the others back at most burst_hold_max
    q.add("report")
    for i in range(6):
        q.add(f"n{i}", urgent=True)
        assert q.get(timeout=0) == f"n{i}"
        clock.now += 0.2
        if i < 4:
            assert q.get(timeout=0) is None
    assert q.get(timeout=0) == "report"  # 1.2 s after it was added, 0.2 s after the last urgent key


def test_without_burst_hold_the_others_are_served_whenever_no_urgent_key_waits():
    q: WorkQueue[str] = WorkQueue()
    q.add("follow-up")
    q.add("new", urgent=True)
    assert [q.get(timeout=0), q.get(timeout=0)] == ["new", "follow-up"]
