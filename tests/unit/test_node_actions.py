"""spec.onFailure patches: label, taint (keeping other taints, guarded by resourceVersion), cordon; idempotent."""

from __future__ import annotations

from typing import Any

from acceptance_operator.node_actions import STATUS_LABEL, TAINT_KEY, describe, node_patch


def node(labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         unschedulable: bool = False, rv: str = "42") -> dict[str, Any]:
    return {"metadata": {"name": "gpu-1", "labels": labels or {}, "resourceVersion": rv},
            "spec": {"taints": taints or [], "unschedulable": unschedulable}}


def test_label():
    assert node_patch("label", node()) == {"metadata": {"labels": {STATUS_LABEL: "failed"}}}
    assert node_patch("label", node(labels={STATUS_LABEL: "failed"})) is None


def test_taint_keeps_existing_taints_and_guards_with_resource_version():
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    patch = node_patch("taint", node(taints=[other]))
    assert patch["spec"]["taints"] == [other, {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    assert patch["metadata"] == {"resourceVersion": "42"}
    assert node_patch("taint", node(taints=patch["spec"]["taints"])) is None


def test_cordon():
    assert node_patch("cordon", node()) == {"spec": {"unschedulable": True}}
    assert node_patch("cordon", node(unschedulable=True)) is None


def test_none_does_nothing():
    assert node_patch("none", node()) is None
    assert describe("none") == "left alone"
    assert describe("taint") == f"tainted {TAINT_KEY}=true:NoSchedule"
