"""kopf's last-handled-configuration stays small whatever the object holds, and still tells a change from none."""

from __future__ import annotations

import json

import kopf
from acceptance_operator.diffbase import (
    LEAF,
    PART,
    WHOLE_LIMIT,
    BoundedDiffBaseStorage,
    compact,
    compact_essence,
    compact_map,
)
from kopf._cogs.structs import bodies, patches


def body(spec: dict, annotations: dict | None = None) -> bodies.Body:
    return bodies.Body({"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                        "metadata": {"name": "t", "namespace": "n", "annotations": annotations or {}},
                        "spec": spec, "status": {"phase": "Running"}})


def stored(storage: BoundedDiffBaseStorage, b: bodies.Body) -> str:
    patch = patches.Patch()
    storage.store(body=b, patch=patch, essence=storage.build(body=b))
    return patch["metadata"]["annotations"]["gpu-acceptance.io/last-handled-configuration"]


def storage() -> BoundedDiffBaseStorage:
    return BoundedDiffBaseStorage(prefix="gpu-acceptance.io", key="last-handled-configuration")


def test_a_usual_spec_is_stored_whole_as_kopf_would():
    b = body({"nodes": 2, "pod": {"env": {"A": "1"}}})
    plain = kopf.AnnotationsDiffBaseStorage(prefix="gpu-acceptance.io", key="last-handled-configuration")
    assert storage().build(body=b) == plain.build(body=b)
    assert json.loads(stored(storage(), b))["spec"] == {"nodes": 2, "pod": {"env": {"A": "1"}}}


def test_a_huge_spec_and_huge_annotations_are_stored_within_bounds():
    big = {"nodes": 2, "pod": {"env": {f"V{i}": "x" * 8000 for i in range(64)},
                               "volumes": [{"name": f"v{i}", "configMap": {"name": "c" * 200}} for i in range(500)]}}
    b = body(big, {"note": "y" * 200_000, "small": "1"})
    text = stored(storage(), b)
    assert len(text) <= 3 * PART  # spec and metadata, at most PART each
    essence = json.loads(text)
    assert essence["spec"]["nodes"] == 2  # small parts keep their values
    assert essence["metadata"]["annotations"]["small"] == "1"
    assert essence["metadata"]["annotations"]["note"].startswith("sha256:")


def test_a_change_inside_a_compacted_part_is_still_a_change_and_none_is_none():
    s = storage()
    spec = {"nodes": 2, "pod": {"env": {f"V{i}": "x" * 8000 for i in range(10)}}}
    before = s.build(body=body(spec))
    assert s.build(body=body(json.loads(json.dumps(spec)))) == before  # the same object: no diff
    changed = json.loads(json.dumps(spec))
    changed["pod"]["env"]["V3"] = "z" * 8000
    after = s.build(body=body(changed))
    assert after != before and after["spec"]["nodes"] == before["spec"]["nodes"]
    assert after["spec"]["pod"] != before["spec"]["pod"]  # the diff points at spec.pod (kopf's field="spec" fires)


def test_many_small_annotations_are_bounded_and_kopf_can_still_read_them():
    """A map too large even value by value becomes {"sha256": ...}: still a map, as kopf's own code needs."""
    s = storage()
    annotations = {f"team.example.com/note-{i}": "v" * 80 for i in range(2000)}  # ~220 KiB, each value small
    b = body({"nodes": 1}, annotations)
    text = stored(s, b)
    assert len(text) <= 3 * PART
    essence = s.build(body=b)
    assert list(essence["metadata"]["annotations"]) == ["sha256"]
    progress = kopf.AnnotationsProgressStorage(prefix="gpu-acceptance.io")
    old = progress.clear(essence=essence)  # what kopf does with every essence before diffing
    changed = dict(annotations, **{"team.example.com/note-7": "w"})
    new = progress.clear(essence=s.build(body=body({"nodes": 1}, changed)))
    assert old != new and old["spec"] == new["spec"] == {"nodes": 1}


def test_compact_bounds():
    assert compact({"a": 1}) == {"a": 1}
    assert compact("x" * (LEAF + 1)).startswith("sha256:")
    many = {f"k{i}": "v" * 100 for i in range(1000)}
    assert len(json.dumps(compact(many))) <= PART
    assert compact_map(many) == {"sha256": compact(many)}
    small = {"spec": {"nodes": 1}}
    assert compact_essence(small) is small and len(json.dumps(small)) < WHOLE_LIMIT
