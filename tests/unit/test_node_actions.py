"""Node patches. spec.onFailure: label, taint (keeping other taints, guarded by resourceVersion), cordon (marked as
the operator's); spec.onPass: remove taints, uncordon only what the operator cordoned, label with date and run."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from acceptance_operator.fleet.node_actions import (
    CORDONED_ANNOTATION,
    PASSED_LABEL,
    PASSED_RUN_ANNOTATION,
    STATUS_LABEL,
    TAINT_KEY,
    PassStamp,
    describe,
    last_pass,
    node_patch,
    pass_patch,
    unlabel_patch,
)
from acceptance_operator.resource.api import OnPass

UNTESTED = {"key": "gpu-acceptance.io/untested", "value": "true", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
STAMP = PassStamp(datetime(2026, 11, 26, 23, 5, 7, tzinfo=timezone.utc), "fleet/admit-gpu-1", "g1-r2")


def node(labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         unschedulable: bool = False, rv: str = "42", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "gpu-1", "labels": labels or {}, "resourceVersion": rv,
                         "annotations": annotations or {}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable}}


def test_label():
    assert node_patch("label", node()) == {"metadata": {"labels": {STATUS_LABEL: "failed"}}}
    assert node_patch("label", node(labels={STATUS_LABEL: "failed"})) is None
    # A validated node that fails is not validated any more.
    assert node_patch("label", node(labels={STATUS_LABEL: "failed", PASSED_LABEL: "2026-11-01"})) == {
        "metadata": {"labels": {STATUS_LABEL: "failed", PASSED_LABEL: None}}}


def test_taint_keeps_existing_taints_and_guards_with_resource_version():
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    patch = node_patch("taint", node(taints=[other]))
    assert patch["spec"]["taints"] == [other, {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    assert patch["metadata"] == {"resourceVersion": "42"}
    assert node_patch("taint", node(taints=patch["spec"]["taints"])) is None


def test_cordon_marks_the_node_as_cordoned_by_the_operator():
    assert node_patch("cordon", node(), "fleet/nightly") == {
        "spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: "fleet/nightly"}}}
    assert node_patch("cordon", node(unschedulable=True)) is None  # someone else's cordon: not claimed


def test_a_pass_lifts_the_gating_taint_only_and_guards_the_list():
    patch, done, left = pass_patch(OnPass(remove_taints=["gpu-acceptance.io/untested"]), node(taints=[GPU, UNTESTED]),
                                   STAMP)
    assert patch == {"spec": {"taints": [GPU]}, "metadata": {"resourceVersion": "42"}}
    assert done == ["removed taint gpu-acceptance.io/untested"] and left == []
    assert pass_patch(OnPass(remove_taints=["gpu-acceptance.io/untested"]), node(taints=[GPU]), STAMP)[0] is None


def test_a_pass_uncordons_only_a_node_the_operator_cordoned():
    ours = node(unschedulable=True, annotations={CORDONED_ANNOTATION: "fleet/nightly"})
    patch, done, _ = pass_patch(OnPass(uncordon=True), ours, STAMP)
    assert patch == {"spec": {"unschedulable": False}, "metadata": {"annotations": {CORDONED_ANNOTATION: None}}}
    assert done == ["uncordoned"]
    patch, done, left = pass_patch(OnPass(uncordon=True), node(unschedulable=True), STAMP)
    assert patch is None and done == [] and left == ["cordoned, but not by this operator: left cordoned"]
    assert pass_patch(OnPass(), ours, STAMP)[0] is None  # not asked


def test_a_pass_labels_the_date_and_annotates_time_test_and_run():
    patch, done, _ = pass_patch(OnPass(label=True), node(labels={STATUS_LABEL: "failed"}), STAMP)
    assert patch["metadata"]["labels"] == {PASSED_LABEL: "2026-11-26", STATUS_LABEL: None}
    recorded = json.loads(patch["metadata"]["annotations"][PASSED_RUN_ANNOTATION])
    assert recorded == {"time": "2026-11-26T23:05:07Z", "test": "fleet/admit-gpu-1", "run": "g1-r2"}
    assert done == [f"labelled {PASSED_LABEL}=2026-11-26"]
    assert last_pass(node(annotations=patch["metadata"]["annotations"])) == STAMP.time.timestamp()
    assert last_pass(node(annotations={PASSED_RUN_ANNOTATION: "not json"})) is None
    assert last_pass(node()) is None


def test_unlabel_only_a_labelled_node():
    assert unlabel_patch(node(labels={PASSED_LABEL: "2026-11-26"})) == {"metadata": {"labels": {PASSED_LABEL: None}}}
    assert unlabel_patch(node()) is None


def test_none_does_nothing():
    assert node_patch("none", node()) is None
    assert describe("none") == "left alone"
    assert describe("taint") == f"tainted {TAINT_KEY}=true:NoSchedule"
