"""Dockerfile.workload and its install steps (hack/install-workload.sh), run for real without a Docker engine.

`make workload-install-check` stages the files the Dockerfile copies, runs
the script's python step (the one the Dockerfile runs) into a fresh venv that
reuses this machine's torch, and runs the installed `gpu-acceptance local
--cpu`. The static tests keep the Dockerfile and that replay in step. The apt
step (OpenMPI, sshd) is not replayed here: it would change this machine; its
RDMA packages are unpacked (not installed) for the replay, whose install check
requires their libraries to load.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_workload.installation import RDMA_LIBRARIES

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
@pytest.mark.timeout(420)
def test_make_workload_install_check() -> None:
    """Install from the image's files into a fresh venv and run the installed CPU smoke test (~30 s warm on an idle
    machine, minutes on a busy one)."""
    proc = subprocess.run(["make", "--no-print-directory", "workload-install-check"], cwd=REPO, capture_output=True,
                          text=True, timeout=400, stdin=subprocess.DEVNULL)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "ok: the workload installs from the image's files and runs" in out
    assert "cpu smoke run from the venv:" in out and "MISSING" not in out
    for soname in RDMA_LIBRARIES:
        assert re.search(rf"^ok\s+{re.escape(soname)}\s+loads$", out, flags=re.M), soname


def test_the_image_installs_the_rdma_libraries_the_check_requires() -> None:
    """The apt step installs rdma-core's user-space packages, and the image's install check loads their libraries."""
    script = SCRIPT.read_text()
    packages = re.search(r"^RDMA_PACKAGES=\((.*)\)$", script, flags=re.M)
    assert packages and set(packages.group(1).split()) == set(RDMA_LIBRARIES.values())
    assert re.search(r'^APT_PACKAGES=\(.*"\$\{RDMA_PACKAGES\[@\]\}"\)$', script, flags=re.M)
    assert "--check-install --rdma" in script


def test_a_missing_rdma_library_fails_the_check_naming_the_package(tmp_path: Path) -> None:
    """A fake libibverbs.so.1 that is not a shared library, first on LD_LIBRARY_PATH: the check fails and says what
    to install (whether or not this machine has rdma-core: the fake is found first)."""
    (tmp_path / "libibverbs.so.1").write_text("not an ELF file")
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "acceptance_workload", "--check-install", "--rdma"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    line = next(x for x in proc.stdout.splitlines() if "libibverbs.so.1" in x)
    assert line.startswith("MISSING") and "install libibverbs1" in line
