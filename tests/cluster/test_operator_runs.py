"""Runs of one test against the real API server: reruns, schedules, history and the baseline verdict.

The test plays Kubeflow and the workload (a report carries the run id, as the
workload's config says); the operator is the real `gpu-acceptance operator`.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from tests.cluster.operator_harness import MERGE, Cluster, OperatorProcess, report

RERUN = "gpu-acceptance.io/rerun"


def annotate(cluster: Cluster, name: str, value: str) -> None:
    cluster.server.request("PATCH", cluster.test_path(name), {"metadata": {"annotations": {RERUN: value}}},
                           content_type=MERGE)


def wait_run(cluster: Cluster, name: str, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """The status once the operator has started run `run_id` (its job exists)."""
    status = cluster.wait(lambda: (s := cluster.status(name)).get("run", {}).get("id") == run_id and s,
                          f"run {run_id} of {name} to start", timeout=timeout)
    cluster.wait_job("PyTorchJob", f"{name}-{run_id}")
    return status


def finish(cluster: Cluster, name: str, phase: str, busbw: float = 371.5) -> dict[str, Any]:
    """Deliver the current run's report as rank 0 would and wait for that run's verdict in status.history.

    (Not status.phase: a rerun asked for meanwhile starts as soon as the verdict is written.)
    """
    run_id = cluster.status(name)["run"]["id"]
    cluster.write_report(name, report(1, busbw=busbw))
    result = {"Succeeded": "Passed", "Failed": "Failed"}[phase]
    return cluster.wait(lambda: (s := cluster.status(name)) and any(
        h["id"] == run_id and h["result"] == result for h in s.get("history") or []) and s,
        f"run {run_id} to end {phase}")


def test_a_rerun_annotation_starts_a_new_run_after_the_running_one(cluster: Cluster):
    cluster.create_test("again", {"nodes": 1})
    wait_run(cluster, "again", "g1")
    first = finish(cluster, "again", "Succeeded")
    assert [h["id"] for h in first["history"]] == ["g1"]
    assert not cluster.exists(cluster.service_account_path("again-workload"))

    annotate(cluster, "again", "one")
    status = wait_run(cluster, "again", "g1-r2")
    assert status["run"]["trigger"] == "rerun" and status["run"]["rerun"] == "one"
    assert status["phase"] == "Pending" and status["observedGeneration"] == 1
    job = cluster.job("PyTorchJob", "again-g1-r2")
    assert job["metadata"]["labels"]["gpu-acceptance.io/run"] == "g1-r2"
    # The workload's identity is back for this run, its Role naming this run's evidence only.
    role = cluster.server.request("GET", cluster.role_path("again-workload"))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"],
                              "resourceNames": ["again-evidence-job", "again-evidence-0"]}]
    # The earlier run's report is still in status.report: it is ignored, not judged as this run's.
    assert cluster.status("again")["phase"] == "Pending"

    annotate(cluster, "again", "two")  # while g1-r2 runs: it waits for it
    assert cluster.status("again")["run"]["id"] == "g1-r2"
    second = finish(cluster, "again", "Succeeded")
    assert [h["id"] for h in second["history"]][:2] == ["g1", "g1-r2"]
    third = wait_run(cluster, "again", "g1-r3")
    assert third["run"]["rerun"] == "two"
    assert cluster.job("PyTorchJob", "again-g1-r2") is not None  # the finished job stays for its logs
    done = finish(cluster, "again", "Succeeded")
    assert [(h["id"], h["result"], h["allReduceBusbwGBps"]) for h in done["history"]] == [
        ("g1", "Passed", 371.5), ("g1-r2", "Passed", 371.5), ("g1-r3", "Passed", 371.5)]
    assert all(h["trigger"] == t for h, t in zip(done["history"], ["spec", "rerun", "rerun"], strict=True))


def test_a_schedule_starts_a_run_at_its_next_slot(cluster: Cluster):
    cluster.create_test("nightly", {"nodes": 1, "schedule": "* * * * *", "historyLimit": 2})
    wait_run(cluster, "nightly", "g1")
    finish(cluster, "nightly", "Succeeded")
    status = wait_run(cluster, "nightly", "g1-r2", timeout=90)  # the next minute's slot
    assert status["run"]["trigger"] == "schedule"
    slot = datetime.strptime(status["run"]["scheduledFor"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert slot.second == 0 and slot >= datetime.strptime(status["history"][0]["startTime"],
                                                          "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    done = finish(cluster, "nightly", "Succeeded")
    assert [h["id"] for h in done["history"]] == ["g1", "g1-r2"]


def test_a_bad_schedule_ends_as_invalid_spec_saying_what_to_write(cluster: Cluster):
    # Five fields in range, so the CRD admits it; only cronsim sees it never fires (31 February).
    cluster.create_test("bad-cron", {"schedule": "0 0 31 2 *"})
    cluster.wait_phase("bad-cron", "Failed")
    succeeded = cluster.condition("bad-cron", "Succeeded")
    assert succeeded["reason"] == "InvalidSpec"
    assert "spec.schedule" in succeeded["message"] and "'0 3 * * *'" in succeeded["message"]


def test_a_run_under_its_baseline_fails_naming_the_metric_and_both_values(cluster: Cluster):
    cluster.create_test("steady", {"nodes": 1, "baseline": "lastPassed", "regressionTolerance": 5})
    wait_run(cluster, "steady", "g1")
    finish(cluster, "steady", "Succeeded", busbw=371.5)
    annotate(cluster, "steady", "after-maintenance")
    wait_run(cluster, "steady", "g1-r2")
    failed = finish(cluster, "steady", "Failed", busbw=340.0)
    succeeded = cluster.condition("steady", "Succeeded")
    assert succeeded["reason"] == "Regressed"
    assert "all_reduce busbw 340 GB/s is 8.5% under baseline run g1's 371.5 GB/s" in succeeded["message"]
    assert [(h["id"], h["result"], h.get("reason")) for h in failed["history"]] == [
        ("g1", "Passed", "ChecksPassed"), ("g1-r2", "Failed", "Regressed")]
    # The baseline stays the last passed run: a run back at its level passes.
    annotate(cluster, "steady", "fixed")
    wait_run(cluster, "steady", "g1-r3")
    finish(cluster, "steady", "Succeeded", busbw=370.0)


def clear_of_a_slot(seconds: float = 15.0) -> None:
    """Wait, if need be, until the next minute's slot is at least `seconds` away (a run started now ends before it)."""
    now = datetime.now(timezone.utc)
    left = 60 - now.second - now.microsecond / 1e6
    if left < seconds:
        time.sleep(left + 0.5)


def test_slots_missed_while_the_operator_was_down_start_one_run_when_it_is_back(cluster: Cluster,
                                                                                   operator: OperatorProcess):
    clear_of_a_slot()  # no slot while the first run goes: the next run is the one the missed slots start
    cluster.create_test("missed", {"nodes": 1, "schedule": "* * * * *"})
    wait_run(cluster, "missed", "g1")
    finish(cluster, "missed", "Succeeded")
    operator.kill()
    assert cluster.status("missed")["run"]["id"] == "g1"
    # Down while two slots pass since the run started. Rather than wait two minutes, the run is aged: its startTime is
    # moved three minutes back while the operator is down (written as an admin could, as age_run_until_failed does).
    # The schedule reads only status.startTime and the clock, so on its return the operator sees the slots of the
    # last three minutes as missed, two or three of them, as if it had been down that long.
    started = (datetime.now(timezone.utc) - timedelta(minutes=3)).replace(microsecond=0)
    cluster.patch_status("missed", {"startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ")})
    operator.start()
    status = wait_run(cluster, "missed", "g1-r2")
    assert status["run"]["trigger"] == "schedule"
    # One run for both slots, started for the latest: the first missed slot is not replayed.
    slot = datetime.strptime(status["run"]["scheduledFor"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert (slot - started.replace(second=0)).total_seconds() >= 120
    done = finish(cluster, "missed", "Succeeded")
    assert [h["id"] for h in done["history"]][:2] == ["g1", "g1-r2"]


def deliver(cluster: Cluster, name: str, saved: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": str(cluster.server.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "report", name, "--deliver", str(saved),
                           "--wait", "30", "-n", cluster.ns], env=env, capture_output=True, text=True, timeout=120)


def test_deliver_is_for_the_current_run_and_says_when_the_operator_does_not_take_it(cluster: Cluster,
                                                                                   tmp_path: Path):
    """`report NAME --deliver FILE` after reruns: stamped with the current run, it is judged; a report the operator
    rejects, or a delivery to a run that has its verdict, exits 1 saying why."""
    cluster.create_test("late", {"nodes": 1})
    wait_run(cluster, "late", "g1")
    finish(cluster, "late", "Succeeded")
    annotate(cluster, "late", "two")
    wait_run(cluster, "late", "g1-r2")
    cluster.place_pods("late", 1, ["node-a"], run="g1-r2")  # the run's pod, where the scheduler put it
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(report(1, nodes=("node-b",))))
    rejected = deliver(cluster, "late", elsewhere)
    assert rejected.returncode == 1, (rejected.stdout, rejected.stderr)
    assert "delivered" in rejected.stdout and "for run g1-r2" in rejected.stdout
    assert "the operator rejected the delivery for run g1-r2: Failed ReportRejected" in rejected.stderr
    again = deliver(cluster, "late", elsewhere)
    assert again.returncode == 1 and "run g1-r2 of late has its verdict already (Failed ReportRejected)" in \
        again.stderr, again.stderr

    annotate(cluster, "late", "three")
    wait_run(cluster, "late", "g1-r3")
    cluster.place_pods("late", 1, ["node-a"], run="g1-r3")
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(report(1, nodes=("node-a",))))
    judged = deliver(cluster, "late", saved)
    assert judged.returncode == 0, (judged.stdout, judged.stderr)
    assert "the operator's verdict on run g1-r3: Succeeded ChecksPassed" in judged.stdout
    assert ("g1-r3", "Passed") in [(h["id"], h["result"]) for h in cluster.status("late")["history"]]


def from_log(cluster: Cluster, name: str, log: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": str(cluster.server.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "report", name, "--from-log", str(log),
                           "--wait", "30", "-n", cluster.ns], env=env, capture_output=True, text=True, timeout=120)


def test_a_report_recovered_from_rank_zeros_log_is_delivered_or_shown_as_not_a_verdict(cluster: Cluster,
                                                                                      tmp_path: Path):
    """`report NAME --from-log FILE` reads the marked line a failed delivery leaves at the end of rank 0's log:
    delivered and judged while the run has no verdict; once it has one (ReportNotDelivered, say) printed as the
    operator would judge it, saying that the verdict stays; a log without the line says where to find it."""
    from acceptance_workload.checks.report_model import Report
    from acceptance_workload.report.delivery import report_line

    cluster.create_test("lost", {"nodes": 1})
    wait_run(cluster, "lost", "g1")
    cluster.place_pods("lost", 1, ["node-a"])
    log = tmp_path / "rank0.log"
    log.write_text("[gpu-acceptance] ddp (+80.1 s)\ngpu-acceptance: report NOT delivered: ...\n"
                   + report_line(Report.model_validate(report(1, nodes=("node-a",)))) + "\n")
    empty = tmp_path / "other.log"
    empty.write_text("PASSED: 12/12 checks passed\n")
    missing = from_log(cluster, "lost", empty)
    assert missing.returncode == 2 and "holds no report" in missing.stderr, missing.stderr
    judged = from_log(cluster, "lost", log)
    assert judged.returncode == 0, (judged.stdout, judged.stderr)
    assert f"delivered {log}" in judged.stdout and "the operator's verdict on run g1: Succeeded ChecksPassed" in \
        judged.stdout
    shown = from_log(cluster, "lost", log)
    assert shown.returncode == 0, shown.stderr
    assert "the operator's verdict on run g1 stays Succeeded ChecksPassed" in shown.stderr
    assert "NOT delivered, not a verdict" in shown.stdout and "all_reduce" in shown.stdout
    annotate(cluster, "lost", "two")
    wait_run(cluster, "lost", "g1-r2")
    stale = from_log(cluster, "lost", log)
    assert stale.returncode == 1 and "is for run g1; lost is on run g1-r2 now" in stale.stderr, stale.stderr


def test_a_rerun_value_too_long_to_record_as_it_is_starts_one_recorded_run(cluster: Cluster):
    """A 147 KB rerun value (the API server allows it: annotations have 256 KiB in all) is recorded by its digest:
    the run starts, is recorded (status.run, history) and ends. Recorded as it is, it once made the run
    unrecordable (HTTP 422, annotations too long, when the operator kept its record in an annotation)."""
    cluster.create_test("long", {"nodes": 1})
    wait_run(cluster, "long", "g1")
    finish(cluster, "long", "Succeeded")
    annotate(cluster, "long", secrets.token_urlsafe(110_250)[:147_000])  # random: its record does not compress
    status = wait_run(cluster, "long", "g1-r2")
    assert status["run"]["trigger"] == "rerun" and status["run"]["rerun"].startswith("sha256:"), status["run"]
    assert len(status["run"]["rerun"]) == len("sha256:") + 64
    finished = finish(cluster, "long", "Succeeded")
    assert [h["id"] for h in finished["history"]] == ["g1", "g1-r2"]
    assert sorted(cluster.job_names("PyTorchJob")) == ["long-g1", "long-g1-r2"]  # one job for the value


def test_an_oversized_report_is_refused_with_its_size_and_the_limit(cluster: Cluster, tmp_path: Path):
    """A 1024-node report delivered to a 2-node test: refused at once, saying how large and the limit (it was
    retried for 60 s until an SSL EOF: the API server drops a request that large)."""
    cluster.create_test("small", {"nodes": 2})
    wait_run(cluster, "small", "g1")
    saved = tmp_path / "huge.json"
    saved.write_text(json.dumps(report(1, nodes=tuple(f"gpu-node-{i:04d}" for i in range(1024)))))
    started = datetime.now(timezone.utc)
    answer = deliver(cluster, "small", saved)
    assert answer.returncode == 2, (answer.stdout, answer.stderr)
    assert "the report is too large to deliver to acceptancetests/small" in answer.stderr, answer.stderr
    assert "bytes, the limit is 1,044,480" in answer.stderr, answer.stderr
    assert (datetime.now(timezone.utc) - started).total_seconds() < 50
    assert not (cluster.status("small").get("report"))  # nothing was written
