"""hack/push.sh (`make push`) with what a newcomer has: buildah without podman, and a Helm on PATH rather than the
one `make tools` installs. The container tool and helm are stand-ins on PATH that record their calls (the registry
is not what is tested here: tests/e2e pushes to a real one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PUSH = REPO / "hack" / "push.sh"
TOOLS = ("bash", "sed", "mktemp", "rm", "mkdir", "cp", "dirname", "cat", "touch", "printf")

# A stand-in reads the password it is handed on stdin as the real login does: one that exits first would leave the
# script's `printf ... |` writing to a closed pipe (SIGPIPE, 141 under pipefail) whenever the printf comes late.
RECORDER = """#!/bin/bash
echo "${0##*/} $*" >> "$CALLS"
case " $* " in *" --password-stdin "*) cat > /dev/null ;; esac
if [ "${0##*/}" = helm ] && [ "$1" = package ]; then
  while [ $# -gt 0 ]; do [ "$1" = --destination ] && touch "$2/gpu-acceptance-$VERSION_CHART.tgz"; shift; done
fi
exit 0
"""


def bin_with(tmp_path: Path, *fakes: str) -> Path:
    """A PATH of the few real tools the script needs and recording stand-ins for `fakes`."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS:
        real = shutil.which(tool)
        if real:
            (folder / tool).symlink_to(real)
    for fake in fakes:
        (folder / fake).write_text(RECORDER)
        (folder / fake).chmod(0o755)
    return folder


def push(tmp_path: Path, folder: Path, **extra: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    calls = tmp_path / "calls"
    chart_version = next(line.split(":", 1)[1].strip().strip('"') for line in
                         (REPO / "charts/gpu-acceptance/Chart.yaml").read_text().splitlines()
                         if line.startswith("version:"))
    env = {"PATH": str(folder), "HOME": str(tmp_path), "CALLS": str(calls), "VERSION_CHART": chart_version,
           "GPU_ACCEPTANCE_CACHE": str(tmp_path / "cache"),  # no helm from `make tools` there
           "REGISTRY": "registry.example:5000", "REGISTRY_USER": "me", "REGISTRY_PASSWORD": "secret",
           "VERSION": "9.9.9", **extra}
    proc = subprocess.run([str(folder / "bash"), str(PUSH)], env=env, capture_output=True, text=True, timeout=60)
    return proc, calls.read_text().splitlines() if calls.exists() else []


def test_buildah_alone_and_helm_on_path_push_both_images_and_the_chart(tmp_path: Path):
    proc, calls = push(tmp_path, bin_with(tmp_path, "buildah", "helm"))
    assert proc.returncode == 0, proc.stderr
    pushes = [c for c in calls if c.startswith("buildah push")]
    assert len(pushes) == 2, calls
    for name in ("operator", "workload"):
        assert any(f"ghcr.io/gpu-acceptance/{name}:9.9.9 docker://registry.example:5000/gpu-acceptance/{name}:9.9.9"
                   in c and "--authfile" in c for c in pushes), pushes
    assert any(c.startswith("buildah inspect --type image ghcr.io/gpu-acceptance/workload:9.9.9") for c in calls)
    assert any(c.startswith("buildah login") and "--username me" in c for c in calls)
    assert any(c.startswith("helm push") and c.endswith("oci://registry.example:5000/charts") for c in calls), calls
    assert "pushed oci://registry.example:5000/charts/gpu-acceptance:" in proc.stderr


def test_podman_is_used_where_it_is_installed(tmp_path: Path):
    proc, calls = push(tmp_path, bin_with(tmp_path, "podman", "buildah", "helm"))
    assert proc.returncode == 0, proc.stderr
    assert [c.split()[0] for c in calls if " push " in f" {c} " and not c.startswith("helm")] == ["podman"] * 2


@pytest.mark.parametrize(("fakes", "words"), [
    (("helm",), "neither podman nor buildah is installed"),
    (("buildah",), "helm is not installed: put Helm 3.8+ on PATH, set HELM, or run make tools"),
])
def test_what_is_missing_is_named(tmp_path: Path, fakes: tuple[str, ...], words: str):
    proc, calls = push(tmp_path, bin_with(tmp_path, *fakes))
    assert proc.returncode == 1 and words in proc.stderr, proc.stderr
    assert not [c for c in calls if " push " in f" {c} "]


def test_a_helm_named_by_HELM_wins(tmp_path: Path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "helm").write_text(RECORDER)
    (own / "helm").chmod(0o755)
    proc, calls = push(tmp_path, bin_with(tmp_path, "buildah"), HELM=str(own / "helm"))
    assert proc.returncode == 0, proc.stderr
    assert any(c.startswith("helm push") for c in calls), calls
