"""The operator's one door into the workload (acceptance_operator/workload.py), and judging that names no check.

Every term of the workload the operator uses comes through the door, so what the operator depends on is one list;
a check's own judgement (nccl's inter-node rows, which failure says the job failed, ddp's ranks a folded verdict
keeps) comes from the check's package through the registry (its CHECK's `rejudge` hook), so judging/ names none.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import acceptance_operator
import pytest
from acceptance_operator import workload
from acceptance_operator.judging import rejudge
from acceptance_workload.checks import registry, table
from acceptance_workload.checks.registry import CHECK_NAMES
from acceptance_workload.contract.results import CheckResult

OPERATOR = Path(acceptance_operator.__file__).parent
DOOR = OPERATOR / "workload.py"
JUDGING = OPERATOR / "judging"


def workload_imports(tree: ast.AST) -> list[str]:
    """Every import of acceptance_workload in a module, at its top or inside a function (lazy)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "acceptance_workload"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "acceptance_workload":
            found.append(node.module)
    return found


def test_the_scanner_finds_each_form_of_import() -> None:
    """The next test would pass vacuously if the scanner found nothing: it finds each form."""
    code = ("import acceptance_workload\nfrom acceptance_workload.contract import exits\n"
            "def f():\n    import acceptance_workload.local as l\n    from acceptance_workload import local\n")
    assert workload_imports(ast.parse(code)) == ["acceptance_workload", "acceptance_workload.contract",
                                                 "acceptance_workload.local", "acceptance_workload"]
    assert workload_imports(ast.parse(DOOR.read_text()))  # the door itself does import it


def test_only_the_door_imports_the_workload() -> None:
    modules = sorted(OPERATOR.rglob("*.py"))
    assert len(modules) > 50
    offenders = {str(p.relative_to(OPERATOR)): workload_imports(ast.parse(p.read_text()))
                 for p in modules if p != DOOR}
    assert {p: names for p, names in offenders.items() if names} == {}


def test_every_name_the_door_lists_is_there_and_lazy_ones_are_found_on_first_use() -> None:
    for name in workload.__all__:
        assert getattr(workload, name) is not None, name
    from acceptance_workload.local import run_local
    from acceptance_workload.report.status import patch_report

    assert workload.run_local is run_local and workload.patch_report is patch_report
    with pytest.raises(AttributeError, match="no attribute 'nothing_of_the_workload'"):
        _ = workload.nothing_of_the_workload


def test_the_door_imports_neither_torch_nor_kopf_nor_the_kubernetes_client() -> None:
    """The operator image has no torch, and `crd`/`render` run without kopf or the client: the door, the CLI and
    the CRD import none of them (nor do the door's lazy entry points the commands use)."""
    code = ("import sys\nimport acceptance_operator.workload, acceptance_operator.cli, acceptance_operator.render\n"
            "import acceptance_operator.resource.crd\n"
            "print(sorted(m for m in ('torch', 'kopf', 'kubernetes') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# A result's own fields (its `gpu`: the index of the GPU it measured) are the contract's, whatever a check is called.
RESULT_FIELDS = set(CheckResult.model_fields)


def names_in(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string and identifier of a module that is a check's name (a result's own fields aside)."""
    checks = set(CHECK_NAMES)
    for node in ast.walk(tree):
        found: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node.name)
        elif isinstance(node, ast.arg):
            found.append(node.arg)
        elif isinstance(node, ast.alias):
            found += [node.name.rsplit(".", 1)[-1], node.asname or ""]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += node.module.split(".")
        elif isinstance(node, ast.Attribute) and node.attr not in RESULT_FIELDS:
            found.append(node.attr)
        elif isinstance(node, ast.keyword) and node.arg and node.arg not in RESULT_FIELDS:
            found.append(node.arg)
        yield from ((getattr(node, "lineno", 0), f) for f in found if f in checks)


def test_the_name_scanner_finds_a_check_named_each_way() -> None:
    code = ("from x.nccl import y\nimport ddp\na = 'p2p'\nb = r.ddp\nc = f(soak=1)\nd = fsdp\ndef storage(): pass\n"
            "def g(signals): pass\ne = r.gpu\nh = CheckResult(gpu=1)\n")
    assert sorted(f for _, f in names_in(ast.parse(code))) == ["ddp", "ddp", "fsdp", "nccl", "p2p", "signals",
                                                                "soak", "storage"]


def test_judging_names_no_check() -> None:
    """What judging/ knows of one check comes from that check's package through the registry."""
    paths = sorted(JUDGING.glob("*.py"))
    assert {p.name for p in paths} >= {"rejudge.py", "verdict.py", "assessment.py"}
    named = {p.name: sorted(set(names_in(ast.parse(p.read_text())))) for p in paths}
    assert {p: n for p, n in named.items() if n} == {}


def test_a_checks_own_judgement_comes_from_its_package_through_the_registry() -> None:
    """Every kind of row the table holds has a judge; the kinds only one check writes are that check's hook, as
    are the tests of a failure that says the job failed and the details whose node rows a folded verdict keeps."""
    kinds = {row.kind for row in table.RULES.values()}
    assert kinds <= set(rejudge.KIND_JUDGES)
    hooked = [(c, c.rejudge) for c in registry.CHECKS if c.rejudge]
    assert hooked  # nccl and ddp have one
    for check, hook in hooked:
        for kind, judge_kind in hook.kinds.items():
            assert kind not in rejudge.SHARED_KINDS and rejudge.KIND_JUDGES[kind] is judge_kind
            assert judge_kind.__module__.startswith(f"acceptance_workload.checks.{check.name}."), kind
        if hook.job_failed:
            assert hook.job_failed in rejudge.JOB_FAILED
            assert hook.job_failed.__module__.startswith(f"acceptance_workload.checks.{check.name}.")
        assert {d.name for d in rejudge.GATHERED if d in check.details} == set(hook.gathered)
        assert set(hook.gathered) <= {d.name for d in check.details}  # a check gathers only its own details
    assert set(rejudge.KIND_JUDGES) == set(rejudge.SHARED_KINDS) | {k for _, h in hooked for k in h.kinds}
