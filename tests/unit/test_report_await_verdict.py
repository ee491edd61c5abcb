"""`gpu-acceptance report NAME --deliver FILE` waits for the operator's verdict on the run it delivered for
(report_cli.await_verdict). The cluster tests (test_operator_runs.py, test_operator_evidence.py) drive the judged
and rejected answers through a real operator; the two answers an operator cannot be made to give on cue are here:
the test moving on to another run while the CLI waits, and no verdict before --wait runs out. The test object is
read through a stand-in that returns the states a real test passes through, one a read.
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest
from acceptance_operator import report_cli
from acceptance_workload.contract import exits

RUN = "g1-r2"


def state(run: str, phase: str, *conditions: dict) -> dict:
    return {"metadata": {"name": "t"}, "status": {"run": {"id": run}, "phase": phase, "conditions": list(conditions)}}


RUNNING = {"type": "Running", "status": "True", "reason": "JobRunning", "message": "2 of 2 pods running"}


class Clock:
    """time.monotonic and time.sleep for report_cli: sleeping moves the clock, so --wait is counted in reads."""

    def __init__(self) -> None:
        self.now, self.slept = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(report_cli, "time", types.SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
    return c


def reads(*states: dict | None) -> tuple[list[int], object]:
    """A read function returning `states` one a call, then the last one again; and how many reads it served."""
    served = [0]
    it: Iterator[dict | None] = iter(states)

    def read() -> dict | None:
        served[0] += 1
        return next(it, states[-1])
    return served, read


def test_a_delivery_the_test_moved_past_while_waiting_is_ignored_and_says_so(clock: Clock):
    served, read = reads(state(RUN, "Running", RUNNING), state(RUN, "Running", RUNNING),
                         state("g1-r3", "Pending"))
    code, text = report_cli.await_verdict(read, RUN, 60, sleep=clock.sleep)
    assert code == exits.NO
    assert text == ("the operator ignored the delivery: the test is on run g1-r3 now, the report was for run g1-r2; "
                    "deliver it again for the current run")
    assert served[0] == 3 and clock.slept == [0.5, 0.5]


def test_a_run_that_ends_on_another_run_is_ignored_not_its_verdict_taken(clock: Clock):
    """The new run's verdict is not the delivered run's: a Succeeded g1-r3 does not make a g1-r2 delivery judged."""
    succeeded = {"type": "Succeeded", "status": "True", "reason": "ChecksPassed", "message": "all checks passed"}
    _, read = reads(state("g1-r3", "Succeeded", succeeded))
    code, text = report_cli.await_verdict(read, RUN, 60, sleep=clock.sleep)
    assert code == exits.NO and text.startswith("the operator ignored the delivery: the test is on run g1-r3 now")


def test_no_verdict_within_the_wait_is_exit_one_with_the_phase_and_what_is_running(clock: Clock):
    served, read = reads(state(RUN, "Running", RUNNING))
    code, text = report_cli.await_verdict(read, RUN, 5, sleep=clock.sleep)
    assert code == exits.NO
    assert text == ("no verdict on run g1-r2 within 5s (phase Running: 2 of 2 pods running): is the operator "
                    "running? (--wait sets how long to wait)")
    assert sum(clock.slept) == 5 and served[0] == 11  # it kept reading until the wait ran out, not once


def test_no_verdict_and_no_status_yet_says_phase_none(clock: Clock):
    _, read = reads({"metadata": {"name": "t"}})
    code, text = report_cli.await_verdict(read, RUN, 1.5, sleep=clock.sleep)
    assert code == exits.NO
    assert text == ("no verdict on run g1-r2 within 1.5s (phase none): is the operator running? "
                    "(--wait sets how long to wait)")


def test_a_verdict_that_comes_before_the_wait_runs_out_is_taken(clock: Clock):
    """The counterpart of the timeout: the same waiting loop returns the verdict once the operator writes it."""
    failed = {"type": "Succeeded", "status": "False", "reason": "ChecksFailed", "message": "node-3: all_reduce low"}
    _, read = reads(state(RUN, "Running", RUNNING), state(RUN, "Running", RUNNING), state(RUN, "Failed", failed))
    code, text = report_cli.await_verdict(read, RUN, 5, sleep=clock.sleep)
    assert code == exits.YES
    assert text == "the operator's verdict on run g1-r2: Failed ChecksFailed: node-3: all_reduce low"
    assert clock.slept == [0.5, 0.5]


def test_a_test_deleted_while_waiting_cannot_be_judged(clock: Clock):
    _, read = reads(state(RUN, "Running", RUNNING), None)
    code, text = report_cli.await_verdict(read, RUN, 5, sleep=clock.sleep)
    assert (code, text) == (exits.CANNOT, "the test was deleted before the operator judged the delivery")
