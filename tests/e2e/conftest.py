"""The real node (tests/realnode.py) for the end-to-end tests, started once for this package, with the chart installed
(and stopped after it, so the rest of the suite does not share the CPU with a kubelet).

These tests run this project's built images (`make images`) in pods of a real kubelet. In CI (CI set) a real node
that cannot start fails the session; elsewhere the tests skip, saying why.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.helm import CHART, helm
from tests.realnode import RealNode, RealNodeError, built_images, missing_tools

RELEASE = "gpu-acceptance"
RELEASE_NAMESPACE = "gpu-acceptance-system"


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
    except RealNodeError as e:
        node.down(quiet=True)
        cannot_run(str(e))
    try:
        yield node
    finally:
        node.down(quiet=True)


@pytest.fixture(scope="package")
def operator_release(real_node: RealNode) -> Iterator[RealNode]:
    """The chart installed with the built operator image (never pulled), the node's values on top."""
    env = {**os.environ, "KUBECONFIG": str(real_node.kubeconfig)}
    helm("install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
         "-f", str(real_node.dir / "values.yaml"), "--wait", "--timeout", "100s",
         env=env)
    yield real_node
    helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", "--timeout", "100s", env=env, check=False)
