"""spec.onFailure: mark the nodes a failed report blames, so no job lands on them.

The patches are pure functions of the action and the node as read; applying
them is the handlers' job, and only when the operator runs with node actions
allowed (chart value nodeActions.enabled), since touching nodes needs a
cluster-wide grant the default install does not give.
"""

from __future__ import annotations

from typing import Any

from acceptance_operator.api import GROUP, OnFailure

STATUS_LABEL = f"{GROUP}/status"
STATUS_FAILED = "failed"
TAINT_KEY = f"{GROUP}/failed"
TAINT = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}

KubeDict = dict[str, Any]


def node_patch(action: OnFailure, node: KubeDict) -> KubeDict | None:
    """The merge patch that applies `action` to `node`, or None when it is already applied.

    A taint patch replaces the whole taint list, so it carries the node's
    resourceVersion: a concurrent change to the taints makes it fail with a
    conflict instead of silently dropping someone else's taint.
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    if action == "label":
        if (meta.get("labels") or {}).get(STATUS_LABEL) == STATUS_FAILED:
            return None
        return {"metadata": {"labels": {STATUS_LABEL: STATUS_FAILED}}}
    if action == "taint":
        taints = list(spec.get("taints") or [])
        if any(t.get("key") == TAINT_KEY and t.get("effect") == TAINT["effect"] for t in taints):
            return None
        patch: KubeDict = {"spec": {"taints": [*taints, dict(TAINT)]}}
        if meta.get("resourceVersion"):
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        return patch
    if action == "cordon":
        return None if spec.get("unschedulable") else {"spec": {"unschedulable": True}}
    return None


def describe(action: OnFailure) -> str:
    return {
        "label": f"labelled {STATUS_LABEL}={STATUS_FAILED}",
        "taint": f"tainted {TAINT_KEY}=true:NoSchedule",
        "cordon": "cordoned",
    }.get(action, "left alone")
