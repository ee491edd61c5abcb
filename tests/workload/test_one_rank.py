"""A run of one rank (`local --cpu --gpus 1`, the CPU stand-in of a one-GPU machine) end to end: exports never
change its verdict, and what one rank cannot measure is a skip with its reason, not a 0.0.

A one-GPU H100 run printed PASSED, then crashed in the HTML export (matplotlib cannot log-scale a busbw of 0 at
every size) and exited 2 with no page; its headline said "all_reduce busbw 0.0 GB/s" and "scaling efficiency
0.995". Here the JUnit file is asked for where it cannot be written (a directory), from outside the product.
"""

from __future__ import annotations

import json
from pathlib import Path

from acceptance_workload.checks.report_model import Report
from acceptance_workload.report.model import ONE_RANK_BUSBW, ONE_RANK_SCALING
from acceptance_workload.run import exit_code

from tests.checks import ON_BY_DEFAULT
from tests.workload.test_local import cli


def test_one_rank_exports_its_page_says_why_busbw_and_scaling_are_not_measured(tmp_path: Path) -> None:
    (tmp_path / "blocked.xml").mkdir()
    proc = cli("--cpu", "--gpus", "1", "--json", "r.json", "--html", "r.html", "--junit", "blocked.xml",
               cwd=tmp_path)
    out = proc.stdout + proc.stderr
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    # The exit code is the verdict's, whatever the exports did (the JSON and text came first).
    assert proc.returncode == exit_code(report) and report.error is None, out[-4000:]
    assert report.environment.world_size == 1 and report.checks_run == list(ON_BY_DEFAULT)
    assert "gpu-acceptance local: could not write the JUnit XML to blocked.xml: Is a directory" in proc.stderr
    assert "gpu-acceptance local: wrote the HTML report to r.html" in proc.stderr
    page = (tmp_path / "r.html").read_text()
    assert 'id="verdict"' in page and f"all_reduce: not plotted ({ONE_RANK_BUSBW})." in page
    # One rank: no busbw and no scaling efficiency, each a skip with its reason; the headline shows neither.
    skipped = {(s.check, s.name): s.reason for s in report.skipped}
    assert skipped[("nccl", "all_reduce_busbw")] == ONE_RANK_BUSBW
    assert skipped[("ddp", "scaling_efficiency")] == ONE_RANK_SCALING
    assert not [r for r in report.results if r.name.endswith("_busbw") or r.name == "scaling_efficiency"]
    assert [r for r in report.results if r.name == "all_reduce_correctness" and r.passed]  # still judged
    head = report.headline()
    assert head.all_reduce_busbw_gbps is None and head.scaling_efficiency is None
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("headline ")]
    assert "busbw" not in line and "efficiency" not in line and "ddp" in line, line
    assert f"skipped  ddp scaling_efficiency: {ONE_RANK_SCALING}" in proc.stdout
