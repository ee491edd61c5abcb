"""The real node (tests/realnode.py) for the end-to-end tests, started once for this package, with the chart installed
(and stopped after it, so the rest of the suite does not share the CPU with a kubelet).

These tests run this project's built images (`make images`) in pods of a real kubelet, which pulls them from the
node's registry (tests/registry.py) with an image pull Secret after `make push` (hack/push.sh) put them there; the
chart is installed from the same registry as an OCI artifact. In CI (CI set) a real node that cannot start fails the
session; elsewhere the tests skip, saying why.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import yaml

from tests.helm import CHART, helm
from tests.realnode import RELEASE_NAMESPACE, RealNode, RealNodeError, built_images, missing_tools

RELEASE = "gpu-acceptance"
__all__ = ["RELEASE", "RELEASE_NAMESPACE", "cannot_run"]
PUSH_SCRIPT = CHART.parents[1] / "hack" / "push.sh"
PUSH_TIMEOUT = 1500  # seconds: the first push of the ~6 GB workload image compresses all its layers


def cannot_run(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the end-to-end tests cannot run: {why}", pytrace=False)
    pytest.skip(f"no real node: {why}")


def _images_missing() -> list[str]:
    return [i for i in built_images() if subprocess.run(["podman", "image", "exists", i]).returncode != 0]


@pytest.fixture(scope="package")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    missing = missing_tools()
    if missing:
        cannot_run(f"missing {', '.join(missing)} (make tools installs them)")
    absent = _images_missing()
    if absent:
        cannot_run(f"images not built: {', '.join(absent)} (make images)")
    # The control plane starts empty every session; containerd's image store (tests.realnode.IMAGE_STORE) is kept.
    node = RealNode(tmp_path_factory.mktemp("real-node"))
    try:
        node.up()
        push(node)
    except RealNodeError as e:
        node.down(quiet=True)
        cannot_run(str(e))
    try:
        yield node
    finally:
        node.down(quiet=True)


def push(node: RealNode) -> None:
    """`make push` to the node's registry: both images and the chart, only what changed (hack/push.sh).

    No lock is taken here: where several people build images on one host, run the e2e under the images' lock
    first and the real node's second (`flock /tmp/images.lock flock /tmp/real-node.lock pytest tests/e2e`), the
    order `make images` callers take them in; a lock taken here, inside the node's, could deadlock with them."""
    reg = node.registry
    env = {k: v for k, v in os.environ.items() if k not in ("REGISTRY_USER", "REGISTRY_PASSWORD")}
    env.update(REGISTRY=reg.address, REGISTRY_CA=str(reg.ca_file), REGISTRY_AUTH_FILE=str(reg.auth_file))
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(PUSH_SCRIPT)], env=env, capture_output=True, text=True, timeout=PUSH_TIMEOUT)
    if proc.returncode != 0:
        raise RealNodeError(f"make push to {reg.address} failed:\n{proc.stderr[-3000:]}")
    (node.dir / "push.log").write_text(proc.stderr + f"push took {time.monotonic() - t0:.0f}s\n")
    t0 = time.monotonic()
    node.pull_pushed(PUSH_TIMEOUT)
    with open(node.dir / "push.log", "a") as log:
        log.write(f"containerd pulled what was pushed in {time.monotonic() - t0:.0f}s\n")


def chart_reference(node: RealNode) -> list[str]:
    """helm's arguments for the chart in the node's registry (its CA, its login), as docs/install.md shows."""
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    return [node.registry.chart(), "--version", str(version), "--ca-file", str(node.registry.ca_file),
            "--registry-config", str(node.registry.auth_file)]


def install_release(node: RealNode) -> None:
    """The chart installed from the node's registry (oci://), the node's values on top: the operator image pulled from
    the registry with the chart's imagePullSecrets."""
    env = {**os.environ, "KUBECONFIG": str(node.kubeconfig)}
    helm("install", RELEASE, *chart_reference(node), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
         "-f", str(node.dir / "values.yaml"), "--wait", "--timeout", "100s",
         env=env)


def uninstall_release(node: RealNode) -> None:
    env = {**os.environ, "KUBECONFIG": str(node.kubeconfig)}
    helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", "--timeout", "100s", env=env, check=False)


def release_installed(node: RealNode) -> bool:
    env = {**os.environ, "KUBECONFIG": str(node.kubeconfig)}
    return helm("status", RELEASE, "--namespace", RELEASE_NAMESPACE, env=env, check=False).returncode == 0


@pytest.fixture(scope="package")
def operator_release(real_node: RealNode) -> Iterator[RealNode]:
    """The chart installed from the node's registry (install_release), for the package's tests."""
    install_release(real_node)
    yield real_node
    uninstall_release(real_node)


@pytest.fixture
def test_namespace(operator_release: RealNode) -> Iterator[str]:
    """A namespace of its own for a test, with the registry's pull Secret (the chart's workloadImagePullSecrets)."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    operator_release.add_pull_secret(name)  # creates the namespace
    yield name
    if not os.environ.get("KEEP_TEST_NAMESPACES"):
        operator_release.kubectl("delete", "namespace", name, "--wait=false", check=False)
