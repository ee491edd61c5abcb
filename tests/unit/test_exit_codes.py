"""One exit-code rule for every command (acceptance_workload.contract.exits, README "Exit codes"): 0 yes, 1 no,
2 could not.

Each command is run as a user runs it (a subprocess of the real CLI); the cases of `report` against a cluster
(no report yet, a rejected delivery) are in tests/cluster/test_operator_evidence.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_workload.contract import exits

ROOT = Path(__file__).resolve().parents[2]
VALID = "apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: t}\nspec: {nodes: 1}\n"
INVALID = "apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: t}\nspec: {nodes: 0}\n"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_SERVICE", "RANK", "WORLD_SIZE"))}
    return subprocess.run([sys.executable, "-m", "acceptance_operator.cli", *args], cwd=cwd,
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=120)


def test_the_codes_are_the_documented_ones() -> None:
    """README's table and the constants say the same, and the workload's and `local`'s names use them."""
    from acceptance_workload import local, run

    table = dict(re.findall(r"^\| (\d) \| ([a-z ]+) \|", (ROOT / "README.md").read_text(), re.M))
    assert table == {"0": "yes", "1": "no", "2": "could not answer"}
    assert (exits.YES, exits.NO, exits.CANNOT) == (0, 1, 2)
    assert (run.EXIT_PASSED, run.EXIT_FAILED, run.EXIT_ERROR, local.EXIT_ERROR) == (0, 1, 2, 2)
    assert "Exit codes everywhere: 0 passed" not in (ROOT / "README.md").read_text()


@pytest.mark.parametrize(("args", "stdin_file", "code"), [
    (("crd",), None, exits.YES),
    (("render", "t.yaml"), VALID, exits.YES),
    (("render", "t.yaml"), INVALID, exits.NO),
    (("render", "absent.yaml"), None, exits.CANNOT),
    (("no-such-command",), None, exits.CANNOT),
    (("render",), None, exits.CANNOT),  # a missing argument
])
def test_offline_commands(tmp_path: Path, args: tuple[str, ...], stdin_file: str | None, code: int) -> None:
    if stdin_file is not None:
        (tmp_path / "t.yaml").write_text(stdin_file)
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == code, proc.stderr[-2000:]


def test_report_without_a_cluster_could_not_answer(tmp_path: Path) -> None:
    """Not Python's 1 from a traceback (that would read as "no report yet"): 2, saying what is missing."""
    proc = cli("report", "t", cwd=tmp_path, env={"KUBECONFIG": str(tmp_path / "absent")})
    assert proc.returncode == exits.CANNOT and "no cluster to read t from" in proc.stderr, proc.stderr[-2000:]


def test_local_with_a_manifest_it_cannot_use_could_not_answer(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(VALID.replace("spec: {nodes: 1}", "spec: {checks: {nccl: {minBytes: -5}}}"))
    proc = cli("local", "--cpu", "-f", "t.yaml", cwd=tmp_path)
    assert proc.returncode == exits.CANNOT and "spec.checks.nccl.minBytes" in proc.stderr, proc.stderr[-2000:]


def test_an_unexpected_error_is_could_not_answer(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from acceptance_operator import cli as cli_module
    from acceptance_operator.resource import crd

    def boom() -> str:
        raise RuntimeError("the unexpected")

    monkeypatch.setattr(crd, "crd_yaml", boom)
    assert cli_module.main(["crd"]) == exits.CANNOT
    assert "gpu-acceptance crd: error: RuntimeError: the unexpected" in capsys.readouterr().err
