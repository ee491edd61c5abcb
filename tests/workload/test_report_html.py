"""A real `gpu-acceptance local --cpu` run's HTML report, opened in headless Chromium, and its JUnit file.

Chromium is Debian's package (hack/install-tools.sh installs it); in CI
(CI=true) a missing Chromium fails this test instead of skipping it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import junitparser
import pytest
from acceptance_workload.checks.ddp.parts import DDP_PLOT_ID
from acceptance_workload.checks.nccl.html import NCCL_PLOT_ID
from acceptance_workload.checks.report_model import Report
from acceptance_workload.local import build_config, write_files
from acceptance_workload.report.render import CPU_BANNER, verdict_line
from acceptance_workload.writers.html import HEATMAP_ID

from tests.checks import ON_BY_DEFAULT
from tests.reports import junit_cases

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "hack" / "report_screenshot.py"
sys.path.insert(0, str(SCREENSHOT.parent))
from report_screenshot import find_chromium  # noqa: E402


class Figures(HTMLParser):
    """The <svg> elements inside each <figure id=...> of the DOM Chromium built."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.svgs: dict[str, int] = {}
        self._figure: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "figure":
            self._figure = dict(attrs).get("id")
        elif tag == "svg" and self._figure:
            self.svgs[self._figure] = self.svgs.get(self._figure, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._figure = None


@pytest.fixture(scope="module")
def cpu_run(cpu_smoke_run) -> Path:
    """The default `local --cpu` run with --json, --html and --junit (conftest.py)."""
    proc = cpu_smoke_run.proc
    # 1: a check failed (a CPU smoke run on a busy machine can miss its loose per-process ratio); the files are
    # written either way, and the tests below hold whatever the verdict.
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "wrote the HTML report to r.html" in proc.stderr and "wrote the JUnit XML to r.xml" in proc.stderr
    return cpu_smoke_run.dir


def chromium() -> str:
    browser = find_chromium()
    if browser is None:
        message = "no chromium on PATH: apt-get install -y chromium (bash hack/install-tools.sh installs it)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return browser


def test_the_html_report_shows_one_plot_per_collective_in_chromium(cpu_run: Path):
    chromium()
    report = Report.model_validate(json.loads((cpu_run / "r.json").read_text()))
    collectives = {s.collective for s in report.nccl}
    assert len(collectives) == 6
    dom = subprocess.run([sys.executable, str(SCREENSHOT), "--dump-dom", str(cpu_run / "r.html")],
                         capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    svgs = Figures(dom.stdout).svgs
    assert {k: v for k, v in svgs.items() if k.startswith("plot-nccl-")} == {
        NCCL_PLOT_ID.format(collective=c): 1 for c in collectives}
    assert svgs[HEATMAP_ID] == 1 and svgs[DDP_PLOT_ID] == 1
    assert report.results and report.ddp is not None and report.ddp.ranks
    assert verdict_line(report) in dom.stdout and CPU_BANNER in dom.stdout  # the page's verdict is the report's

    png = cpu_run / "r.png"
    shot = subprocess.run([sys.executable, str(SCREENSHOT), str(cpu_run / "r.html"), str(png)],
                          capture_output=True, text=True, timeout=180)
    assert shot.returncode == 0, shot.stderr[-2000:]
    from PIL import Image

    with Image.open(png) as im:
        width, height = im.size
        colours = im.convert("RGB").resize((64, 256)).getcolors(64 * 256)
    assert width == 1280 and 1500 < height < 8000  # trimmed to the page: six plots, heatmap, bars and tables
    assert colours is not None and len(colours) > 20  # drawn plots, not a blank or one-colour window


def test_the_junit_file_of_a_real_run_has_one_testcase_per_result(cpu_run: Path):
    """One testcase per result; per GPU for a check whose parts ask so (p2p: each GPU's judgements in one)."""
    report = Report.model_validate(json.loads((cpu_run / "r.json").read_text()))
    xml = junitparser.JUnitXml.fromfile(str(cpu_run / "r.xml"))
    cases = [case for suite in xml for case in suite]
    assert len(cases) == junit_cases(report.results) and report.missing_checks() == [] and report.error is None
    assert all(case.is_passed for case in cases) == report.verdict()
    assert sorted({case.classname for case in cases}) == sorted(f"gpu-acceptance.{c}" for c in report.checks_run)


def _args(tmp_path: Path, **kw) -> argparse.Namespace:
    base = {"cpu": True, "json": None, "file": None, "profile": None, "gpus": None, "quick": False,
            "simulate_nodes": None, "html": None, "junit": str(tmp_path / "r.xml")}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("stale", [False, True], ids=["no-report", "stale-json-of-an-earlier-run"])
def test_a_run_that_wrote_no_report_gives_a_failing_junit_file(tmp_path: Path, stale: bool):
    """Fail closed: rank 0 died before delivering (or --json FILE is an earlier run's), so the file errs."""
    args = _args(tmp_path, json=str(tmp_path / "old.json") if stale else None)
    config = build_config(args, 2)
    if stale:
        Path(config.report_file).write_text(json.dumps(Report(checks_run=["nccl"], passed=True).to_wire()))
        os.utime(config.report_file, (time.time() - 3600, time.time() - 3600))
    assert write_files(args, config, 2, started=time.time()) == 2
    cases = [case for suite in junitparser.JUnitXml.fromfile(str(tmp_path / "r.xml")) for case in suite]
    run = next(c for c in cases if c.name == "run")
    assert run.is_error and "ended with exit code 2 and no report was written" in run.result[0].message
    assert {c.name for c in cases if c.is_failure} == {
        f"{c} (no result)" for c in ON_BY_DEFAULT}
