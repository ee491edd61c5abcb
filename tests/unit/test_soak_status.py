"""checks.soak on the operator's side: the fit to spec.timeoutSeconds (model and render) and the progress it shows."""

from __future__ import annotations

import json

import pytest
import yaml
from acceptance_operator.fleet import sweep
from acceptance_operator.resource import soak
from acceptance_operator.resource.api import AcceptanceTest, AcceptanceTestSpec
from acceptance_operator.resource.spec_input import RenderError, parse_test
from acceptance_workload.report.evidence import PROGRESS_KEY, STATUS_KEY

from tests.checks import off


def manifest(spec: dict) -> str:
    return yaml.safe_dump({"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                           "metadata": {"name": "burn"}, "spec": spec})


def test_a_soak_that_does_not_fit_the_timeout_is_refused_naming_the_field_and_the_fix():
    with pytest.raises(RenderError) as e:
        parse_test(manifest({"timeoutSeconds": 4000, "checks": {"soak": {"enabled": True, "durationSeconds": 3600}}}))
    assert e.value.lines == [
        "spec.checks.soak.durationSeconds: 3600 s of soak and 600 s for the start and the other checks do not fit "
        "spec.timeoutSeconds 4000: set spec.timeoutSeconds to at least 4200 or shorten the soak"]


def test_the_default_timeout_does_not_hold_the_default_soak():
    """Left at its default (3600 s), timeoutSeconds refuses the default soak (3600 s): nothing is derived."""
    with pytest.raises(RenderError) as e:
        parse_test(manifest({"checks": {"soak": {"enabled": True}}}))
    assert "at least 4200" in e.value.lines[0]


@pytest.mark.parametrize(("duration", "timeout"), [(3600, 4200), (30, 630), (14400, 15000)])
def test_a_soak_that_fits_is_accepted(duration: int, timeout: int):
    spec = AcceptanceTestSpec.model_validate({"timeoutSeconds": timeout,
                                              "checks": {"soak": {"enabled": True, "durationSeconds": duration}}})
    assert spec.checks.soak.duration_seconds == duration
    with pytest.raises(ValueError, match="at least"):
        AcceptanceTestSpec.model_validate({"timeoutSeconds": timeout - 1,
                                           "checks": {"soak": {"enabled": True, "durationSeconds": duration}}})


def test_a_disabled_soak_needs_no_time():
    spec = AcceptanceTestSpec.model_validate({"timeoutSeconds": 60, "checks": {"soak": {"durationSeconds": 86400}}})
    assert not spec.checks.soak.enabled


def progress(**fields) -> dict[str, str]:
    body = {"check": "soak", "elapsedSeconds": 720, "totalSeconds": 3600,
            "worst": "node-a gpu 3: 84 C, 0.97 of its first minutes", "updated": "2026-11-28T14:00:00Z", **fields}
    return {PROGRESS_KEY: json.dumps(body)}


def test_progress_is_read_into_status_and_a_line_for_the_running_message():
    status = soak.progress_of(progress(), 3600)
    assert status is not None
    assert (status.elapsed_seconds, status.total_seconds, status.progress) == (720, 3600, "12/60 min")
    assert soak.running_line(status) == "soak 12/60 min, worst: node-a gpu 3: 84 C, 0.97 of its first minutes"
    assert status.to_wire()["updated"].startswith("2026-11-28T14:00:00")
    short = soak.progress_of(progress(elapsedSeconds=20, totalSeconds=30, worst=""), 30)
    assert short is not None and soak.running_line(short) == "soak 20/30 s"


def test_progress_is_bounded_by_the_spec_and_one_line():
    status = soak.progress_of(progress(elapsedSeconds=10**9, totalSeconds=10**9, worst="a\nb" + "x" * 1000), 3600)
    assert status is not None and (status.elapsed_seconds, status.total_seconds) == (3600, 3600)
    assert "\n" not in status.worst and len(status.worst) == soak.MAX_WORST


@pytest.mark.parametrize("data", [
    None, {}, {STATUS_KEY: "{}"}, {PROGRESS_KEY: "not json"}, {PROGRESS_KEY: "[1]"},
    {PROGRESS_KEY: json.dumps({"check": "nccl", "elapsedSeconds": 1, "totalSeconds": 2})},
    {PROGRESS_KEY: json.dumps({"check": "soak", "elapsedSeconds": "x", "totalSeconds": 2})},
    {PROGRESS_KEY: json.dumps({"check": "soak", "totalSeconds": 2})},
    {PROGRESS_KEY: json.dumps({"check": "soak", "elapsedSeconds": 1, "totalSeconds": 2, "updated": "yesterday"})},
], ids=["none", "empty", "report-only", "not-json", "not-object", "other-check", "bad-number", "missing", "bad-time"])
def test_unreadable_progress_shows_nothing(data):
    assert soak.progress_of(data, 3600) is None


def burn_in(checks: dict) -> AcceptanceTest:
    return AcceptanceTest.model_validate({
        "metadata": {"name": "burn-in", "namespace": "fleet", "uid": "u1"},
        "spec": {"sweep": True, "timeoutSeconds": 16200, "placement": {"nodeSelector": {"pool": "new"}},
                 "checks": {"soak": {"enabled": True, "durationSeconds": 14400}, **checks}}})


def test_a_sweeps_single_node_tests_burn_in_and_its_inter_node_stage_does_not():
    parent = burn_in({})
    single = sweep.child(parent, "g1", "burn-in", ["n1"], "n1")["spec"]
    assert (single["checks"]["soak"]["enabled"], single["checks"]["soak"]["durationSeconds"]) == (True, 14400)
    assert single["timeoutSeconds"] == 16200
    stage = sweep.child(parent, "g1", "burn-in", ["n1", "n2"], sweep.INTER_NODE)["spec"]
    assert stage["checks"]["soak"]["enabled"] is False and stage["checks"]["nccl"]["enabled"] is True
    # Both are valid tests as the API takes them.
    AcceptanceTestSpec.model_validate(single)
    AcceptanceTestSpec.model_validate(stage)



def test_a_soak_alone_stays_in_the_inter_node_stage():
    parent = burn_in(off(but=("soak", "signals")))
    stage = sweep.child(parent, "g1", "burn-in", ["n1", "n2"], sweep.INTER_NODE)["spec"]
    assert stage["checks"]["soak"]["enabled"] is True


def child(node: str, phase: str | None, **fields) -> sweep.Child | None:
    """A sweep child as the parent's watch records it, its status.soak read from its evidence's progress."""
    status = soak.progress_of(progress(**fields), 14400)
    recorded = {"phase": phase, **({"soak": status.to_wire()} if status else {})}
    return sweep.child_of({"metadata": {"name": f"burn-in-{node}", "labels": {sweep.LABEL_SWEEP: "burn-in"},
                                        "annotations": {sweep.NODE_ANNOTATION: node}}}, recorded)


def test_the_parent_shows_its_nodes_soaking_and_the_worst_gpu_of_the_pool():
    children = [
        child("n1", "Running", elapsedSeconds=720, totalSeconds=14400, worst="n1 GPU 0: 700 TFLOP/s (0.99 ...)",
              worstRatio=0.99),
        child("n2", "Running", elapsedSeconds=1500, totalSeconds=14400, worst="n2 GPU 5: 612 TFLOP/s (0.87 ...)",
              worstRatio=0.871),
        child("n3", "Succeeded", elapsedSeconds=14400, totalSeconds=14400, worst="n3 GPU 1: 690 TFLOP/s (0.95 ...)",
              worstRatio=0.95),
        child("n4", "Pending", elapsedSeconds=60, totalSeconds=14400, worst="n4 unrated"),  # no ratio: not worst
    ]
    status = sweep.soak_status([c for c in children if c is not None])
    assert status is not None
    assert status.progress == "3 nodes soaking, 1-25/240 min"
    assert (status.worst, status.worst_ratio) == ("n2 GPU 5: 612 TFLOP/s (0.87 ...)", 0.871)
    assert soak.running_line(status) == "soak 3 nodes soaking, 1-25/240 min, worst: n2 GPU 5: 612 TFLOP/s (0.87 ...)"


def test_once_no_node_soaks_the_parent_says_how_many_did_and_keeps_the_worst():
    done = [child("n1", "Succeeded", elapsedSeconds=14400, worst="n1 GPU 0: (0.99)", worstRatio=0.99),
            child("n2", "Failed", elapsedSeconds=3000, worst="n2 GPU 2: (0.41)", worstRatio=0.41)]
    status = sweep.soak_status([c for c in done if c is not None])
    assert status is not None and status.progress == "2 nodes soaked"
    assert (status.elapsed_seconds, status.worst) == (3000, "n2 GPU 2: (0.41)")


def test_the_inter_node_stage_and_children_without_progress_add_nothing():
    stage = child(sweep.INTER_NODE, "Running", worst="stage", worstRatio=0.1)
    silent = sweep.child_of({"metadata": {"name": "burn-in-n9", "labels": {sweep.LABEL_SWEEP: "burn-in"},
                                          "annotations": {sweep.NODE_ANNOTATION: "n9"}}}, {"phase": "Running"})
    assert sweep.soak_status([c for c in (stage, silent) if c is not None]) is None
    garbled = sweep.child_of({"metadata": {"name": "burn-in-n8", "labels": {sweep.LABEL_SWEEP: "burn-in"},
                                           "annotations": {sweep.NODE_ANNOTATION: "n8"}}},
                             {"phase": "Running", "soak": {"elapsedSeconds": -5}})
    assert garbled is not None and garbled.soak is None


def test_a_ratio_that_is_not_a_finite_number_is_not_read():
    for bad in ("0.5", float("nan"), -1):
        status = soak.progress_of(progress(worstRatio=bad), 3600)
        assert status is not None and status.worst_ratio is None
    assert soak.progress_of(progress(worstRatio=0.8712), 3600).worst_ratio == 0.8712
