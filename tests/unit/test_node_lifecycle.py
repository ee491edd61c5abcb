"""Node lifecycle without a cluster: spec.onPass and skipBusyNodes as the spec, render and the refusals show them;
which verdicts act on nodes; the last-pass gauge restored from a node's annotation and from a test's status."""

from __future__ import annotations

import pytest
import yaml
from acceptance_operator.fleet.node_actions import PASSED_RUN_ANNOTATION
from acceptance_operator.fleet.node_lifecycle import (
    asks_to_change_nodes,
    hardware_verdict,
    node_seen,
    restore_from_test,
)
from acceptance_operator.plumbing.metrics import OperatorMetrics
from acceptance_operator.render import render
from acceptance_operator.resource.api import API_VERSION, KIND
from acceptance_operator.resource.spec_input import RenderError, parse_test

from tests.unit.test_metrics import value

GAUGE = "gpu_acceptance_node_last_pass_timestamp_seconds"


def manifest(spec: dict) -> str:
    return yaml.safe_dump({"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                           "metadata": {"name": "admit"}, "spec": spec})


def test_defaults_touch_no_node_and_skip_busy_nodes():
    spec = parse_test(manifest({})).spec
    assert not spec.on_pass.enabled() and spec.on_pass.remove_taints == [] and spec.skip_busy_nodes is True


@pytest.mark.parametrize(("spec", "line"), [
    ({"onPass": {"removeTaints": ["node.kubernetes.io/unschedulable"]}},
     "spec.onPass.removeTaints[0]: 'node.kubernetes.io/unschedulable': a Kubernetes taint"),
    ({"onPass": {"removeTaints": ["kubernetes.io/x"]}}, "spec.onPass.removeTaints[0]: 'kubernetes.io/x'"),
    ({"onPass": {"removeTaints": ["ok.io/a", "bad key"]}}, "spec.onPass.removeTaints[1]: key 'bad key': name must"),
    ({"onPass": {"removeTaints": [f"k{i}" for i in range(17)]}},
     "spec.onPass.removeTaints: List should have at most 16"),
    ({"onPass": {"label": "yes please"}}, "spec.onPass.label: Input should be a valid boolean"),
    ({"onPass": {"untaint": True}}, "spec.onPass.untaint: unknown field"),
    ({"skipBusyNodes": "sometimes"}, "spec.skipBusyNodes: Input should be a valid boolean"),
])
def test_a_wrong_field_is_refused_with_its_path(spec: dict, line: str):
    with pytest.raises(RenderError) as e:
        parse_test(manifest(spec))
    assert any(got.startswith(line) for got in e.value.lines), e.value.lines


def test_render_says_what_the_operator_does_to_nodes():
    text = render(parse_test(manifest({"sweep": True, "skipBusyNodes": False, "onFailure": "cordon",
                                       "backend": "PyTorchJob", "profile": "h100-sxm", "onPass": {
        "removeTaints": ["gpu-acceptance.io/untested"], "uncordon": True, "label": True}})))
    head = [line for line in text.splitlines() if line.startswith("#")]
    assert head == [
        "# sweep: a single-node test per node matching placement.nodeSelector, at most 10 at once; nodes whose GPUs "
        "other pods use are tested too (skipBusyNodes: false); each runs the objects below, pinned to its node",
        "# onFailure: the nodes a failed run blames are cordoned (needs the chart value nodeActions.enabled)",
        "# onPass: each node a passed run measured: remove taint gpu-acceptance.io/untested; uncordon if this operator "
        "cordoned it; label gpu-acceptance.io/passed=<UTC date> (needs the chart value nodeActions.enabled)",
    ]
    named = {"backend": "PyTorchJob", "profile": "h100-sxm"}  # unset, render says what it assumed (test_defaults)
    assert not [line for line in render(parse_test(manifest(named))).splitlines() if line.startswith("#")]


def test_only_a_hardware_verdict_acts_on_nodes():
    assert hardware_verdict("h100-sxm") and hardware_verdict(None)
    assert not hardware_verdict("cpu-smoke")  # a smoke verdict never acts on nodes


@pytest.mark.parametrize(("spec", "passed", "failed", "asks"), [
    ({}, True, [], False), ({}, False, ["n1"], False),  # nothing asked
    ({"onPass": {"label": True}}, True, [], True),
    ({"onPass": {"label": True}}, False, ["n1"], True),  # a failed node loses the label
    ({"onPass": {"removeTaints": ["gpu-acceptance.io/untested"]}}, False, ["n1"], False),  # a failure lifts nothing
    ({"onFailure": "taint"}, False, ["n1"], True), ({"onFailure": "taint"}, False, [], False),  # none blamed
    ({"onFailure": "taint"}, True, [], False),
    ({"onPass": {"label": True}, "onFailure": "cordon", "profile": "cpu-smoke"}, True, [], False),
])
def test_which_verdicts_ask_to_change_nodes(spec: dict, passed: bool, failed: list[str], asks: bool):
    """Only these say "nodes not changed: <why>" when their standing refuses node actions (policy.py)."""
    assert asks_to_change_nodes(parse_test(manifest(spec)), passed, failed) is asks


def passed_test(profile: str = "h100-sxm", phase: str = "Succeeded", sweep: bool = False,
                checks: dict | None = None) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "t", "namespace": "ns", "generation": 1},
            "spec": {"profile": profile, "sweep": sweep, **({"checks": checks} if checks else {})},
            "status": {"phase": phase, "completionTime": "2026-11-20T10:00:00Z", "observedGeneration": 1,
                       "report": {"nodes": [{"node": "gpu-1", "passed": True, "results": 3,
                                                             "failed": 0},
                                                            {"node": "gpu-2", "passed": False, "results": 3,
                                                             "failed": 1}]}}}


def gpu_node(name: str, annotation: str | None = None) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": "2026-10-01T00:00:00Z",
                         "annotations": {PASSED_RUN_ANNOTATION: annotation} if annotation else {}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}}


def test_the_gauge_is_restored_from_a_passed_tests_status_and_from_the_node():
    m = OperatorMetrics()
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        node_seen(None, gpu_node(name), m)
    restore_from_test(passed_test(), m)
    assert value(m, GAUGE, node="gpu-1") == 1795168800.0  # 2026-11-20T10:00:00Z
    assert value(m, GAUGE, node="gpu-2") is None  # the report failed it
    node_seen("MODIFIED", gpu_node("gpu-3", '{"time":"2026-11-25T00:00:00Z","test":"ns/t","run":"g1"}'), m)
    assert value(m, GAUGE, node="gpu-3") == 1795564800.0  # 2026-11-25T00:00:00Z
    assert value(m, "gpu_acceptance_gpu_node_created_timestamp_seconds", node="gpu-3") == 1790812800.0  # its creation
    node_seen("DELETED", gpu_node("gpu-3"), m)
    assert value(m, GAUGE, node="gpu-3") is None


@pytest.mark.parametrize("test", [passed_test(profile="cpu-smoke"), passed_test(phase="Failed"),
                                  passed_test(sweep=True),
                                  passed_test(checks={"gpu": {"thresholds": {"minGemmTflops": 10}}})])
def test_no_gauge_from_a_smoke_run_a_failure_a_sweeps_parent_or_a_pass_under_looser_thresholds(test: dict):
    m = OperatorMetrics()
    node_seen(None, gpu_node("gpu-1"), m)
    restore_from_test(test, m)
    assert value(m, GAUGE, node="gpu-1") is None
