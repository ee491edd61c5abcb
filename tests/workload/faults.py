"""Faults from outside the workload for `gpu-acceptance local --cpu` runs: a raising function, a small or
read-only filesystem.

`faultshim/sitecustomize.py` (put on the ranks' PYTHONPATH) makes a function raise in one rank; `tmpfs` mounts a
small filesystem where this machine lets the test (the CI runs as root), and says when it cannot.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from acceptance_workload.checks.report_model import Report

from tests.workload.test_local import cli

SHIM = Path(__file__).resolve().parent / "faultshim"

MANIFEST = """apiVersion: gpu-acceptance.io/v1alpha1
kind: AcceptanceTest
metadata: {name: t}
spec:
  storage: {volume: {persistentVolumeClaim: {claimName: shared}}}
  checks:
%s
"""
ALL_OFF = {"preflight": {"enabled": False}, "gpu": {"enabled": False}, "p2p": {"enabled": False},
           "nccl": {"enabled": False}, "ddp": {"enabled": False}, "signals": {"enabled": False}}


def fault_env(fault: str | None) -> dict[str, str]:
    """TEST_FAULT (see faultshim) with the shim first on every rank's PYTHONPATH."""
    if fault is None:
        return {}
    return {"TEST_FAULT": fault, "PYTHONPATH": os.pathsep.join([str(SHIM), os.environ.get("PYTHONPATH", "")])}


def run_local(tmp_path: Path, checks: dict, *args: str, fault: str | None = None,
              env: dict[str, str] | None = None) -> tuple[int, Report, str]:
    """`local --cpu` with these checks (the default ones off unless given), a report in r.json; `env` over
    fault_env's."""
    merged = {**ALL_OFF, **checks}
    lines = "\n".join(f"    {name}: {json.dumps(spec)}" for name, spec in merged.items())
    (tmp_path / "t.yaml").write_text(MANIFEST % lines)
    proc = cli("--cpu", "-f", "t.yaml", "--json", "r.json", *args, cwd=tmp_path,
               env={**fault_env(fault), **(env or {})})
    out = proc.stdout + proc.stderr
    assert (tmp_path / "r.json").exists(), f"no report written (exit {proc.returncode}):\n{out[-4000:]}"
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    return proc.returncode, report, out


@contextlib.contextmanager
def tmpfs(path: Path, size: str, read_only: bool = False) -> Iterator[bool]:
    """A tmpfs of `size` at `path` (read-only when asked); yields False where mounting is not allowed here."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                             capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
