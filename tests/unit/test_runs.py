"""Runs of one test: which is due, what they are named, what the history keeps, and the baseline verdict."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from acceptance_operator.building import manifests
from acceptance_operator.judging.verdict import regressions
from acceptance_operator.resource import runs
from acceptance_operator.resource.api import AcceptanceTest, AcceptanceTestSpec, HistoryEntry, Summary
from acceptance_operator.resource.schedule import last_slot, next_slot, schedule_problem
from pydantic import ValidationError

NOW = datetime(2026, 11, 26, 9, 30, 10, tzinfo=timezone.utc)


def test_a_new_spec_starts_its_first_run_and_stops_nothing_else_until_it_finishes():
    first = runs.due(None, False, 3, "a", None, None, NOW)
    assert (first.id, first.trigger, first.rerun) == ("g3", "spec", "a")
    assert runs.due(first, False, 3, "b", "* * * * *", NOW - timedelta(hours=1), NOW) is None  # waits for it
    again = runs.due(first, True, 4, "a", None, None, NOW)  # a new spec, even mid-run
    assert (again.id, again.trigger) == ("g4", "spec")


def test_a_new_rerun_value_starts_the_next_run_of_the_same_generation():
    first = runs.first_run(2, None)
    rerun = runs.due(first, True, 2, "x", None, NOW, NOW)
    assert (rerun.id, rerun.attempt, rerun.trigger, rerun.rerun) == ("g2-r2", 2, "rerun", "x")
    assert runs.due(rerun, True, 2, "x", None, NOW, NOW) is None  # the same value asks for nothing more
    assert runs.due(rerun, True, 2, "y", None, NOW, NOW).id == "g2-r3"


def test_a_schedule_slot_after_the_last_start_is_due_once():
    first = runs.first_run(1, None)
    started = datetime(2026, 11, 26, 8, 59, tzinfo=timezone.utc)
    due = runs.due(first, True, 1, None, "0 * * * *", started, NOW)
    assert (due.id, due.trigger, due.scheduled_for) == ("g1-r2", "schedule", datetime(2026, 11, 26, 9, 0,
                                                                                      tzinfo=timezone.utc))
    # Started after the 09:00 slot: nothing until 10:00, however many slots an outage skipped before.
    assert runs.due(due, True, 1, None, "0 * * * *", NOW - timedelta(minutes=5), NOW) is None
    a_week_later = NOW + timedelta(days=7)
    assert runs.due(due, True, 1, None, "0 * * * *", NOW, a_week_later).scheduled_for == datetime(
        2026, 12, 3, 9, 0, tzinfo=timezone.utc)
    assert runs.seconds_to_next_slot("0 * * * *", NOW) == 29 * 60 + 50
    assert runs.seconds_to_next_slot(None, NOW) is None


def test_schedule_slots_are_utc_minutes():
    assert last_slot("30 9 * * *", NOW) == datetime(2026, 11, 26, 9, 30, tzinfo=timezone.utc)
    assert next_slot("30 9 * * *", NOW) == datetime(2026, 11, 27, 9, 30, tzinfo=timezone.utc)
    assert schedule_problem("*/15 * * * *") is None


@pytest.mark.parametrize("bad", ["0 3 * *", "61 * * * *", "0 0 30 2 *", "daily"])
def test_a_bad_schedule_is_refused_saying_what_a_schedule_looks_like(bad):
    with pytest.raises(ValidationError) as e:
        AcceptanceTestSpec.model_validate({"schedule": bad})
    assert "is not a cron schedule" in str(e.value) and "'0 3 * * *'" in str(e.value)


def test_children_names_and_labels_follow_the_run():
    test = AcceptanceTest.model_validate({"metadata": {"name": "n" * 63, "generation": 12, "uid": "u"}})
    first, later = runs.first_run(12, None), runs.due(runs.first_run(12, None), True, 12, "x", None, NOW, NOW)
    names = [manifests.job_name(runs.with_run(test, r)) for r in (first, later)]
    assert len(set(names)) == 2 and all(len(n) <= manifests.MAX_CHILD_NAME for n in names)
    assert names[0].endswith("-g12") and names[1].endswith("-g12-r2")
    on_rerun = runs.with_run(test, later)
    assert manifests.test_labels(on_rerun)[manifests.LABEL_RUN] == "g12-r2"
    assert manifests.build_workload_config(on_rerun).test.run == "g12-r2"
    assert all(len(v) <= 63 for v in manifests.test_labels(on_rerun).values())
    short = AcceptanceTest.model_validate({"metadata": {"name": "t", "generation": 1}})
    assert manifests.job_name(short) == "t-g1"  # the first run keeps the name runs always had


def entry(run_id: str, result: str, busbw: float | None = None, ddp: float | None = None) -> HistoryEntry:
    return HistoryEntry(id=run_id, result=result, all_reduce_busbw_gbps=busbw, ddp_throughput_per_gpu=ddp)


def test_history_keeps_the_last_runs_and_replaces_a_rewritten_one():
    history: list[dict] = []
    for i in range(1, 6):
        history = runs.with_entry(history, entry(f"g1-r{i}", "Passed"), 3)
    assert [h["id"] for h in history] == ["g1-r3", "g1-r4", "g1-r5"]
    history = runs.with_entry(history, entry("g1-r5", "Failed"), 3)
    assert [(h["id"], h["result"]) for h in history][-1] == ("g1-r5", "Failed") and len(history) == 3
    assert runs.with_entry(history, entry("g2", "Passed"), 0) == []


def test_history_entry_clips_failed_nodes_and_keeps_their_count():
    summary = Summary(result="Failed", failed_nodes=[f"node-{i}" for i in range(40)], all_reduce_busbw_gbps=1.0)
    e = runs.history_entry(runs.first_run(1, None), NOW, NOW, summary, "ChecksFailed")
    assert len(e.failed_nodes) == 16 and e.failed_node_count == 40 and e.reason == "ChecksFailed"


def test_the_baseline_is_the_last_passed_run():
    history = [entry("g1", "Passed", 370).to_wire(), entry("g1-r2", "Passed", 360).to_wire(),
               entry("g1-r3", "Failed", 100).to_wire(), {"id": "junk"}]
    assert runs.baseline(history).id == "g1-r2"
    assert runs.baseline([entry("g1", "Failed").to_wire()]) is None


def test_a_drop_beyond_the_tolerance_names_the_metric_and_both_values():
    base = entry("g1", "Passed", 370.0, 300000.0)
    now = Summary(result="Passed", all_reduce_busbw_gbps=330.0, ddp_throughput_per_gpu=290000.0,
                  ddp_throughput_unit="tokens/s")
    found = regressions(now, base, 5.0)
    assert found == ["all_reduce busbw 330 GB/s is 10.8% under baseline run g1's 370 GB/s "
                     "(spec.regressionTolerance 5%)"]
    assert regressions(now, base, 11.0) == []
    slow_ddp = now.model_copy(update={"all_reduce_busbw_gbps": 371.0, "ddp_throughput_per_gpu": 270000.0})
    assert regressions(slow_ddp, base, 5.0) == [
        "DDP throughput per GPU 270000 tokens/s is 10.0% under baseline run g1's 300000 tokens/s "
        "(spec.regressionTolerance 5%)"]
    # Not measured now: not compared (the check fails closed on its own); no baseline: nothing to compare.
    assert regressions(Summary(result="Passed"), base, 5.0) == []
    assert regressions(now, None, 5.0) == []
