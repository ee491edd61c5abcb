"""Node actions: mark the nodes a failed report blames (spec.onFailure), let in the nodes a run passed (spec.onPass).

The patches are pure functions of the action and the node as read; applying
them is node_lifecycle's job, and only when the operator runs with node
actions allowed (chart value nodeActions.enabled), since touching nodes needs
a cluster-wide grant the default install does not give.

What the operator did to a node it records on the node itself, so that it
knows after a restart: CORDONED_ANNOTATION when onFailure cordoned it (onPass
uncordons only such a node), PASSED_LABEL (the UTC date, for selection:
`kubectl get nodes -L gpu-acceptance.io/passed`) and PASSED_RUN_ANNOTATION
(time, test and run of the pass, as JSON: a label value holds 63 characters).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from acceptance_operator.resource.api import GROUP, OnFailure, OnPass

STATUS_LABEL = f"{GROUP}/status"
STATUS_FAILED = "failed"
TAINT_KEY = f"{GROUP}/failed"
TAINT = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}
CORDONED_ANNOTATION = f"{GROUP}/cordoned-by"  # the test whose failure cordoned the node
PASSED_LABEL = f"{GROUP}/passed"  # the UTC date of the node's last pass, YYYY-MM-DD
PASSED_RUN_ANNOTATION = f"{GROUP}/passed-run"  # {"time": ..., "test": "<namespace>/<name>", "run": ...}

KubeDict = dict[str, Any]


@dataclass(frozen=True)
class PassStamp:
    """Which run passed a node, and when."""

    time: datetime
    test: str  # <namespace>/<name>
    run: str

    def label(self) -> str:
        return self.time.astimezone(timezone.utc).strftime("%Y-%m-%d")

    def annotation(self) -> str:
        when = self.time.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return json.dumps({"time": when, "test": self.test, "run": self.run}, separators=(",", ":"))


def last_pass(node: KubeDict) -> float | None:
    """The Unix time of the node's last pass as PASSED_RUN_ANNOTATION records it; None without a readable one."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(PASSED_RUN_ANNOTATION)
    try:
        when = json.loads(raw)["time"] if raw else None
        return datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp() if when \
            else None
    except (TypeError, ValueError, KeyError):
        return None


def _guarded(patch: KubeDict, meta: KubeDict) -> KubeDict:
    """A patch replacing the whole taint list carries the node's resourceVersion: a concurrent change to the taints
    makes it fail with a conflict (retried) instead of silently dropping someone else's taint."""
    if meta.get("resourceVersion"):
        patch.setdefault("metadata", {})["resourceVersion"] = meta["resourceVersion"]
    return patch


def node_patch(action: OnFailure, node: KubeDict, by: str = "") -> KubeDict | None:
    """The merge patch that applies `action` to `node`, or None when it is already applied.

    `by` (<namespace>/<test>) is recorded on a node this cordons, so that spec.onPass.uncordon knows the operator
    did it. A labelled node loses its PASSED_LABEL: it is not validated any more.
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    if action == "label":
        labels = meta.get("labels") or {}
        if labels.get(STATUS_LABEL) == STATUS_FAILED and PASSED_LABEL not in labels:
            return None
        return {"metadata": {"labels": {STATUS_LABEL: STATUS_FAILED,
                                        **({PASSED_LABEL: None} if PASSED_LABEL in labels else {})}}}
    if action == "taint":
        taints = list(spec.get("taints") or [])
        if any(t.get("key") == TAINT_KEY and t.get("effect") == TAINT["effect"] for t in taints):
            return None
        return _guarded({"spec": {"taints": [*taints, dict(TAINT)]}}, meta)
    if action == "cordon":
        if spec.get("unschedulable"):
            return None  # someone else's cordon (or ours already): not marked as ours
        return {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: by or "true"}}}
    return None


def unlabel_patch(node: KubeDict) -> KubeDict | None:
    """A failed node loses PASSED_LABEL (spec.onPass.label); its PASSED_RUN_ANNOTATION stays: the last pass."""
    return {"metadata": {"labels": {PASSED_LABEL: None}}} \
        if PASSED_LABEL in ((node.get("metadata") or {}).get("labels") or {}) else None


def pass_patch(on_pass: OnPass, node: KubeDict, stamp: PassStamp) -> tuple[KubeDict | None, list[str], list[str]]:
    """(the merge patch that applies `on_pass` to a node that passed or None, what it does, what it leaves and why)."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    patch: KubeDict = {}
    done: list[str] = []
    left: list[str] = []
    taints = list(spec.get("taints") or [])
    kept = [t for t in taints if t.get("key") not in on_pass.remove_taints]
    if len(kept) != len(taints):
        _guarded(patch, meta).setdefault("spec", {})["taints"] = kept
        removed = sorted({t.get("key", "") for t in taints if t not in kept})
        done.append(f"removed taint {', '.join(removed)}")
    if on_pass.uncordon and CORDONED_ANNOTATION in annotations:
        patch.setdefault("metadata", {}).setdefault("annotations", {})[CORDONED_ANNOTATION] = None
        if spec.get("unschedulable"):
            patch.setdefault("spec", {})["unschedulable"] = False
            done.append("uncordoned")
    elif on_pass.uncordon and spec.get("unschedulable"):
        left.append("cordoned, but not by this operator: left cordoned")
    if on_pass.label:
        patch.setdefault("metadata", {}).setdefault("labels", {})[PASSED_LABEL] = stamp.label()
        patch["metadata"].setdefault("annotations", {})[PASSED_RUN_ANNOTATION] = stamp.annotation()
        if labels.get(STATUS_LABEL) == STATUS_FAILED:
            patch["metadata"]["labels"][STATUS_LABEL] = None
        done.append(f"labelled {PASSED_LABEL}={stamp.label()}")
    return (patch or None), done, left


def describe(action: OnFailure) -> str:
    return {
        "label": f"labelled {STATUS_LABEL}={STATUS_FAILED}",
        "taint": f"tainted {TAINT_KEY}=true:NoSchedule",
        "cordon": "cordoned",
    }.get(action, "left alone")
