"""`make images` runs on any machine `make tools` prepared, whatever its container configuration chooses.

A fresh machine may have crun installed and chosen by podman (Debian's podman pulls in crun first), and crun refuses
hybrid-cgroup hosts like the CI's ("cgroups in hybrid mode not supported"). hack/build-images.sh therefore picks its
OCI runtime itself (runc where installed, OCI_RUNTIME to choose another) for the RUN steps of a build and for the
install checks it runs in the images. This test hands it a containers.conf that selects crun, as such a machine has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import cannot_run

REPO = Path(__file__).resolve().parents[2]
CRUN_CONF = '[engine]\nruntime = "crun"\n'
pytestmark = pytest.mark.timeout(300)


def _need(tool: str) -> str:
    """The tool's path; without it the test fails in CI and skips elsewhere, as the real node's tests do."""
    path = shutil.which(tool)
    if path is None:
        cannot_run(f"{tool} is not installed (make tools installs it)")
    assert path is not None
    return path


def test_a_build_under_a_configuration_that_selects_crun_runs_its_steps_with_runc(tmp_path: Path) -> None:
    _need("podman")
    runc = _need("runc")
    conf = tmp_path / "containers.conf"
    conf.write_text(CRUN_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    chosen = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], env=env,
                            capture_output=True, text=True)
    # The configuration does select crun: podman names it, or refuses because it is not there.
    assert "crun" in chosen.stdout + chosen.stderr, (chosen.stdout, chosen.stderr)

    done = subprocess.run(["bash", str(REPO / "hack" / "build-images.sh"), "runtime-check"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"OCI runtime: {runc}" in done.stderr
    assert done.stdout.strip().splitlines()[-1] == "built with a RUN step"


def test_oci_runtime_names_the_runtime_and_a_missing_one_is_refused_before_any_build(tmp_path: Path) -> None:
    _need("podman")
    env = {**os.environ, "OCI_RUNTIME": "no-such-runtime"}
    done = subprocess.run(["bash", str(REPO / "hack" / "build-images.sh"), "runtime-check"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "OCI_RUNTIME=no-such-runtime is not installed" in done.stderr
    assert "built with a RUN step" not in done.stdout
