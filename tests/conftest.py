"""Shared fixtures. The real API server (tests/apiserver.py) starts once per session, on first use.

Tests that use the `apiserver` fixture (directly or through another fixture)
are marked `cluster` automatically, so `pytest -m "not cluster"` skips them.
"""

from __future__ import annotations

import os
import string
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apiserver import ApiServer, backend_crd_paths


@pytest.hookimpl(tryfirst=True)  # before -m filtering
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "apiserver" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def apiserver() -> Iterator[ApiServer]:
    """etcd + kube-apiserver (RBAC on, loopback only) with the backend CRDs (PyTorchJob, MPIJob, JobSet) installed."""
    server = ApiServer()
    server.start()
    try:
        server.install_crds(backend_crd_paths())
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kubeconfig(apiserver: ApiServer) -> Path:
    """The admin kubeconfig (group system:masters)."""
    return apiserver.kubeconfig


@pytest.fixture
def kube_env(apiserver: ApiServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment for subprocesses (kubectl, the CLI) pointed at the server as admin.

    Also sets KUBECONFIG in this process for the duration of the test, so
    in-process clients (kubernetes.config.load_kube_config()) find it.
    """
    env = apiserver.env()
    monkeypatch.setenv("KUBECONFIG", env["KUBECONFIG"])
    monkeypatch.setenv("KUBECACHEDIR", env["KUBECACHEDIR"])
    return env


@pytest.fixture
def namespace(apiserver: ApiServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test (deletion is requested afterwards; no controller finalizes it)."""
    allowed = string.ascii_lowercase + string.digits
    base = "".join(c if c in allowed else "-" for c in request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base or 't'}-{uuid.uuid4().hex[:6]}"
    apiserver.create_namespace(name, labels={"gpu-acceptance.io/test-namespace": "true"})
    yield name
    if not os.environ.get("KEEP_TEST_NAMESPACES"):
        apiserver.delete_namespace(name)
