"""The operator's settings from the environment the chart sets; bad values are refused by name."""

from __future__ import annotations

import subprocess
import sys

import kopf
import pytest
from acceptance_operator.plumbing.settings import FINALIZER, OperatorSettings, configure_kopf
from acceptance_operator.resource.api import DEFAULT_OPERATOR_IMAGE
from acceptance_workload import __version__
from kopf._cogs.structs.references import Resource


def test_defaults(monkeypatch):
    for var in ("GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS", "GPU_ACCEPTANCE_NODE_ACTIONS",
                "GPU_ACCEPTANCE_DEFAULT_IMAGE", "GPU_ACCEPTANCE_RESYNC_SECONDS", "GPU_ACCEPTANCE_WORKERS",
                "GPU_ACCEPTANCE_REPORT_GRACE_SECONDS", "GPU_ACCEPTANCE_METRICS_PORT",
                "GPU_ACCEPTANCE_NODE_LOST_GRACE_SECONDS"):
        monkeypatch.delenv(var, raising=False)
    s = OperatorSettings.from_env()
    assert (s.unschedulable_grace_seconds, s.node_actions, s.default_image) == (600, False, None)
    assert (s.resync_seconds, s.workers, s.report_grace_seconds, s.metrics_port) == (60, 16, 30, 8470)
    assert s.node_lost_grace_seconds == 60


def test_values(monkeypatch):
    monkeypatch.setenv("GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS", "90")
    monkeypatch.setenv("GPU_ACCEPTANCE_NODE_ACTIONS", "true")
    monkeypatch.setenv("GPU_ACCEPTANCE_DEFAULT_IMAGE", "registry.local/workload:dev")
    monkeypatch.setenv("GPU_ACCEPTANCE_REPORT_GRACE_SECONDS", "7")
    monkeypatch.setenv("GPU_ACCEPTANCE_NODE_LOST_GRACE_SECONDS", "12.5")
    s = OperatorSettings.from_env()
    assert (s.unschedulable_grace_seconds, s.node_actions, s.default_image) == (90, True, "registry.local/workload:dev")
    timing = s.timing()  # what the assessment is given: the same three graces, in its field order
    assert (timing.unschedulable_grace_seconds, timing.report_grace_seconds, timing.node_lost_grace_seconds) == (
        90, 7, 12.5)


@pytest.mark.parametrize(("var", "value"), [
    ("GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS", "ten minutes"),
    ("GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS", "-1"),
    ("GPU_ACCEPTANCE_NODE_ACTIONS", "maybe"),
    ("GPU_ACCEPTANCE_RESYNC_SECONDS", "0"),
    ("GPU_ACCEPTANCE_WORKERS", "0"),
])
def test_bad_values_name_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=var):
        OperatorSettings.from_env()


def test_kopf_settings():
    settings = kopf.OperatorSettings()
    configure_kopf(settings)
    assert settings.persistence.finalizer == FINALIZER == "gpu-acceptance.io/finalizer"
    assert settings.peering.standalone is True
    assert settings.persistence.progress_storage.prefix == "gpu-acceptance.io"
    # Only the tests' own jobs and pods are watched (server-side label selector).
    for resource in (Resource("", "v1", "pods"), Resource("kubeflow.org", "v1", "pytorchjobs"),
                     Resource("kubeflow.org", "v2beta1", "mpijobs"), Resource("batch", "v1", "jobs"),
                     Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")):
        assert settings.watching.label_selectors.collect(resource) == ["gpu-acceptance.io/test"]
    assert settings.watching.label_selectors.collect(Resource("", "v1", "configmaps")) == []


def test_user_policy_and_init_image(monkeypatch):
    for var in ("GPU_ACCEPTANCE_INIT_IMAGE", "GPU_ACCEPTANCE_ALLOW_HOST_PATH",
                "GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME", "GPU_ACCEPTANCE_ALLOW_HOST_NETWORK"):
        monkeypatch.delenv(var, raising=False)
    s = OperatorSettings.from_env()
    assert s.init_image == DEFAULT_OPERATOR_IMAGE and s.init_image.endswith(f":{__version__}")
    assert (s.allow_host_path, s.allow_service_account_name, s.allow_host_network) == (False, False, False)
    monkeypatch.setenv("GPU_ACCEPTANCE_INIT_IMAGE", "mirror.local/busybox:1.36")
    monkeypatch.setenv("GPU_ACCEPTANCE_ALLOW_HOST_PATH", "true")
    monkeypatch.setenv("GPU_ACCEPTANCE_ALLOW_SERVICE_ACCOUNT_NAME", "yes")
    s = OperatorSettings.from_env()
    assert (s.init_image, s.allow_host_path, s.allow_service_account_name) == ("mirror.local/busybox:1.36", True, True)
    assert s.allow_host_network is False
    monkeypatch.setenv("GPU_ACCEPTANCE_ALLOW_HOST_NETWORK", "on")
    assert OperatorSettings.from_env().allow_host_network is True
    monkeypatch.setenv("GPU_ACCEPTANCE_ALLOW_HOST_PATH", "sometimes")
    with pytest.raises(ValueError, match="GPU_ACCEPTANCE_ALLOW_HOST_PATH"):
        OperatorSettings.from_env()


def test_settings_import_no_kopf():
    """`gpu-acceptance render` applies the operator's settings without kopf installed."""
    code = ("import sys, acceptance_operator.plumbing.settings, acceptance_operator.plumbing.policy, "
            "acceptance_operator.building.manifests; sys.exit('kopf' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_allowed_images_and_node_action_namespaces(monkeypatch):
    """Comma-separated lists; the namespaces default to the operator's own (POD_NAMESPACE), outside a pod to none."""
    for var in ("GPU_ACCEPTANCE_ALLOWED_IMAGES", "GPU_ACCEPTANCE_NODE_ACTION_NAMESPACES", "POD_NAMESPACE",
                "GPU_ACCEPTANCE_DEFAULT_IMAGE"):
        monkeypatch.delenv(var, raising=False)
    s = OperatorSettings.from_env()
    assert (s.allowed_images, s.node_action_namespaces) == ((), ())
    assert s.image_entries() == (f"ghcr.io/gpu-acceptance/workload:{__version__}",)
    monkeypatch.setenv("POD_NAMESPACE", "gpu-acceptance-system")
    assert OperatorSettings.from_env().node_action_namespaces == ("gpu-acceptance-system",)
    monkeypatch.setenv("GPU_ACCEPTANCE_NODE_ACTION_NAMESPACES", " ops, burn-in ,")
    monkeypatch.setenv("GPU_ACCEPTANCE_ALLOWED_IMAGES", "registry.local/gpu/,sha256:" + "a" * 64)
    monkeypatch.setenv("GPU_ACCEPTANCE_DEFAULT_IMAGE", "registry.local/workload:dev")
    s = OperatorSettings.from_env()
    assert s.node_action_namespaces == ("ops", "burn-in")
    assert s.image_entries() == ("registry.local/workload:dev", "registry.local/gpu/", "sha256:" + "a" * 64)
