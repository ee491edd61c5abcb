"""The result-rule table (acceptance_workload.contract.rules) is the only map from a result to its threshold.

Three ways a result could escape the table, each closed here: a result a real run writes that has no row
(a gloo CPU smoke run with every stage on, and the names the code declares), a judge that reads a
threshold field itself instead of asking the table, and the operator's re-judging keeping a rule of its own.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_operator.judging import rejudge
from acceptance_operator.judging.rejudge import Context, judge_result
from acceptance_workload.checks import table as rules
from acceptance_workload.checks.gpu import gpubench
from acceptance_workload.checks.nccl import collectives, latency, localize, nccltests
from acceptance_workload.checks.preflight import preflight
from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.checks.registry import CHECK_NAMES
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.terms import COLLECTIVES
from acceptance_workload.runtime import control, stages

from tests.reports import passing_report

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "workload").rglob("*.py"), *(ROOT / "operator").rglob("*.py")])
# Where threshold fields may be read: their definition (checks.py: the spec models and their own helpers), each
# check's profile defaults (checks/<name>/profile.py sets them and cuts them for a CPU smoke run) and the table itself.
MAY_READ_THRESHOLDS = {"checks.py", "profile.py", "rules.py"}
# Fields of the threshold models that are parameters of a measurement, not thresholds of a result.
NOT_RESULT_THRESHOLDS = {"reference_bytes"}


def threshold_fields() -> set[str]:
    names = {attr for model in rules.THRESHOLD_MODELS.values() for attr in model.model_fields}
    return names - NOT_RESULT_THRESHOLDS


def threshold_reads(tree: ast.AST, fields: set[str]) -> list[str]:
    """Reads of a threshold field: `<x>.thresholds.<f>`, `th.<f>`, `thresholds.<f>`, getattr(th, "<f>"),
    and the threshold models' own accessors."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in fields:
            base = node.value
            if (isinstance(base, ast.Attribute) and base.attr == "thresholds") or (
                    isinstance(base, ast.Name) and base.id in ("th", "thresholds", "t")):
                found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in ("cross_check_limit", "busbw_threshold"):
            found.append(f"line {node.lineno}: .{node.attr}()")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and \
                len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in fields:
            found.append(f"line {node.lineno}: getattr {node.args[1].value}")
    return found


def test_the_scanner_finds_a_threshold_read() -> None:
    """The next test would pass vacuously if the scanner found nothing: it finds each form."""
    fields = threshold_fields()
    code = ("a = th.max_gpu_temperature_c\nb = check.thresholds.all_reduce_busbw_gbps\n"
            "c = getattr(th, 'min_gemm_tflops')\nd = check.thresholds.cross_check_limit()\n")
    assert len(threshold_reads(ast.parse(code), fields)) == 4


def test_no_module_but_the_table_reads_a_threshold() -> None:
    fields = threshold_fields()
    offenders = {}
    for path in SOURCES:
        if path.name in MAY_READ_THRESHOLDS:
            continue
        reads = threshold_reads(ast.parse(path.read_text()), fields)
        if reads:
            offenders[str(path.relative_to(ROOT))] = reads
    assert not offenders, f"read thresholds through acceptance_workload.contract.rules instead: {offenders}"


def test_rejudge_keeps_no_rule_of_its_own() -> None:
    """The operator's rules are the table's rows; it judges by a row's kind, never by a result's name."""
    assert rejudge.RULES is rules.RULES
    assert {row.kind for row in rules.RULES.values()} <= set(rejudge.KIND_JUDGES)
    tree = ast.parse((ROOT / "operator/acceptance_operator/judging/rejudge.py").read_text())
    result_names = {name for _, name in rules.RULES}
    # Required results name results to say which must be present; no judgement may key on one.
    judged_by_name = [n.value for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name.startswith("_")
                      and f.name not in ("_few",) for n in ast.walk(f)
                      if isinstance(n, ast.Constant) and n.value in result_names]
    assert not judged_by_name, judged_by_name


def declared_names() -> set[tuple[str, str]]:
    """Every (check, name) the workload's code declares it can emit."""
    names = {("preflight", item[0]) for item in preflight.GPU_ITEMS}
    names |= {("gpu", m.name) for m in gpubench.METRICS} | {("gpu", m.ratio_name) for m in gpubench.METRICS}
    names |= {("nccl", f"{c}{suffix}") for c in collectives.COLLS for suffix in ("_busbw", "_correctness")}
    names |= {("nccl", f"{c}{nccltests.RESULT_SUFFIX}") for c in collectives.COLLS}
    names |= {("nccl", localize.RESULT), ("nccl", localize.BLOCK_RESULT), ("nccl", "node_all_reduce_busbw")}
    names |= {("nccl", name) for name in latency.RESULTS}
    names |= {(check, kind[0]) for kind in control.CULPRIT_KINDS.values() for check in rules.CULPRIT_CHECKS}
    names |= {(check, stages.RESULT) for check in CHECK_NAMES}  # an exception in any check's stage
    return names


def own_table(f: ast.AST) -> bool:
    """RULES.result(...) or table.result(...): a check's Table, whose calls name the result first."""
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("RULES", "table")


def literal_names() -> set[str]:
    """Result names written as literals in the workload's judges (result(), _result(), _flag(), add(), missing(),
    CheckResult(name=...)); names built from a record (f-strings) are in declared_names()."""
    out = set()
    for path in (ROOT / "workload/acceptance_workload").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            func = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if isinstance(f, ast.Attribute) and func == "add" and not (isinstance(f.value, ast.Name)
                                                                       and f.value.id == "j"):
                continue  # a set's add(), not a judge's
            first = node.args[0] if node.args else None
            if func in ("_result", "_flag", "add", "missing") and isinstance(first, ast.Constant):
                out.add(first.value)
            elif func in ("result", "judged") and own_table(f):
                if isinstance(first, ast.Constant):
                    out.add(first.value)  # RULES.result(name, ...): a check's own table
            elif func in ("result", "judged") and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                out.add(node.args[1].value)
            elif func == "CheckResult":
                out |= {k.value.value for k in node.keywords
                        if k.arg == "name" and isinstance(k.value, ast.Constant)}
    return out


def test_every_declared_result_has_a_row() -> None:
    missing = declared_names() - set(rules.RULES)
    assert not missing, missing
    assert set(collectives.COLLS) == set(COLLECTIVES)  # one record per collective the spec can ask for


def test_every_literal_result_name_has_a_row() -> None:
    names = literal_names()
    assert {"shm_size", "gpu_in_use", "throughput_per_gpu", "transport", "pcie_generation"} <= names  # it reads them
    assert names <= {name for _, name in rules.RULES}, names - {name for _, name in rules.RULES}


def test_a_name_without_a_row_cannot_be_emitted() -> None:
    with pytest.raises(rules.UnknownResult, match="add a row"):
        rules.result("preflight", "pcie_speed", 1.0, PreflightThresholds())


def test_an_unreadable_pcie_link_is_judged_by_the_operator() -> None:
    """The drift that started it: preflight wrote pcie_link and the operator did not know it."""
    snap = preflight.GpuSnapshot(index=0, name="NVIDIA H100 80GB HBM3", temperature_c=40, ecc_uncorrected=0,
                                 pending_remap=False, remap_failure=False, throttle_reasons=0,
                                 nvlink_active=18, nvlink_total=18, errors={"pcie": "NVMLError: Not Supported"})
    config = WorkloadConfig.build(checks=ChecksSpec(), nodes=1, gpus_per_node=8, profile="h100-sxm")
    th = config.checks.preflight.thresholds
    results, _ = preflight.judge_gpu(snap, th, "n1", 0)
    link = next(r for r in results if r.name == "pcie_link")
    assert not link.passed and "cannot read pcie_link" in link.message
    judged = judge_result(link, Context(config, passing_report(config)))
    assert not judged.passed and "does not know" not in judged.message
    assert (judged.threshold, judged.comparison) == (link.threshold, link.comparison)


def test_workload_and_operator_agree_on_every_result_of_a_passing_report() -> None:
    """Each result as the workload's judge wrote it, judged again by the operator: same threshold and verdict."""
    config = WorkloadConfig.build(checks=ChecksSpec(), nodes=2, gpus_per_node=8, profile="h100-sxm")
    report = passing_report(config)
    context = Context(config, report)
    for r in report.results:
        judged = judge_result(r, context)
        assert "does not know" not in judged.message, (r.check, r.name)


def test_a_cpu_smoke_run_with_every_stage_writes_only_results_the_table_knows(tmp_path: Path) -> None:
    """A real gloo run on 3 simulated nodes with localisation and the nccl-tests cross-check (whose binaries are
    absent here: its results fail, but they are written): every result has a row, and the operator judges each."""
    manifest = tmp_path / "m.yaml"
    manifest.write_text("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: r}\n"
                        "spec:\n  checks:\n    nccl: {localize: always, crossCheck: true}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "OMPI_", "PMI_"))}
    proc = subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "local", "--cpu", "--gpus", "3",
                           "--simulate-nodes", "3", "-f", str(manifest), "--json", "r.json"], cwd=tmp_path,
                          env=base, capture_output=True, text=True, timeout=240)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    emitted = {(r.check, r.name) for r in report.results}
    assert {("nccl", localize.RESULT), ("nccl", f"all_reduce{nccltests.RESULT_SUFFIX}")} <= emitted
    assert emitted <= set(rules.RULES), emitted - set(rules.RULES)


LITERALS_EXEMPT: set[str] = set()  # none: every judge takes its threshold, comparison and unit from the table


def literal_judgements(tree: ast.AST) -> list[str]:
    """CheckResult(...) calls that spell a threshold, comparison or unit themselves instead of taking the row's."""
    found = []
    for node in ast.walk(tree):
        func = getattr(node, "func", None) if isinstance(node, ast.Call) else None
        if getattr(func, "id", getattr(func, "attr", "")) != "CheckResult":
            continue
        for k in node.keywords:
            if not isinstance(k.value, ast.Constant):
                continue
            if k.arg == "threshold" or (k.arg == "comparison" and k.value.value != "info") or (
                    k.arg == "unit" and k.value.value != ""):
                found.append(f"line {node.lineno}: {k.arg}={k.value.value!r}")
    return found


def test_no_judge_spells_a_threshold_comparison_or_unit() -> None:
    assert literal_judgements(ast.parse("CheckResult(check='nccl', name='x', threshold=1.0, comparison='ge')"))
    paths = [p for p in (ROOT / "workload/acceptance_workload").rglob("*.py")
             if p.name not in LITERALS_EXEMPT | {"rules.py"}]
    paths.append(ROOT / "operator/acceptance_operator/judging/rejudge.py")
    offenders = {p.name: found for p in paths if (found := literal_judgements(ast.parse(p.read_text())))}
    assert not offenders, offenders
