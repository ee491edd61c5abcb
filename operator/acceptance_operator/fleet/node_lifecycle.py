"""Node lifecycle: what a verdict does to the nodes it judged, and each node's last pass as a metric.

A fleet admits a node by testing it: it joins tainted (gpu-acceptance.io/untested, say), a test that tolerates
the taint runs on it, and its pass lifts the taint (spec.onPass.removeTaints), uncordons it if this operator
cordoned it after an earlier failure (onPass.uncordon) and labels it with the date and run (onPass.label); a
failure leaves the taint and marks the blamed nodes (spec.onFailure). A sweep applies this per node: each
single-node child's pass acts on its own node (the parent's verdict touches none).

Only a hardware verdict acts on nodes: a smoke run (profile cpu-smoke: gloo on CPU pods that request no GPU)
proves nothing about a node's GPUs, so neither its pass nor its failure touches a node or the last-pass gauge.

The patches are node_actions' pure functions; here they are applied (only with the chart's nodeActions.enabled:
the grant to patch nodes), told as events, and the gauge gpu_acceptance_node_last_pass_timestamp_seconds kept:
set at each pass, and after a restart restored from the nodes' gpu-acceptance.io/passed-run annotation (the node
watch) and the finished tests' status (their recorded Succeeded and their report's passed nodes). A pass under
thresholds looser than its profile's (policy.threshold_problem) is no node's last pass: the gauge and its alert
say that a node met the standard, and a test author's own lower bar must not quiet them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from acceptance_operator.fleet.node_actions import (
    PASSED_LABEL,
    PassStamp,
    describe,
    last_pass,
    node_patch,
    pass_patch,
    unlabel_patch,
)
from acceptance_operator.judging.diagnosis import parse_time
from acceptance_operator.judging.verdict import measured_nodes
from acceptance_operator.plumbing import policy
from acceptance_operator.plumbing.kubeapi import Kube
from acceptance_operator.plumbing.metrics import OperatorMetrics
from acceptance_operator.resource import runs
from acceptance_operator.resource.api import GPU_RESOURCE, AcceptanceTest, Summary, parse_test
from acceptance_operator.resource.conditions import clip_message, is_smoke
from acceptance_operator.workload import Report

KubeDict = dict[str, Any]
Change = Callable[[KubeDict], tuple[KubeDict | None, list[str], list[str]]]

def hardware_verdict(profile: str | None) -> bool:
    """A verdict about the nodes' GPUs (not a smoke run, conditions.is_smoke): only such a verdict may act on nodes."""
    return not is_smoke(profile or "")


def asks_to_change_nodes(test: AcceptanceTest, passed: bool, failed_nodes: list[str]) -> bool:
    """Whether this verdict would change nodes if allowed: a hardware pass with spec.onPass, or a hardware failure
    that blames nodes with spec.onFailure (or spec.onPass.label, which a failed node loses)."""
    if not hardware_verdict(test.spec.profile):
        return False
    if passed:
        return test.spec.on_pass.enabled()
    return bool(failed_nodes) and (test.spec.on_failure != "none" or test.spec.on_pass.label)


def not_changed(refused: list[str]) -> str:
    """The verdict's and the event's words for a run whose node actions its standing refused (policy.py)."""
    return f"nodes not changed: {'; '.join(refused)}"


def after_verdict(k: Kube, obj: KubeDict, test: AcceptanceTest, *, passed: bool, summary: Summary,
                  report: Report | None, now: datetime, allowed: bool, metrics: OperatorMetrics,
                  refused: list[str] | None = None) -> None:
    """What the run's verdict does to its nodes: spec.onFailure on the blamed ones, spec.onPass and the last-pass
    gauge on the ones a pass measured. `allowed`: the operator's node actions are on (nodeActions.enabled);
    `refused`: why this run may not change nodes even so (policy.node_action_problems; told in an event)."""
    if not hardware_verdict(test.spec.profile):
        return
    held = bool(allowed and refused and asks_to_change_nodes(test, passed, summary.failed_nodes))
    if held:
        kopf.warn(obj, reason="NodeActionSkipped", message=clip_message(not_changed(refused or []), 1000))
        if not passed:
            return
    if not passed:
        _on_failure(k, obj, test, summary.failed_nodes, allowed)
        return
    if test.spec.sweep or report is None:
        return  # a sweep's verdict: its children's passes acted on their nodes
    nodes = sorted(node for node, ok in measured_nodes(report).items() if ok)
    loose = policy.threshold_problem(test)
    if loose and nodes:
        kopf.info(obj, reason="PassNotCounted", message=clip_message(
            f"{loose}: not the last pass of nodes {', '.join(nodes)} (gpu_acceptance_node_last_pass_timestamp_seconds)",
            1000))
    for node in [] if loose else nodes:
        metrics.set_last_pass(node, now.timestamp())
    on_pass = test.spec.on_pass
    if not nodes or not on_pass.enabled() or held:  # held for its namespace alone: still its nodes' last pass
        return
    if not allowed:
        kopf.warn(obj, reason="NodeActionSkipped", message=(
            f"spec.onPass asks to change the nodes that passed, but node actions are off in the operator (chart "
            f"value nodeActions.enabled): nodes {', '.join(nodes)} were not touched"))
        return
    meta = test.metadata
    stamp = PassStamp(now, f"{meta.namespace}/{meta.name}", runs.run_of(test).id)
    _apply(k, obj, "spec.onPass", nodes, lambda node: pass_patch(on_pass, node, stamp))


def _on_failure(k: Kube, obj: KubeDict, test: AcceptanceTest, nodes: list[str], allowed: bool) -> None:
    """spec.onFailure on the nodes the verdict blames (status.summary.failedNodes: the operator's, never a rejected
    report's); with spec.onPass.label they also lose gpu-acceptance.io/passed (no longer validated)."""
    action, unlabel = test.spec.on_failure, test.spec.on_pass.label
    if (action == "none" and not unlabel) or not nodes:
        return
    if not allowed:
        what = f"spec.onFailure={action}" if action != "none" else "spec.onPass.label"
        kopf.warn(obj, reason="NodeActionSkipped", message=(
            f"{what}, but node actions are off in the operator (chart value nodeActions.enabled): nodes "
            f"{', '.join(nodes)} were not touched"))
        return
    by = f"{test.metadata.namespace}/{test.metadata.name}"

    def change(node: KubeDict) -> tuple[KubeDict | None, list[str], list[str]]:
        failure = node_patch(action, node, by)
        unlabelled = unlabel_patch(node) if unlabel else None
        done = [describe(action)] if action != "none" else []  # applied now or before
        done += [f"removed label {PASSED_LABEL}"] if unlabelled else []
        return _merged([p for p in (failure, unlabelled) if p]), done, []

    _apply(k, obj, f"spec.onFailure={action}", nodes, change,
           failure_words=action if action != "none" else f"remove label {PASSED_LABEL}")


def _merged(patches: list[KubeDict]) -> KubeDict | None:
    """Merge patches of one node into one (two levels: metadata.labels, spec.taints, ...)."""
    out: KubeDict = {}
    for patch in patches:
        for part, fields in patch.items():
            for key, value in fields.items():
                if isinstance(value, dict):
                    out.setdefault(part, {}).setdefault(key, {}).update(value)
                else:
                    out.setdefault(part, {})[key] = value
    return out or None


def _apply(k: Kube, obj: KubeDict, what: str, nodes: list[str], change: Change, failure_words: str = "") -> None:
    """Patch each node with `change`; one event for what was done (nodes grouped by it), what was left, what failed."""
    done: dict[str, list[str]] = {}
    left, failed = [], []
    for node in nodes:
        said, problem = _patch_node(k, node, change)
        if problem:
            failed.append(f"{node} ({problem})")
            continue
        if said[0]:
            done.setdefault(", ".join(said[0]), []).append(node)
        left.extend(f"{node}: {why}" for why in said[1])
    if done:
        text = "; ".join(f"{words}: {', '.join(names)}" for words, names in done.items())
        text = text if failure_words else f"{what}: {text}"
        kopf.info(obj, reason="NodeActionApplied", message=clip_message(text, 1000))
    if left:
        kopf.warn(obj, reason="NodeActionLeft", message=clip_message(f"{what}: {'; '.join(left)}", 1000))
    if failed:
        verb = failure_words or what
        kopf.warn(obj, reason="NodeActionFailed", message=clip_message(
            f"could not {verb}: {', '.join(failed)}", 1000))


def _patch_node(k: Kube, node: str, change: Change, attempts: int = 3) -> tuple[tuple[list[str], list[str]],
                                                                                str | None]:
    """Apply `change` to one node: ((what it did, what it left), None) or (_, what went wrong). A race on the
    taints (409: the patch carries the resourceVersion it was computed from) is retried on a fresh read."""
    for _ in range(attempts):
        try:
            current = k.get_node(node)
            if current is None:
                return ([], []), "no such node"
            patch, done, left = change(current)
            if patch is not None:
                k.patch_node(node, patch)
            return (done, left), None
        except ApiException as e:
            if e.status != 409:
                return ([], []), f"HTTP {e.status} {e.reason}"
    return ([], []), "the node kept changing (HTTP 409)"


# --------------------------------------------------------------------------- the last-pass gauge


def node_seen(event_type: str | None, node: KubeDict, metrics: OperatorMetrics) -> None:
    """The node watch: a node's recorded pass restores its gauge; a deleted node loses its series."""
    meta = node.get("metadata") or {}
    name = meta.get("name", "")
    if event_type == "DELETED":
        metrics.node_deleted(name)
        return
    capacity = (node.get("status") or {}).get("capacity") or {}
    created = parse_time(meta.get("creationTimestamp"))
    has_gpus = str(capacity.get(GPU_RESOURCE, "0")).strip() not in ("", "0")
    metrics.node_exists(name, created.timestamp() if has_gpus and created else None)
    when = last_pass(node)
    if when is not None:
        metrics.set_last_pass(name, when)


def restore_from_test(obj: KubeDict, metrics: OperatorMetrics) -> None:
    """A finished test seen after a restart: if its run passed on hardware (the status is the operator's alone),
    the nodes its report passed passed then (a sweep's parent has no report: its children are tests of their own)."""
    recorded = obj.get("status") or {}
    spec = obj.get("spec") or {}
    if recorded.get("phase") != "Succeeded" or spec.get("sweep") or not hardware_verdict(spec.get("profile")):
        return
    when = parse_time(recorded.get("completionTime"))
    rows = ((obj.get("status") or {}).get("report") or {}).get("nodes") or []
    if when is None or not rows:
        return
    try:
        if policy.threshold_problem(parse_test(obj)):
            return  # a pass under looser thresholds than its profile's: no node's last pass (after_verdict)
    except ValidationError:
        return
    for row in rows:
        if isinstance(row, dict) and row.get("passed") is True and isinstance(row.get("node"), str):
            metrics.set_last_pass(row["node"], when.timestamp())
