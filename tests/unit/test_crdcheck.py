"""crdcheck: which fields of this operator's schema an installed (older) AcceptanceTest CRD lacks."""

from __future__ import annotations

import copy

from acceptance_operator.plumbing.crdcheck import CrdCheck, missing_fields, outdated_message
from acceptance_operator.resource.crd import build_crd


def _schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_generated_crd_lacks_nothing():
    assert missing_fields(build_crd(), build_crd()) == []


def test_an_older_crd_names_the_outermost_missing_fields_of_spec_and_status():
    old = build_crd()
    spec = _schema(old)["properties"]["spec"]["properties"]
    del spec["checks"]["properties"]["nccl"]  # a whole object: its own fields are not listed again
    pod = spec["pod"]["properties"]
    volume = pod["volumes"]["items"]["properties"]
    removed = sorted(volume)[0]
    del volume[removed]  # a field of list items
    del _schema(old)["properties"]["status"]["properties"]["soak"]
    assert missing_fields(old, build_crd()) == sorted(
        ["spec.checks.nccl", f"spec.pod.volumes[].{removed}", "status.soak"])


def test_a_crd_that_does_not_serve_the_version_lacks_everything():
    old = build_crd()
    old["spec"]["versions"][0]["served"] = False
    assert missing_fields(old, build_crd()) == ["spec (version v1alpha1 is not served)",
                                                "status (version v1alpha1 is not served)"]


def test_the_check_tells_a_change_once_and_an_upgrade_clears_it():
    check, old = CrdCheck(), copy.deepcopy(build_crd())
    del _schema(old)["properties"]["spec"]["properties"]["schedule"]
    assert check.missing is None
    assert check.update(old) == ["spec.schedule"]
    assert check.update(old) is None  # unchanged: nothing to tell
    assert check.update(build_crd()) == [] and check.missing == []


def test_the_message_names_the_fields_and_the_fix_and_stays_short():
    text = outdated_message([f"spec.f{i}" for i in range(50)])
    assert "spec.f0" in text and "and 30 more" in text and "spec.f49" not in text
    assert "kubectl apply --server-side" in text and "crds.upgrade=true" in text
