"""`make push` (hack/push.sh) with what the README's quick start lists, not what `make tools` installs: buildah
alone (no podman on PATH) and a Helm found on PATH. It pushes both built images and the chart into the real node's
registry (already holding them from the package's fixture, so only a few requests travel) and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import PUSH_SCRIPT
from tests.helm import helm_binary
from tests.realnode import RealNode, chart_version

pytestmark = pytest.mark.timeout(600, func_only=True)


def path_without_podman(folder: Path) -> str:
    """A PATH of this one folder: every command on the current PATH (the first of each name) but podman, and the
    Helm the tests use as `helm`."""
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            target = folder / entry.name
            if entry.name not in ("podman", "helm") and not target.exists() and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    (folder / "helm").symlink_to(helm_binary())
    return str(folder)


def test_make_push_with_buildah_alone_and_helm_on_path(real_node: RealNode, tmp_path: Path):
    if shutil.which("buildah") is None:
        pytest.fail("buildah is not installed here: hack/install-tools.sh containers installs it")
    reg = real_node.registry
    env = {k: v for k, v in os.environ.items() if k not in ("REGISTRY_USER", "REGISTRY_PASSWORD", "HELM")}
    env.update(PATH=path_without_podman(tmp_path / "bin"), GPU_ACCEPTANCE_CACHE=str(tmp_path / "no-tools"),
               REGISTRY=reg.address, REGISTRY_CA=str(reg.ca_file), REGISTRY_AUTH_FILE=str(reg.auth_file))
    proc = subprocess.run(["bash", str(PUSH_SCRIPT)], env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    version = chart_version()
    for name in ("operator", "workload"):
        assert f"pushed {reg.image(name, version)}" in proc.stderr, proc.stderr
        assert version in reg.get(f"gpu-acceptance/{name}/tags/list")["tags"]
    assert f"pushed oci://{reg.address}/charts/gpu-acceptance:" in proc.stderr, proc.stderr
