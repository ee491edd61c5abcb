"""Conditions follow metav1.Condition semantics: lastTransitionTime moves only when the status flips."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from acceptance_operator.resource.conditions import (
    BACKEND_NOT_INSTALLED,
    INVALID_SPEC,
    JOB_CREATED,
    RUNNING,
    SUCCEEDED,
    TIMEOUT,
    RunState,
    conditions_for,
    find,
    set_condition,
)

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)
T2 = T0 + timedelta(minutes=9)


def test_new_condition_gets_now_and_generation():
    out = set_condition([], RUNNING, "Unknown", "Pending", "waiting", 3, T0)
    (c,) = out
    assert (c.type, c.status, c.reason, c.message, c.observed_generation) == (RUNNING, "Unknown", "Pending",
                                                                              "waiting", 3)
    assert c.last_transition_time == T0


def test_same_status_keeps_transition_time_but_updates_reason_message_and_generation():
    first = set_condition([], RUNNING, "True", "JobRunning", "1 Running", 1, T0)
    second = set_condition(first, RUNNING, "True", "JobRunning", "2 Running", 2, T1)
    (c,) = second
    assert c.last_transition_time == T0
    assert (c.message, c.observed_generation) == ("2 Running", 2)


def test_flip_moves_transition_time():
    first = set_condition([], SUCCEEDED, "Unknown", "InProgress", "", 1, T0)
    second = set_condition(first, SUCCEEDED, "False", TIMEOUT, "too slow", 1, T1)
    assert find(second, SUCCEEDED).last_transition_time == T1


def test_transition_time_is_whole_seconds():
    out = set_condition([], RUNNING, "True", "r", "", 1, T0.replace(microsecond=123456))
    assert out[0].last_transition_time.microsecond == 0


def test_conditions_keep_a_stable_order_and_other_types():
    out = set_condition([], SUCCEEDED, "Unknown", "InProgress", "", 1, T0)
    out = set_condition(out, "Custom", "True", "x", "", 1, T0)
    out = set_condition(out, JOB_CREATED, "True", "Created", "", 1, T0)
    assert [c.type for c in out] == [JOB_CREATED, SUCCEEDED, "Custom"]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (RunState("Pending", "JobCreated", "waiting"), {JOB_CREATED: "True", RUNNING: "Unknown", SUCCEEDED: "Unknown"}),
        (RunState("Running", "JobRunning", "2 Running"), {JOB_CREATED: "True", RUNNING: "True", SUCCEEDED: "Unknown"}),
        (RunState("Succeeded", "ChecksPassed", "ok"), {JOB_CREATED: "True", RUNNING: "False", SUCCEEDED: "True"}),
        (RunState("Failed", TIMEOUT, "late"), {JOB_CREATED: "True", RUNNING: "False", SUCCEEDED: "False"}),
        (RunState("Failed", INVALID_SPEC, "bad"), {JOB_CREATED: "False", RUNNING: "False", SUCCEEDED: "False"}),
        (RunState("Failed", BACKEND_NOT_INSTALLED, "no"),
         {JOB_CREATED: "False", RUNNING: "False", SUCCEEDED: "False"}),
    ],
)
def test_conditions_agree_with_the_phase(state, expected):
    out = conditions_for(state, "PyTorchJob t-g1", [], 4, T0)
    assert {c.type: c.status for c in out} == expected
    assert all(c.observed_generation == 4 for c in out)
    assert state.terminal == (state.phase in ("Succeeded", "Failed"))


def test_failure_reason_and_message_land_on_succeeded_condition():
    out = conditions_for(RunState("Failed", TIMEOUT, "no verdict within 60s"), "PyTorchJob t-g1", [], 1, T0)
    c = find(out, SUCCEEDED)
    assert (c.reason, c.message) == (TIMEOUT, "no verdict within 60s")
    assert find(out, JOB_CREATED).message == "PyTorchJob t-g1 created"


def test_a_run_story_moves_each_condition_only_when_it_flips():
    pending = conditions_for(RunState("Pending", "JobCreated", "w"), "job", [], 1, T0)
    running = conditions_for(RunState("Running", "JobRunning", "r"), "job", pending, 1, T1)
    done = conditions_for(RunState("Succeeded", "ChecksPassed", "ok"), "job", running, 1, T2)
    assert find(done, JOB_CREATED).last_transition_time == T0  # True all along
    assert find(running, RUNNING).last_transition_time == T1  # Unknown -> True
    assert find(done, RUNNING).last_transition_time == T2  # True -> False
    assert find(running, SUCCEEDED).last_transition_time == T0  # Unknown twice
    assert find(done, SUCCEEDED).last_transition_time == T2
