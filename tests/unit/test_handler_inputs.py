"""How the handlers read a stored AcceptanceTest: validated by the models, server fields dropped, image override."""

from __future__ import annotations

import pytest
from acceptance_operator import handlers
from acceptance_operator.building import manifests
from acceptance_operator.resource import spec_input
from acceptance_operator.resource.api import DEFAULT_IMAGE
from pydantic import ValidationError

STORED = {
    "apiVersion": "gpu-acceptance.io/v1alpha1",
    "kind": "AcceptanceTest",
    "metadata": {"name": "quick", "namespace": "lab", "uid": "u-1", "generation": 3, "resourceVersion": "9",
                 "managedFields": [{"manager": "kubectl"}], "finalizers": ["gpu-acceptance.io/finalizer"],
                 "creationTimestamp": "2025-01-01T00:00:00Z"},
    "spec": {"nodes": 2, "image": DEFAULT_IMAGE},
    "status": {"phase": "Running", "report": {"generation": 2}},
}


def test_parse_test_keeps_what_the_builders_need():
    test = handlers.parse_test(STORED)
    assert (test.metadata.name, test.metadata.namespace, test.metadata.uid, test.metadata.generation) == (
        "quick", "lab", "u-1", 3)
    assert test.status is None  # the operator judges status itself, never through the spec model
    assert manifests.job_name(test) == "quick-g3"


def test_parse_test_rejects_what_the_schema_let_through():
    bad = {**STORED, "spec": {"pod": {"volumeMounts": [{"name": "v", "mountPath": "/dev/shm/"}]}}}
    with pytest.raises(ValidationError) as e:
        handlers.parse_test(bad)
    lines = spec_input.validation_messages(e.value, {"spec": bad["spec"]})
    assert lines[0].startswith("spec.pod.volumeMounts[0].mountPath: ")


def test_default_image_override_applies_only_to_the_default(monkeypatch):
    unset = {**STORED, "spec": {"nodes": 2}}
    monkeypatch.setattr(handlers.SETTINGS, "default_image", "registry.local/workload:dev")
    assert handlers._effective(handlers.parse_test(unset)).spec.image == "registry.local/workload:dev"
    # A test stored by an older CRD carries that CRD's default: it counts as unset.
    assert handlers._effective(handlers.parse_test(STORED)).spec.image == "registry.local/workload:dev"
    pinned = {**STORED, "spec": {"image": "ghcr.io/me/workload:1"}}
    assert handlers._effective(handlers.parse_test(pinned)).spec.image == "ghcr.io/me/workload:1"
    monkeypatch.setattr(handlers.SETTINGS, "default_image", None)
    assert handlers._effective(handlers.parse_test(STORED)).spec.image == DEFAULT_IMAGE
    assert handlers._effective(handlers.parse_test(unset)).spec.image == DEFAULT_IMAGE


@pytest.mark.parametrize(("status", "finished"), [
    ({"observedGeneration": 3, "phase": "Succeeded"}, True),
    ({"observedGeneration": 3, "phase": "Failed"}, True),
    ({"observedGeneration": 2, "phase": "Succeeded"}, False),  # the spec changed since: a new run is due
    ({"observedGeneration": 3, "phase": "Running"}, False),
    ({}, False),
])
def test_is_finished_by_the_operators_status(status, finished):
    """The status is the operator's alone (the workload's Role has no verb on AcceptanceTests)."""
    assert handlers.is_finished({"metadata": {"generation": 3}, "status": status}) is finished
