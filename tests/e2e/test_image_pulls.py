"""The real node pulls from an authenticated registry, as a user's cluster pulls from a private one.

The package's fixtures started the registry (tests/registry.py: distribution, htpasswd, TLS from its own CA), ran
`make push` into it (hack/push.sh: both images and the chart as an OCI artifact) and installed the chart from
oci://, with the node's values naming the registry's images and the pull Secret. Here: the chart and the images are
really in the registry and it refuses a wrong login; the operator's pods pulled its image with the chart's Secret;
and a test whose pull Secret holds a wrong password fails at once, Reason ImagePullFailed naming ErrImagePull, while
the same image with the right Secret pulls.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import RELEASE_NAMESPACE
from tests.e2e.test_real_node import apply, finished, get_json, smoke_test, succeeded_reason, wait_for
from tests.helm import CHART
from tests.realnode import RealNode, chart_version
from tests.registry import IMAGE_PATH, PULL_SECRET, USER

# func_only: the package's fixtures (real node up, the first `make push` of the ~6 GB workload image: minutes on a
# fresh machine) have their own time limits (tests/e2e/conftest.py) and do not eat the first test's.
pytestmark = pytest.mark.timeout(600, func_only=True)
PROBE_TAG = "pull-probe"  # the workload's manifest under a tag no pod on the node has used
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"


def manifest(node: RealNode, repository: str, tag: str) -> tuple[bytes, str]:
    """The registry's manifest for repository:tag, raw, and its media type."""
    reg = node.registry
    request = urllib.request.Request(f"https://{reg.address}/v2/{repository}/manifests/{tag}", headers={
        "Authorization": "Basic " + _basic(reg.password()),
        "Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=str(reg.ca_file)),
                                timeout=10) as answer:
        return answer.read(), answer.headers["Content-Type"]


def _basic(password: str) -> str:
    return base64.b64encode(f"{USER}:{password}".encode()).decode()


def test_the_chart_and_both_images_are_in_the_registry_which_refuses_a_wrong_login(operator_release: RealNode) -> None:
    node, reg = operator_release, operator_release.registry
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    assert str(version) in reg.get("charts/gpu-acceptance/tags/list")["tags"]
    body, _ = manifest(node, "charts/gpu-acceptance", str(version))
    assert json.loads(body)["config"]["mediaType"] == HELM_CONFIG
    for name in ("operator", "workload"):
        assert chart_version() in reg.get(f"{IMAGE_PATH}/{name}/tags/list")["tags"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        reg.get(f"{IMAGE_PATH}/workload/tags/list", password="not-the-password")
    assert refused.value.code == 401


def events_of(node: RealNode, namespace: str, pod: str) -> list[dict[str, Any]]:
    return get_json(node, "events", "-n", namespace, "--field-selector", f"involvedObject.name={pod}")["items"]


def test_the_operator_pod_pulled_its_image_from_the_registry_with_the_charts_pull_secret(
        operator_release: RealNode) -> None:
    node = operator_release
    pods = [p for p in get_json(node, "pods", "-n", RELEASE_NAMESPACE)["items"]
            if p["status"].get("phase") == "Running"]
    assert pods, "no operator pod runs"
    for pod in pods:  # the chart's replicas
        assert pod["spec"]["imagePullSecrets"] == [{"name": PULL_SECRET}]
        container = pod["spec"]["containers"][0]
        assert (container["image"], container["imagePullPolicy"]) == (
            node.registry.image("operator", chart_version()), "Always")
        pulled = [e["message"] for e in events_of(node, RELEASE_NAMESPACE, pod["metadata"]["name"])
                  if e["reason"] == "Pulled"]
        assert any(m.startswith(f'Successfully pulled image "{container["image"]}"') for m in pulled), pulled


@pytest.fixture
def pull_namespace(operator_release: RealNode) -> Iterator[str]:
    """A namespace of its own holding the registry's pull Secret (as test_real_node's test_namespace)."""
    name = f"e2e-pull-{uuid.uuid4().hex[:6]}"
    operator_release.add_pull_secret(name)
    yield name
    operator_release.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _probe_image(node: RealNode) -> str:
    """The workload's manifest tagged PROBE_TAG in the registry (a manifest PUT: no layer travels), and no image of
    that name on the node, so a pod naming it makes the kubelet pull."""
    image = node.registry.tag("workload", chart_version(), PROBE_TAG)
    node.ctr("images", "rm", image, check=False)
    assert image not in node.ctr("images", "ls", "-q").stdout.split()
    return image


def test_a_wrong_password_fails_the_run_at_once_naming_err_image_pull(operator_release: RealNode,
                                                                    pull_namespace: str) -> None:
    test_namespace = pull_namespace
    node, name = operator_release, "wrong-password"
    image = _probe_image(node)
    node.add_pull_secret(test_namespace, name="wrong-password", password="not-the-password")
    test = smoke_test(name, "Job")
    test["spec"]["image"] = image
    test["spec"]["pod"]["imagePullSecrets"] = ["wrong-password"]
    t0 = time.monotonic()
    apply(node, test_namespace, test)
    obj = finished(node, test_namespace, name, timeout=180)
    took = time.monotonic() - t0
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Failed", "ImagePullFailed"), message
    assert f"on node {node.node}: container workload is ErrImagePull (image {image})" in message, message
    assert "401 Unauthorized" in message and "wrong user or password" in message, message
    assert took < 120, f"ImagePullFailed after {took:.0f}s"

    # The same image with the right Secret pulls: only the password differed. (A pod needs its namespace's default
    # ServiceAccount, which the controller-manager creates shortly after the namespace.)
    wait_for("the namespace's default ServiceAccount", lambda: node.kubectl(
        "get", "serviceaccount", "default", "-n", test_namespace, check=False).returncode == 0, 60, node,
        test_namespace)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "right-password"},
           "spec": {"restartPolicy": "Never", "imagePullSecrets": [{"name": PULL_SECRET}],
                    "containers": [{"name": "c", "image": image, "command": ["python", "-c", "pass"]}]}}
    apply(node, test_namespace, pod)

    def pulled() -> list[str]:
        return [e["message"] for e in events_of(node, test_namespace, "right-password") if e["reason"] == "Pulled"]

    messages = wait_for("the right Secret's pull", pulled, 120, node, test_namespace)
    assert messages[0].startswith(f'Successfully pulled image "{image}"'), messages
    node.kubectl("delete", "pod", "right-password", "-n", test_namespace, "--wait=false")
    node.ctr("images", "rm", image, check=False)
