"""Dockerfile.operator and its install steps (hack/install-operator.sh), run for real without a Docker engine.

`make operator-install-check` stages the files the Dockerfile copies, installs
them with the script the Dockerfile runs into a fresh venv, and smoke-tests the
installed operator. The static tests keep the Dockerfile and that replay in step.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile.operator").read_text()
SCRIPT = REPO / "hack" / "install-operator.sh"


def instructions(name: str) -> list[str]:
    """Arguments of every `NAME ...` instruction (continuation lines joined)."""
    text = DOCKERFILE.replace("\\\n", " ")
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.*)$", text, flags=re.M)]


def final_stage() -> str:
    return DOCKERFILE.rsplit("\nFROM ", 1)[1]


def test_dockerfile_copies_exactly_what_the_check_stages() -> None:
    copied = set()
    for args in instructions("COPY"):
        words = args.split()
        if any(w.startswith("--from") for w in words):
            continue
        copied |= {w.rstrip("/") for w in words[:-1]}
    staged = re.search(r"^IMAGE_FILES=\((.*)\)$", SCRIPT.read_text(), flags=re.M)
    assert staged, "IMAGE_FILES missing from hack/install-operator.sh"
    assert copied == set(staged.group(1).split())


def test_dockerfile_installs_with_the_script_and_runs_the_operator_as_non_root() -> None:
    # The base is a build arg (hack/build-images.sh passes a Debian-made one where no registry answers); its default
    # stays the public image.
    assert re.search(r"^ARG BASE_IMAGE=python:3\.12-slim$", DOCKERFILE, flags=re.M)
    assert instructions("FROM")[0].startswith("${BASE_IMAGE}")
    assert final_stage().startswith("${BASE_IMAGE}")
    (run_install,) = [r for r in instructions("RUN") if "hack/install-operator.sh" in r]
    assert "pip install" not in run_install, "the image installs only through the script the check replays"
    assert instructions("USER")[-1] == "65532:65532"
    assert json.loads(instructions("ENTRYPOINT")[-1]) == ["gpu-acceptance", "operator"]
    chart_values = yaml.safe_load((REPO / "charts" / "gpu-acceptance" / "values.yaml").read_text())
    assert chart_values["podSecurityContext"]["runAsUser"] == 65532
    assert "pip install" in SCRIPT.read_text() and "--no-cache-dir" in SCRIPT.read_text()


def test_script_refuses_what_it_cannot_install(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "has no pyproject.toml" in proc.stderr
    proc = subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "unknown option --bogus" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_make_operator_install_check() -> None:
    """Install into a fresh venv (pip cache reused: ~20 s warm) and run the installed CLI and every module."""
    proc = subprocess.run(["make", "--no-print-directory", "operator-install-check"], cwd=REPO,
                          capture_output=True, text=True, timeout=230, stdin=subprocess.DEVNULL)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "ok: the operator installs from the image's files and runs" in out
    imported = re.search(r"imported \d+ operator modules with kubernetes \S+: (.*)", out)
    assert imported, out
    package = REPO / "operator" / "acceptance_operator"
    parts = [p.relative_to(package).with_suffix("").parts for p in package.rglob("*.py")]
    modules = {".".join(("acceptance_operator", *(q[:-1] if q[-1] == "__init__" else q))) for q in parts} - {
        "acceptance_operator"}  # a subpackage counts by its own name, as pkgutil.walk_packages lists it
    assert set(imported.group(1).split(", ")) == modules
