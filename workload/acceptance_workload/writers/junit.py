"""A report as JUnit XML, for CI systems that gate on acceptance (`--junit FILE`).

One testsuite per check that ran (in the registry's order), one testcase per check result (a check whose parts ask
for it, as the soak's do: one per GPU, holding all of its judgements), its failure carrying the result's message
and evidence. Fail closed as the report is (report.py): an enabled check without any result is one more
failed testcase, and a run that could not complete is an errored one, so a CI
gate that only counts failures cannot pass a report that did not pass.
Skipped measurements are listed in the suite's output, never as passes; so is
what a check adds there (its parts' junit_out, report/parts.py: the nccl suite
gets the localisation stage's table of pairs, the evidence behind each node's
inter_node_busbw testcase).

Pure: the standard library's ElementTree, and the registry for the checks' parts.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from acceptance_workload.checks.registry import CHECK_NAMES, CHECKS
from acceptance_workload.checks.report_model import Report
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.rules import STAGE_ERROR
from acceptance_workload.report.model import GpuIdentity
from acceptance_workload.report.parts import NO_PARTS

SUITES_NAME = "gpu-acceptance"
RUN_CASE = "run"  # the errored testcase of a run that could not complete


def case_name(r: CheckResult) -> str:
    """'gemm_tflops [node gpu-node-7, GPU 3]': the measurement and where it was taken."""
    where = [f"node {r.node}"] if r.node else []
    if r.gpu is not None:
        where.append(f"GPU {r.gpu}")
    return r.name + (f" [{', '.join(where)}]" if where else "")


def _number(v: float | None) -> str:
    return "missing" if v is None else f"{v:g}"


def evidence(r: CheckResult, gpu: GpuIdentity | None = None) -> str:
    """The failure's body: every field a person needs to judge the result again, and the GPU's identity."""
    sign = {"ge": ">=", "le": "<=", "eq": "==", "info": "(not judged)"}[r.comparison]
    lines = [f"value: {_number(r.value)} {r.unit}".rstrip()]
    if r.threshold is not None and r.comparison != "info":
        lines.append(f"threshold: {sign} {r.threshold:g} {r.unit}".rstrip()
                     + (" (the profile's estimate)" if r.estimated else ""))
    for label, text in (("observed", r.observed), ("expected", r.expected), ("node", r.node)):
        if text:
            lines.append(f"{label}: {text}")
    if r.gpu is not None:
        lines.append(f"gpu: {r.gpu}")
    if gpu is not None:
        lines += [f"gpu {label}: {text}" for label, text in (
            ("serial", gpu.serial), ("bus id", gpu.bus_id), ("uuid", gpu.uuid), ("vbios", gpu.vbios),
            ("inforom", gpu.inforom)) if text]
    if r.message:
        lines.append(f"detail: {r.message}")
    return "\n".join(lines)


def _traceback(report: Report, r: CheckResult) -> str:
    """A stage_error's traceback (stages.py), the evidence of an exception a rank raised in the check's stage."""
    found = next((e for e in report.stage_errors if r.name == STAGE_ERROR and (e.check, e.node, e.gpu) == (
        r.check, r.node, r.gpu)), None)
    return "" if found is None else f"\ntraceback (rank {found.rank}):\n{found.traceback}"


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", {"classname": classname, "name": name, "time": "0"})


def _gpu_cases(suite: ET.Element, classname: str, report: Report, results: list[CheckResult]) -> list[ET.Element]:
    """One testcase per GPU (the soak: a dozen judgements of one GPU over hours are one burn-in of that GPU), failed
    with every failed judgement's evidence; each passed judgement is listed in the case's output."""
    by_gpu: dict[tuple[str, int], list[CheckResult]] = {}
    for r in results:
        if r.gpu is not None:
            by_gpu.setdefault((r.node or "", r.gpu), []).append(r)
    cases = []
    for (node, gpu), mine in by_gpu.items():
        case = _case(suite, classname, f"{mine[0].check} [node {node}, GPU {gpu}]")
        bad = [r for r in mine if not r.passed]
        if bad:
            ident = report.gpu_identity(node, gpu)
            ET.SubElement(case, "failure", {
                "message": "; ".join(r.message or r.name for r in bad)[:1000],
                "type": "missing" if any(r.value is None for r in bad) else "threshold",
            }).text = "\n\n".join(f"[{r.name}]\n" + evidence(r, ident) + _traceback(report, r) for r in bad)
        ET.SubElement(case, "system-out").text = "\n".join(
            f"{'pass' if r.passed else 'FAIL'} {r.name}: {_number(r.value)} {r.unit}".rstrip()
            + (f" ({r.message})" if r.message else "") for r in mine)
        cases.append(case)
    return cases


def _suite_attrs(suite: ET.Element, cases: list[ET.Element]) -> None:
    kinds = Counter(child.tag for case in cases for child in case if child.tag in ("failure", "error"))
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(kinds["failure"]))
    suite.set("errors", str(kinds["error"]))
    suite.set("skipped", "0")


def junit_xml(report: Report, name: str = "local", problems: list[str] | None = None) -> str:
    """The report as a JUnit XML document; `name` (the test's namespace/name, or 'local') names the suites.

    Each suite is made on its own: one whose evidence cannot be written keeps a bare testcase per result (its
    pass or failure, so the document's verdict is the report's) and says why in its system-err, and a line in
    `problems` (exports.py prints it)."""
    root = ET.Element("testsuites", {"name": f"{SUITES_NAME} {name}"})
    checks = [c for c in CHECK_NAMES if c in report.checks_run or any(r.check == c for r in report.results)]
    all_cases: list[ET.Element] = []
    for check in checks:
        suite = ET.SubElement(root, "testsuite", {"name": f"{name} {check}"})
        try:
            cases = _check_suite(suite, report, check, name)
        except Exception as e:
            why = f"{type(e).__name__}: {str(e).strip()[:300]}"
            if problems is not None:
                problems.append(f"the {check} suite's evidence left out: {why}")
            suite.clear()
            suite.set("name", f"{name} {check}")
            cases = _bare_cases(suite, report, check)
            ET.SubElement(suite, "system-err").text = f"this suite's evidence could not be written: {why}"
        _suite_attrs(suite, cases)
        all_cases += cases
    if report.error:
        suite = ET.SubElement(root, "testsuite", {"name": f"{name} {RUN_CASE}"})
        case = _case(suite, f"{SUITES_NAME}.{RUN_CASE}", RUN_CASE)
        ET.SubElement(case, "error", {"message": report.error[:500], "type": "run"}).text = report.error
        _suite_attrs(suite, [case])
        all_cases.append(case)
    _suite_attrs(root, all_cases)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _check_suite(suite: ET.Element, report: Report, check: str, name: str) -> list[ET.Element]:
    """One check's testcases with their evidence, the skipped measurements in the suite's output."""
    classname = f"{SUITES_NAME}.{check}"
    if report.mode == "cpu-smoke":
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", {"name": "mode", "value": "cpu-smoke (NOT a GPU acceptance verdict)"})
    results = [r for r in report.results if r.check == check]
    parts = next((c.parts for c in CHECKS if c.name == check), NO_PARTS)  # the check's own (report/parts.py)
    cases = _gpu_cases(suite, classname, report, results) if parts.junit_per_gpu else []
    for r in (r for r in results if not parts.junit_per_gpu or r.gpu is None):
        case = _case(suite, classname, case_name(r))
        if not r.passed:
            message = r.message or f"{r.name}: {_number(r.value)} {r.unit}".rstrip()
            ident = report.gpu_identity(r.node, r.gpu)
            ET.SubElement(case, "failure", {"message": message, "type": "missing" if r.value is None
                                            else "threshold"}).text = evidence(r, ident) + _traceback(report, r)
        cases.append(case)
    cases += _missing_case(suite, report, check)
    out = [f"not measured: {s.name}: {s.reason}" for s in report.skipped if s.check == check]
    if parts.junit_out and (text := parts.junit_out(report)):  # the check's own output (nccl: the localisation)
        out.append(text)
    if out:
        ET.SubElement(suite, "system-out").text = "\n".join(out)
    return cases


def _missing_case(suite: ET.Element, report: Report, check: str) -> list[ET.Element]:
    """An enabled check without any result: one more failed testcase (fail closed)."""
    if check not in report.missing_checks():
        return []
    case = _case(suite, f"{SUITES_NAME}.{check}", f"{check} (no result)")
    ET.SubElement(case, "failure", {"message": f"check {check} was enabled and produced no result",
                                    "type": "missing"}).text = "A missing measurement fails (fail closed)."
    return [case]


def _bare_cases(suite: ET.Element, report: Report, check: str) -> list[ET.Element]:
    """A testcase per result with its pass or failure only: what a suite keeps when its evidence failed."""
    cases = []
    for r in (r for r in report.results if r.check == check):
        case = _case(suite, f"{SUITES_NAME}.{check}", case_name(r))
        if not r.passed:
            ET.SubElement(case, "failure", {"message": (r.message or r.name)[:1000], "type": "threshold"})
        cases.append(case)
    return cases + _missing_case(suite, report, check)
