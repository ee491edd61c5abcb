"""`python -m acceptance_workload --check-install --efa`: the aws-ofi-nccl plugin and libfabric's efa provider.

No EFA stack on this machine: each piece is put in place from outside, as the check's own process would find it
(real shared objects compiled here, on LD_LIBRARY_PATH; a `fi_info` first on PATH; NCCL_NET_PLUGIN), and the check
is run as a separate process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CC = shutil.which("cc") or shutil.which("gcc")


def shared_object(folder: Path, name: str, source: str) -> Path:
    """A real ELF shared object `name` in `folder`, compiled from C `source`."""
    if CC is None:
        pytest.fail("a C compiler (cc) is needed to build the fake libraries")
    folder.mkdir(parents=True, exist_ok=True)
    c = folder / f"{name}.c"
    c.write_text(source)
    out = folder / name
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(out), str(c)], check=True, capture_output=True)
    c.unlink()
    return out


def plugin(folder: Path, name: str = "libnccl-net.so", network: str = "Libfabric", version: int = 8) -> Path:
    """A fake NCCL network plugin: the ncclNetPlugin_vN struct whose first member is the network's name."""
    return shared_object(folder, name, f'struct net {{ const char *name; void *init; }};\n'
                                       f'struct net ncclNetPlugin_v{version} = {{ "{network}", 0 }};\n')


def fi_info(folder: Path, providers: list[str]) -> Path:
    """A fake `fi_info` printing `-l` output: one `name:` line per provider, then its version."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "fi_info"
    body = "".join(f"echo '{p}:'; echo '    version: 122.0'; " for p in providers)
    script.write_text(f"#!/bin/sh\n[ \"$1\" = -l ] || exit 2\n{body}\n")
    script.chmod(0o755)
    return script


def check(tmp_path: Path, libs: Path, bins: Path, **env: str) -> tuple[int, dict[str, str]]:
    """Run the check; (exit code, {component: its line})."""
    environ = {k: v for k, v in os.environ.items() if k != "NCCL_NET_PLUGIN"}
    environ.update({"LD_LIBRARY_PATH": str(libs), "PATH": f"{bins}:{os.environ['PATH']}", **env})
    proc = subprocess.run([sys.executable, "-m", "acceptance_workload", "--check-install", "--efa"], env=environ,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = {}
    for line in proc.stdout.splitlines():
        for name in ("aws-ofi-nccl plugin", "libfabric efa provider", "libfabric "):
            if line[9:].startswith(name):
                lines[name.strip()] = line
                break
    return proc.returncode, lines


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Path, Path]:
    """A complete fake EFA stack: the plugin (network Libfabric), libfabric.so.1 and an fi_info listing efa."""
    libs, bins = tmp_path / "lib", tmp_path / "bin"
    plugin(libs)
    shared_object(libs, "libfabric.so.1", "int fi_version(void) { return 0; }\n")
    fi_info(bins, ["tcp", "efa", "shm"])
    return libs, bins


def test_the_whole_stack_passes(tmp_path: Path, stack: tuple[Path, Path]):
    code, lines = check(tmp_path, *stack)
    assert lines["aws-ofi-nccl plugin"].startswith("ok") and "libnccl-net.so" in lines["aws-ofi-nccl plugin"]
    assert "network 'Libfabric'" in lines["aws-ofi-nccl plugin"]
    assert lines["libfabric"].startswith("ok") and lines["libfabric efa provider"].startswith("ok")
    # the rest of the installation (torch, ...) decides the exit code too; the EFA lines are what is asserted
    assert code in (0, 1)


def test_no_plugin_fails_saying_how_to_get_one(tmp_path: Path, stack: tuple[Path, Path]):
    libs, bins = stack
    (libs / "libnccl-net.so").unlink()
    code, lines = check(tmp_path, libs, bins)
    assert code == 1
    line = lines["aws-ofi-nccl plugin"]
    assert line.startswith("MISSING") and "libnccl-net.so" in line and "libnccl-net-ofi.so" in line
    assert "AWS_OFI_NCCL_SRC" in line
    # an image built without the plugin says why (its SKIPPED file)
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "SKIPPED").write_text("built without the aws-ofi-nccl plugin (no source tree given)\n")
    _, lines = check(tmp_path, libs, bins, GPU_ACCEPTANCE_AWS_OFI_NCCL_DIR=str(tmp_path / "plugin"))
    assert "this image was built without the aws-ofi-nccl plugin (no source tree given)" in (
        lines["aws-ofi-nccl plugin"])


def test_the_ofi_name_and_nccl_net_plugin_are_found(tmp_path: Path, stack: tuple[Path, Path]):
    libs, bins = stack
    (libs / "libnccl-net.so").rename(libs / "libnccl-net-ofi.so")
    _, lines = check(tmp_path, libs, bins)
    assert lines["aws-ofi-nccl plugin"].startswith("ok") and "libnccl-net-ofi.so" in lines["aws-ofi-nccl plugin"]
    # NCCL_NET_PLUGIN=ofi names libnccl-net-ofi.so only; =aws names a file that is not there
    _, lines = check(tmp_path, libs, bins, NCCL_NET_PLUGIN="ofi")
    assert lines["aws-ofi-nccl plugin"].startswith("ok")
    code, lines = check(tmp_path, libs, bins, NCCL_NET_PLUGIN="aws")
    assert code == 1 and lines["aws-ofi-nccl plugin"].startswith("MISSING")
    assert "libnccl-net-aws.so" in lines["aws-ofi-nccl plugin"]


@pytest.mark.parametrize("network", ["AWS Libfabric", "Libfabric"])
def test_both_plugin_network_names_pass(tmp_path: Path, stack: tuple[Path, Path], network: str):
    libs, bins = stack
    plugin(libs, network=network, version=6)
    _, lines = check(tmp_path, libs, bins)
    assert lines["aws-ofi-nccl plugin"].startswith("ok") and f"network '{network}'" in lines["aws-ofi-nccl plugin"]


def test_another_network_plugin_or_a_library_without_the_entry_point_fails(tmp_path: Path,
                                                                            stack: tuple[Path, Path]):
    libs, bins = stack
    plugin(libs, network="gIB")
    code, lines = check(tmp_path, libs, bins)
    assert code == 1 and "not aws-ofi-nccl's libfabric one" in lines["aws-ofi-nccl plugin"]
    shared_object(libs, "libnccl-net.so", "int unrelated(void) { return 1; }\n")
    code, lines = check(tmp_path, libs, bins)
    assert code == 1 and "no ncclNetPlugin_v* symbol" in lines["aws-ofi-nccl plugin"]


def test_libfabric_without_the_efa_provider_fails(tmp_path: Path, stack: tuple[Path, Path]):
    libs, bins = stack
    fi_info(bins, ["tcp", "udp", "shm"])
    code, lines = check(tmp_path, libs, bins)
    assert code == 1
    line = lines["libfabric efa provider"]
    assert line.startswith("MISSING") and "no efa provider" in line and "shm, tcp, udp" in line


def test_no_libfabric_fails(tmp_path: Path, stack: tuple[Path, Path]):
    libs, bins = stack
    (libs / "libfabric.so.1").write_text("not an ELF file")
    code, lines = check(tmp_path, libs, bins)
    assert code == 1 and lines["libfabric"].startswith("MISSING") and "libfabric1" in lines["libfabric"]
