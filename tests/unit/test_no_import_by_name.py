"""The workload's lower families import nothing by name at first use: the registry hands its check names down to the
contract (results.declare_checks) and the evidence is handed the assembled Report (checks/report_model.parts,
assemble), so the import graph the structure drawing shows is the whole of it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import acceptance_workload
import pytest
from acceptance_workload.checks.registry import CHECK_NAMES
from acceptance_workload.checks.report_model import Report, assemble
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract import results
from acceptance_workload.contract.config import TestRef
from acceptance_workload.report import evidence

from tests.reports import passing_report

WORKLOAD = Path(acceptance_workload.__file__).parent
BELOW_THE_CHECKS = ("contract", "report", "runtime", "configuration")


def by_name(tree: ast.AST) -> list[str]:
    """Imports done by name at run time: importlib, __import__."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "importlib"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "importlib":
            found.append(node.module or "")
        elif isinstance(node, ast.Name) and node.id == "__import__":
            found.append("__import__")
    return found


def test_the_scanner_finds_an_import_by_name() -> None:
    code = "import importlib\nfrom importlib import import_module\nx = __import__('y')\n"
    assert by_name(ast.parse(code)) == ["importlib", "importlib", "__import__"]


def test_the_families_below_the_checks_import_nothing_by_name() -> None:
    paths = [p for family in BELOW_THE_CHECKS for p in sorted((WORKLOAD / family).glob("*.py"))]
    assert len(paths) > 20
    found = {str(p.relative_to(WORKLOAD)): by_name(ast.parse(p.read_text())) for p in paths}
    assert {p: names for p, names in found.items() if names} == {}


def test_the_registry_hands_its_names_down_and_without_it_a_result_says_what_to_import() -> None:
    assert results.check_names() == CHECK_NAMES
    code = ("from acceptance_workload.contract.results import CheckResult\n"
            "try:\n    CheckResult(check='gpu', name='x', passed=True)\n"
            "except LookupError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "acceptance_workload.checks.registry" in out.stdout and "no check names are declared" in out.stdout


def test_the_evidence_reads_its_shards_as_the_report_it_is_handed() -> None:
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=3, gpus_per_node=8,
                                  test=TestRef(name="t", namespace="ns", uid="u-1", generation=4))
    report = passing_report(config)
    status, shards = evidence.split(report, evidence.shard_names("t-evidence", 3))
    whole = assemble(status, shards)
    assert type(whole) is Report and sorted(r.model_dump_json() for r in whole.results) == sorted(
        r.model_dump_json() for r in report.results)
    assert type(evidence.assemble(status, shards, Report)) is Report
    with pytest.raises(evidence.EvidenceError, match="validation errors for ReportBase"):
        next(evidence.parts(status, shards.get, evidence.ReportBase))  # what it is handed, nothing it looks up
