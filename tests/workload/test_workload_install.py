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
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_workload.checks.nccl import nccltests
from acceptance_workload.contract.terms import COLLECTIVES
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
        if not args.startswith("--from="):  # the nccl-tests stage's binaries, not the build context
            copied |= {w.rstrip("/") for w in args.split()[:-1]}
    staged = re.search(r"^IMAGE_FILES=\((.*)\)$", SCRIPT.read_text(), flags=re.M)
    assert staged and copied == set(staged.group(1).split())


def test_dockerfile_installs_only_through_the_script_on_a_cuda_pytorch_base() -> None:
    assert re.search(r"^ARG BASE_IMAGE=pytorch/pytorch:\S+-cuda\S+$", DOCKERFILE, flags=re.M)
    build, skip, efa_build, efa_skip, run = instructions("RUN")
    assert build == ("PYTHON=python bash /build/hack/install-workload.sh nccl-tests /opt/nccl-tests/bin "
                     "${NCCL_TESTS_SRC}")
    assert skip.startswith("mkdir -p /opt/nccl-tests/bin && echo ")  # the skip stage: only the reason
    # the aws-ofi-nccl plugin (network.fabric efa): built by the script from a given source tree, or skipped
    assert efa_build == "bash /build/hack/install-workload.sh aws-ofi-nccl /opt/aws-ofi-nccl ${AWS_OFI_NCCL_SRC}"
    assert efa_skip.startswith("mkdir -p /opt/aws-ofi-nccl/lib && echo ")
    assert run.split("&&")[0].strip() == "AWS_OFI_NCCL=${AWS_OFI_NCCL} bash hack/install-workload.sh system"
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
    if shutil.which("nvcc") is None:  # no CUDA here: the nccl-tests build is skipped, saying so
        assert "nvcc not found: skipping the nccl-tests build" in out
        assert "nccl-tests all_reduce_perf" not in out
    else:
        assert re.search(r"^ok\s+nccl-tests all_reduce_perf\s", out, flags=re.M), out[-4000:]
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


def test_the_image_builds_nccl_tests_where_the_workload_looks_and_requires_them() -> None:
    """A CUDA devel stage of the same PyTorch and CUDA builds them; the image copies them to the folder the
    cross-check looks in and names it in GPU_ACCEPTANCE_NCCL_TESTS_DIR, which makes its install check require them."""
    base = re.search(r"^ARG BASE_IMAGE=(\S+)-runtime$", DOCKERFILE, flags=re.M)
    assert base and re.search(rf"^ARG BUILD_IMAGE={re.escape(base.group(1))}-devel$", DOCKERFILE, flags=re.M)
    assert re.search(r"^FROM \$\{BUILD_IMAGE\} AS nccl-tests-build$", DOCKERFILE, flags=re.M)
    # NCCL_TESTS=skip (hack/build-images.sh without a source tree) takes a stage that leaves only the reason.
    assert re.search(r"^ARG NCCL_TESTS=build$", DOCKERFILE, flags=re.M)
    assert re.search(r"^FROM nccl-tests-\$\{NCCL_TESTS\} AS nccl-tests$", DOCKERFILE, flags=re.M)
    assert f"{nccltests.IMAGE_DIR}/{nccltests.SKIPPED_FILE}" in DOCKERFILE
    assert f"--from=nccl-tests {nccltests.IMAGE_DIR}/ {nccltests.IMAGE_DIR}/" in instructions("COPY")
    env = " ".join(instructions("ENV"))
    assert f"{nccltests.DIR_ENV}={nccltests.IMAGE_DIR}" in env
    script = SCRIPT.read_text()
    binaries = re.search(r"^NCCL_TESTS_BINARIES=\((.*)\)$", script, flags=re.M)
    assert binaries and binaries.group(1).split() == [nccltests.binary_name(c) for c in COLLECTIVES]
    assert re.search(r"^NCCL_TESTS_TAG=v\d+\.\d+\.\d+$", script, flags=re.M)
    assert re.search(r"^NCCL_TESTS_COMMIT=[0-9a-f]{40}$", script, flags=re.M)
    assert 'if [ -n "${GPU_ACCEPTANCE_NCCL_TESTS_DIR:-}" ]; then nccl=(--nccl-tests); fi' in script


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_nccl_tests_step_builds_single_process_against_torchs_nccl(tmp_path: Path) -> None:
    """With a stand-in nvcc and nccl-tests tree (no CUDA here): what the step hands make, and what it installs."""
    src = tmp_path / "src"
    (src / "src").mkdir(parents=True)
    (src / "src" / "common.h").write_text('#define NCCL_TESTS_VERSION "2.19.6"\n')
    (src / "Makefile").write_text(
        "default:\n\tmkdir -p $(BUILDDIR)\n\ttest -e $(NCCL_HOME)/lib/libnccl.so\n"
        "\tfor b in all_reduce all_gather reduce_scatter alltoall broadcast sendrecv reduce; do "
        "echo 'MPI=$(MPI) NCCL_HOME=$(NCCL_HOME)' > $(BUILDDIR)/$${b}_perf; done\n")
    _executable(tmp_path / "cuda" / "bin" / "nvcc", "#!/bin/sh\nexit 0\n")
    nccl = tmp_path / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "include" / "nccl.h").write_text("")
    (nccl / "lib").mkdir()
    (nccl / "lib" / "libnccl.so.2").write_text("")
    env = {**os.environ, "PATH": f"{tmp_path / 'cuda' / 'bin'}:{os.environ['PATH']}", "NCCL_HOME": str(nccl)}
    out = tmp_path / "bin"
    proc = subprocess.run(["bash", str(SCRIPT), "nccl-tests", str(out), str(src)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(nccltests.binary_name(c) for c in COLLECTIVES)
    assert all(os.access(p, os.X_OK) for p in out.iterdir())
    assert (out / "all_reduce_perf").read_text().startswith("MPI=0 NCCL_HOME=")
    assert "building nccl-tests 2.19.6" in proc.stderr and str(nccl) in proc.stderr
    # bench/compare_nccl_tests.sh keeps the objects in the tree's build/ and takes the binaries from there
    kept = src / "build"
    proc = subprocess.run(["bash", str(SCRIPT), "nccl-tests", str(kept), str(src)], capture_output=True, text=True,
                          env={**env, "NCCL_TESTS_BUILDDIR": str(kept)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (kept / "all_reduce_perf").read_text().startswith("MPI=0") and os.access(kept / "sendrecv_perf", os.X_OK)
    no_cuda = {**env, "PATH": os.environ["PATH"], "CUDA_HOME": str(tmp_path / "none")}
    if shutil.which("nvcc", path=os.environ["PATH"]) is None:
        proc = subprocess.run(["bash", str(SCRIPT), "nccl-tests", str(tmp_path / "bin2"), str(src)], env=no_cuda,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "nvcc not found" in proc.stderr and not (tmp_path / "bin2").exists()
