"""JUnit XML of a report, read back with a JUnit reader (junitparser): one testcase per result, failing closed.

tests/workload/test_report_html.py parses the file of a real `local --cpu` run.
"""

from __future__ import annotations

from pathlib import Path

import junitparser
from acceptance_operator.judging.rejudge import RunFacts, rejudge
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef
from acceptance_workload.writers.junit import case_name, junit_xml

from tests.reports import node_names, passing_report, with_slow_node


def cases(path: Path) -> list:
    xml = junitparser.JUnitXml.fromfile(str(path))
    return [case for suite in xml for case in suite]


def judged(tmp_path: Path, fail_node: str | None = None) -> tuple[Report, Path]:
    # p2p off: its suite is a testcase per GPU, not per result (tests/unit/test_p2p.py)
    cfg = WorkloadConfig.build(checks=ChecksSpec.model_validate({"p2p": {"enabled": False}}), profile="h100-sxm",
                               nodes=2, gpus_per_node=8,
                               test=TestRef(name="t", namespace="ns", uid="u-1", generation=1))
    report = passing_report(cfg, ["gpu-node-a", "gpu-node-b"])
    for r in report.results:
        if fail_node and r.name == "gemm_tflops" and r.node == fail_node and r.gpu == 3:
            r.value = 120.0
    report = rejudge(report, RunFacts(cfg, "u-1", frozenset(["gpu-node-a", "gpu-node-b"]))).report
    path = tmp_path / "junit.xml"
    path.write_text(junit_xml(report, "ns/t"))
    return report, path


def test_one_testcase_per_result_all_passing(tmp_path: Path):
    report, path = judged(tmp_path)
    read = cases(path)
    assert report.verdict() and len(read) == len(report.results) > 100
    assert all(c.is_passed for c in read)
    names = sorted((c.classname, c.name) for c in read)
    assert names == sorted((f"gpu-acceptance.{r.check}", case_name(r)) for r in report.results)
    xml = junitparser.JUnitXml.fromfile(str(path))
    assert {s.name for s in xml} == {f"ns/t {c}" for c in report.checks_run}


def test_a_failed_result_is_a_failure_with_its_evidence(tmp_path: Path):
    report, path = judged(tmp_path, fail_node="gpu-node-b")
    read = cases(path)
    assert len(read) == len(report.results)
    failed = [c for c in read if c.is_failure]
    expected = {(f"gpu-acceptance.{r.check}", case_name(r)) for r in report.results if not r.passed}
    assert {(c.classname, c.name) for c in failed} == expected
    gemm = next(c for c in failed if c.name == "gemm_tflops [node gpu-node-b, GPU 3]")
    (failure,) = gemm.result
    assert failure.type == "threshold" and "120" in failure.text and "threshold: >=" in failure.text
    assert "node: gpu-node-b" in failure.text and "gpu: 3" in failure.text
    xml = junitparser.JUnitXml.fromfile(str(path))
    xml.update_statistics()
    assert xml.failures == len(expected) and xml.errors == 0


def test_a_missing_check_and_a_run_error_fail_too(tmp_path: Path):
    report = Report(checks_run=["nccl", "ddp"], error="rank 1 on node gpu-node-b stopped responding").finalize()
    path = tmp_path / "junit.xml"
    path.write_text(junit_xml(report))
    read = cases(path)
    assert [(c.name, c.is_failure, c.is_error) for c in read] == [
        ("nccl (no result)", True, False), ("ddp (no result)", True, False), ("run", False, True)]
    (error,) = read[-1].result
    assert "stopped responding" in error.message


def test_the_localisation_evidence_is_in_the_nccl_suite_and_the_named_nodes_failure(tmp_path: Path):
    cfg = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=4, gpus_per_node=4,
                               test=TestRef(name="t", namespace="ns", uid="u-1", generation=1))
    nodes = node_names(4)
    report = with_slow_node(passing_report(cfg), nodes[1])
    report = rejudge(report, RunFacts(cfg, "u-1", frozenset(nodes))).report
    path = tmp_path / "junit.xml"
    path.write_text(junit_xml(report, "ns/t"))
    xml = junitparser.JUnitXml.fromfile(str(path))
    nccl = next(s for s in xml if s.name == "ns/t nccl")
    out = nccl._elem.find("system-out").text
    assert "# localize: 2 round(s)" in out and f"{nodes[1]}, {nodes[3]}" in out  # round 2: with a known-good node
    failed = [c for c in nccl if c.is_failure]
    assert [c.name for c in failed] == [f"inter_node_busbw [node {nodes[1]}]"]
    (failure,) = failed[0].result
    assert "value: 20 GB/s" in failure.text and "threshold: >= 75 GB/s" in failure.text
    assert "median of the other nodes" in failure.text
