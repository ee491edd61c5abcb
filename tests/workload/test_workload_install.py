"""Dockerfile.workload and its install steps (hack/install-workload.sh), run for real without a Docker engine.

`make workload-install-check` stages the files the Dockerfile copies, runs
the script's python step (the one the Dockerfile runs) into a fresh venv that
reuses this machine's torch, and runs the installed `gpu-acceptance local
--cpu`. The static tests keep the Dockerfile and that replay in step. The apt
step (OpenMPI, sshd) is not replayed here: it would change this machine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile.workload").read_text()
SCRIPT = REPO / "hack" / "install-workload.sh"


def instructions(name: str) -> list[str]:
    text = DOCKERFILE.replace("\\\n", " ")
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.*)$", text, flags=re.M)]


def test_dockerfile_copies_exactly_what_the_check_stages() -> None:
    copied = set()
    for args in instructions("COPY"):
        copied |= {w.rstrip("/") for w in args.split()[:-1]}
    staged = re.search(r"^IMAGE_FILES=\((.*)\)$", SCRIPT.read_text(), flags=re.M)
    assert staged and copied == set(staged.group(1).split())


def test_dockerfile_installs_only_through_the_script_on_a_cuda_pytorch_base() -> None:
    assert re.search(r"^ARG BASE_IMAGE=pytorch/pytorch:\S+-cuda\S+$", DOCKERFILE, flags=re.M)
    [run] = instructions("RUN")
    assert run.split("&&")[0].strip() == "bash hack/install-workload.sh system"
    assert "hack/install-workload.sh python /opt/gpu-acceptance" in run
    assert "pip install" not in DOCKERFILE
    assert instructions("CMD") == ['["python", "-m", "acceptance_workload"]']
    script = SCRIPT.read_text()
    assert "openmpi-bin" in script and "openssh-server" in script and "ssh-keygen -A" in script
    assert '"${src}[workload]"' in script and "--check-install" in script


def test_script_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "python", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "has no pyproject.toml" in proc.stderr
    proc = subprocess.run(["bash", str(SCRIPT), "bogus"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "unknown step bogus" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_make_workload_install_check() -> None:
    """Install from the image's files into a fresh venv and run the installed CPU smoke test (~20 s warm)."""
    proc = subprocess.run(["make", "--no-print-directory", "workload-install-check"], cwd=REPO, capture_output=True,
                          text=True, timeout=230, stdin=subprocess.DEVNULL)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "ok: the workload installs from the image's files and runs" in out
    assert "cpu smoke run from the venv:" in out and "MISSING" not in out
