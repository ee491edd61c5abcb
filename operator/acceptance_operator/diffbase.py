"""kopf's last-handled-configuration, bounded so no object can outgrow the annotation it lives in.

kopf keeps a copy of each object's "essence" (spec, labels, annotations) in an
annotation to tell a spec change from a status write. Annotations share one
256 KiB budget per object: a spec or annotations near that size made every
patch of kopf's fail (422), finalizer removal included, and the test could
never be deleted. Here the essence is stored as is while small (the usual
case); a larger one keeps its shape, but each large part is replaced by its
SHA-256, so a change still shows as a change (in the same field) while the
stored copy stays under PART bytes a part (spec, labels, annotations).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import kopf

# An essence up to this size is stored whole; beyond it, compacted.
WHOLE_LIMIT = 16 * 1024
# In a compacted essence: values up to LEAF bytes stay as they are, objects up to PART bytes keep their keys.
LEAF = 512
PART = 8 * 1024
DIGEST_PREFIX = "sha256:"
# The one key of a map too large to keep even compacted (not under gpu-acceptance.io/: kopf drops those).
DIGEST_KEY = "sha256"


def _text(node: Any) -> str:
    return json.dumps(node, sort_keys=True, separators=(",", ":"), default=str)


def _digest(text: str) -> str:
    return DIGEST_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def compact(node: Any) -> Any:
    """`node` with every large part replaced by its digest; the result is at most about PART bytes as JSON."""
    text = _text(node)
    if len(text) <= LEAF:
        return node
    if isinstance(node, dict):
        out: Any = {key: compact(value) for key, value in node.items()}
    elif isinstance(node, list):
        out = [compact(value) for value in node]
    else:
        return _digest(text)
    return out if len(_text(out)) <= PART else _digest(text)


def compact_map(node: dict[str, Any]) -> dict[str, Any]:
    """A map compacted value by value, or, if still over PART, {"sha256": digest}: always a map, at most PART."""
    out = {key: compact(value) for key, value in node.items()}
    return out if len(_text(out)) <= PART else {DIGEST_KEY: _digest(_text(node))}


def compact_essence(essence: dict[str, Any]) -> dict[str, Any]:
    """The essence itself while small; else each top-level part compacted, at most PART each.

    Maps stay maps: kopf reads metadata.annotations and labels as maps (to drop its own annotations), and a
    `field="spec"` filter still sees a spec change as one.
    """
    if len(_text(essence)) <= WHOLE_LIMIT:
        return essence
    out: dict[str, Any] = {}
    for key, value in essence.items():
        if key == "metadata" and isinstance(value, dict):
            out[key] = {k: compact_map(v) if isinstance(v, dict) else compact(v) for k, v in value.items()}
        else:
            out[key] = compact_map(value) if isinstance(value, dict) else compact(value)
    return out


class BoundedDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation storage, with essences compacted (see the module's docstring)."""

    def build(self, *, body: Any, extra_fields: Iterable[Any] | None = None) -> Any:
        return compact_essence(super().build(body=body, extra_fields=extra_fields))
