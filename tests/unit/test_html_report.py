"""The HTML report: verdict and failed nodes first, one busbw plot per collective, heatmap, DDP bars, self-contained.

Reports judged as the operator judges them (rejudge), so the floors on the
plots are the operator's thresholds. The page is read back with the standard
library's HTML parser; tests/workload/test_report_html.py opens a real run's
page in Chromium.
"""

from __future__ import annotations

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from acceptance_operator.judging.rejudge import RunFacts, rejudge
from acceptance_workload.checks.ddp.parts import DDP_PLOT_ID
from acceptance_workload.checks.nccl.html import NCCL_PLOT_ID, reference_for
from acceptance_workload.checks.nccl.html_reference import NCCL_TESTS_REFERENCE
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef
from acceptance_workload.contract.terms import COLLECTIVES
from acceptance_workload.writers.html import HEATMAP_ID, HEATMAP_MAX_NODES, heatmap_rows, node_metrics, render_html

from tests.reports import node_names, one_rank, passing_report, with_slow_node

NODES = ["gpu-node-a", "gpu-node-b"]


class Page(HTMLParser):
    """Ids in document order, the id of each <svg>'s enclosing figure, and every URL-like attribute."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.figure_svgs: dict[str, int] = {}
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self._figure: str | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        if a.get("id"):
            self.ids.append(a["id"] or "")
        if tag == "figure":
            self._figure = a.get("id")
        if tag == "svg" and self._figure:
            self.figure_svgs[self._figure] = self.figure_svgs.get(self._figure, 0) + 1
        self.urls += [v for k, v in attrs if k in ("src", "href", "xlink:href", "data", "action") and v]

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._figure = None


def judged(gpu_model: str, gpus: int = 2, profile: str = "h200-sxm") -> Report:
    """A two-node run judged by the operator; node b's all_reduce inside the node is under its floor."""
    cfg = WorkloadConfig.build(checks=ChecksSpec(), profile=profile, nodes=2, gpus_per_node=gpus,
                               test=TestRef(name="t", namespace="ns", uid="u-1", generation=1))
    report = passing_report(cfg, NODES)
    report.environment.gpu_model = gpu_model
    for r in report.results:
        if r.name == "gpu_model":
            r.observed = gpu_model
        if r.name == "node_all_reduce_busbw" and r.node == "gpu-node-b":
            r.value = 120.0
    for s in report.nccl:
        if s.node == "gpu-node-b":
            for row in s.rows:
                row.busbw_gbps = row.busbw_gbps / 3
    out = rejudge(report, RunFacts(cfg, "u-1", frozenset(NODES))).report
    assert out.failed_nodes == ["gpu-node-b"]
    return out


@pytest.fixture(scope="module")
def h200_page() -> tuple[Report, str]:
    report = judged("NVIDIA H200")
    return report, render_html(report, title="ns/t", operator_verdict="Failed ChecksFailed")


def test_verdict_and_failed_nodes_come_before_any_plot(h200_page):
    report, page = h200_page
    ids = Page(page).ids
    first_plot = min(i for i, x in enumerate(ids) if x.startswith("plot-"))
    assert ids.index("verdict") < ids.index("failed-nodes") < ids.index("failures") < first_plot
    verdict = page[page.index('id="verdict"'):]
    assert verdict.split("</div>")[0].endswith(f"FAILED: {report.tally().passed}/{report.tally().total} checks passed")
    assert "gpu-node-b" in page[page.index('id="failed-nodes"'):].split("</p>")[0]
    assert "Failed ChecksFailed" in page


def test_one_svg_plot_per_collective_then_the_heatmap_and_ddp_bars(h200_page):
    report, page = h200_page
    parsed = Page(page)
    expected = {NCCL_PLOT_ID.format(collective=c) for c in COLLECTIVES}
    assert {s.collective for s in report.nccl} == set(COLLECTIVES)
    assert {k for k in parsed.figure_svgs if k.startswith("plot-nccl-")} == expected
    assert all(parsed.figure_svgs[k] == 1 for k in expected)
    assert parsed.figure_svgs[HEATMAP_ID] == 1 and parsed.figure_svgs[DDP_PLOT_ID] == 1
    assert len(parsed.ids) == len(set(parsed.ids)), "ids repeat across the figures"


def _figure(page: str, fig_id: str) -> str:
    start = page.index(f'id="{fig_id}"')
    return page[start:page.index("</figure>", start)]


def test_plots_carry_the_judged_floor_and_the_nccl_tests_reference_of_the_same_machine(h200_page):
    report, page = h200_page
    node_floor = next(r.threshold for r in report.results if r.name == "node_all_reduce_busbw")
    all_reduce = _figure(page, NCCL_PLOT_ID.format(collective="all_reduce"))
    assert node_floor == 299 and f"node floor {node_floor:g} GB/s" in all_reduce
    assert "job floor" not in all_reduce  # 2 GPUs a node: the job-wide busbw is reported, not judged
    # Each node's sweep has 2 ranks on H200: nccl-tests' 2x H200 curve is drawn beside it.
    ref = next(r for r in NCCL_TESTS_REFERENCE if r.gpu == "NVIDIA H200")
    assert ref.label in all_reduce and "NCCL 2.28.9" in ref.label and "H200" in ref.label
    assert "node gpu-node-b (failed) (2 ranks)" in all_reduce and "node gpu-node-a (2 ranks)" in all_reduce
    assert "job (4 ranks)" in all_reduce
    # Collectives measured only over the job (4 ranks) have no reference of that size.
    assert ref.label not in _figure(page, NCCL_PLOT_ID.format(collective="alltoall"))


def test_job_floors_where_judged_and_no_reference_where_none_was_measured_on_that_kind_of_gpu():
    report = judged("NVIDIA H100 80GB HBM3", gpus=8, profile="h100-sxm")
    page = render_html(report)
    floors = {r.name: r.threshold for r in report.results if r.name.endswith("_busbw") and r.node is None}
    assert floors["all_reduce_busbw"] == 340 and floors["all_gather_busbw"] == 306 and floors["alltoall_busbw"] is None
    assert "job floor 340 GB/s" in _figure(page, NCCL_PLOT_ID.format(collective="all_reduce"))
    assert "job floor 306 GB/s" in _figure(page, NCCL_PLOT_ID.format(collective="all_gather"))
    assert "floor" not in _figure(page, NCCL_PLOT_ID.format(collective="alltoall"))
    assert not [r.label for r in NCCL_TESTS_REFERENCE if r.label in page]  # 8 and 16 ranks: none measured


@pytest.mark.parametrize(("model", "gpus", "drawn"), [
    ("NVIDIA H100 80GB HBM3", 4, "4x H100 SXM"), ("NVIDIA H200", 2, "2x H200 SXM"), ("NVIDIA H200 NVL", 2, None),
    ("NVIDIA H100 PCIe", 4, None), ("NVIDIA H200", 4, None)])
def test_the_reference_is_drawn_only_for_its_gpu_model_and_rank_count(model: str, gpus: int, drawn: str | None):
    cfg = WorkloadConfig.build(checks=ChecksSpec(), profile="custom", nodes=1, gpus_per_node=gpus,
                               test=TestRef(name="t", namespace="ns", uid="u-1", generation=1))
    report = passing_report(cfg, ["n"])
    report.environment.gpu_model = model
    labels = {reference_for(report, s).label if reference_for(report, s) else None for s in report.nccl}
    assert labels == ({r.label for r in NCCL_TESTS_REFERENCE if drawn and drawn in r.label} or {None})


def test_the_heatmap_has_a_row_per_node_and_marks_the_failed_one(h200_page):
    report, page = h200_page
    nodes, labels, values = node_metrics(report)
    assert nodes == NODES and len(labels) == 4
    assert values[1][0] == 120.0 and values[0][1] == pytest.approx(665.0)  # busbw of b, GEMM median of a
    heatmap = _figure(page, HEATMAP_ID)
    assert "gpu-node-b (failed)" in heatmap and "gpu-node-a (failed)" not in heatmap


def test_the_page_fetches_nothing(h200_page):
    _, page = h200_page
    parsed = Page(page)
    assert not parsed.tags & {"script", "link", "img", "iframe", "object", "embed"}
    inline = [u for u in parsed.urls if not u.startswith(("#", "data:"))]  # in-page links and inline images only
    assert parsed.urls and not inline, inline[:5]
    assert "url(" not in page.replace("url(#", "") and "@import" not in page


def test_without_matplotlib_html_is_refused_before_the_run_saying_what_to_install(tmp_path: Path):
    blocked = tmp_path / "blocked"
    (blocked / "matplotlib").mkdir(parents=True)
    (blocked / "matplotlib" / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "local", "--cpu", "--html", "r.html"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--html needs matplotlib" in proc.stderr and "gpu-acceptance[report]" in proc.stderr
    assert "VERDICT" not in proc.stdout and not (tmp_path / "r.html").exists()


def test_a_hundred_nodes_stay_readable():
    """Many nodes: a band for the healthy nodes' sweeps, the failed node's own line, a capped heatmap, no
    per-result table (all are folded per measurement), DDP as points."""
    cfg = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=100, gpus_per_node=8,
                               test=TestRef(name="t", namespace="ns", uid="u-1", generation=1))
    nodes = node_names(100)
    report = passing_report(cfg, nodes)
    for r in report.results:
        if r.name == "node_all_reduce_busbw" and r.node == nodes[42]:
            r.passed, r.value = False, 100.0
    report.finalize()
    assert report.failed_nodes == [nodes[42]]
    page = render_html(report)
    all_reduce = _figure(page, NCCL_PLOT_ID.format(collective="all_reduce"))
    assert "99 other nodes: min to max" in all_reduce and f"node {nodes[42]} (failed) (8 ranks)" in all_reduce
    assert f"node {nodes[0]} (" not in all_reduce
    shown, _, _, _, total = heatmap_rows(report)
    assert total == 100 and len(shown) == HEATMAP_MAX_NODES and nodes[42] in shown
    assert f"{HEATMAP_MAX_NODES} of 100 nodes" in _figure(page, HEATMAP_ID)
    assert "Every result" not in page and "Passed results" in page
    assert len(page) < 5_000_000, len(page)


# --- the localisation stage ----------------------------------------------------------------------------------------

class Tables(HTMLParser):
    """Each <table id=...>'s rows: (the row's class, its cells' text)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[str, list[str]]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id")
            if self._table:
                self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append((a.get("class") or "", []))
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1][1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


LOC_NODES = node_names(4)
SLOW_NODE = LOC_NODES[2]


@pytest.fixture(scope="module")
def localized() -> Report:
    """Four nodes of 4 GPUs (no inter-node floor: the stage runs), node 2 slow in its pairs, judged by the operator."""
    cfg = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=4, gpus_per_node=4,
                               test=TestRef(name="t", namespace="ns", uid="u-1", generation=1))
    report = with_slow_node(passing_report(cfg), SLOW_NODE)
    out = rejudge(report, RunFacts(cfg, "u-1", frozenset(LOC_NODES))).report
    assert out.failed_nodes == [SLOW_NODE]
    return out


def test_the_localisation_table_puts_each_node_beside_the_median_and_marks_the_outlier(localized: Report):
    page = render_html(localized, title="ns/t")
    ids = Page(page).ids
    assert ids.index("failures") < ids.index("localization") < ids.index(HEATMAP_ID)
    head, *rows = Tables(page).tables["localization-nodes"]
    assert head[1][:6] == ["node", "best pair (GB/s)", "median of the other nodes (GB/s)", "ratio", "threshold",
                           "result"]
    by_node = {cells[0]: (cls, cells) for cls, cells in rows}
    assert sorted(by_node) == LOC_NODES and rows[0][1][0] == SLOW_NODE  # the named node first
    cls, cells = by_node[SLOW_NODE]
    # its best pair 20 against the others' median 100: ratio 0.2, under the operator's 0.75 x 100
    assert cls == "fail" and cells[1:6] == ["20", "100", "0.20", "≥ 75", "FAIL: outlier"]
    assert "with gpu-node-0003 20 (round 1)" in cells[6] and "(round 2)" in cells[6]
    assert all(c == "pass" and v[5] == "pass" and v[3] == "1.00" for n, (c, v) in by_node.items() if n != SLOW_NODE)


def test_the_groups_table_lists_every_pair_round_by_round_beside_the_median(localized: Report):
    assert localized.localization is not None
    head, *rows = Tables(render_html(localized)).tables["localization-groups"]
    assert head[1] == ["round", "kind", "nodes", "busbw (GB/s)", "compared with (GB/s)", "ratio", "time (us)"]
    assert len(rows) == len(localized.localization.pairs) and [r[1][0] for r in rows] == ["1", "1", "2", "2"]
    marked = [(cls, cells[2]) for cls, cells in rows if cls == "fail"]
    assert len(marked) == 2 and all(f"{SLOW_NODE} (outlier)" in nodes for _, nodes in marked)
    assert all(cells[4] == "100 (the nodes' median)" for _, cells in rows)
    assert {cells[5] for cls, cells in rows if cls == "fail"} == {"0.20"}


def test_report_node_keeps_the_nodes_own_pairs_and_its_judgement(localized: Report):
    from acceptance_operator.report_cli import for_node
    from acceptance_workload.writers.junit import junit_xml
    from acceptance_workload.writers.text import full_text

    one = for_node(localized, SLOW_NODE)
    tables = Tables(render_html(one)).tables
    assert [cells[0] for _, cells in tables["localization-nodes"][1:]] == [SLOW_NODE]
    groups = tables["localization-groups"][1:]
    assert groups and all(SLOW_NODE in cells[2] for _, cells in groups)
    assert tables["localization-nodes"][1][1][2] == "100"  # the median is still of the other nodes, not of one
    text = full_text(one)
    assert "# localize: 2 round(s)" in text and text.count(f"{SLOW_NODE} ") >= 2
    xml = junit_xml(one, "ns/t")
    assert "median of the other nodes" in xml and "# localize: 2 round(s)" in xml


def test_one_ranks_sweeps_are_a_sentence_saying_why_not_a_log_axis_of_zeros():
    """A one-GPU run's busbw is 0 at every size: matplotlib cannot log-scale it (the page crashed a passed run)."""
    cfg = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=1, gpus_per_node=1)
    report = one_rank(passing_report(cfg, ["gpu-node-a"]))
    assert report.passed
    problems: list[str] = []
    page = render_html(report, problems=problems)
    assert problems == []
    parsed = Page(page)
    assert "verdict" in parsed.ids and "plot-latency" in parsed.figure_svgs
    for c in COLLECTIVES:  # the figure is there, with a sentence instead of an empty log plot
        assert NCCL_PLOT_ID.format(collective=c) in parsed.ids
        assert NCCL_PLOT_ID.format(collective=c) not in parsed.figure_svgs
    assert page.count("not plotted (one rank: a collective moves no bytes between GPUs") == len(COLLECTIVES)


def test_a_part_that_fails_is_one_line_and_a_sentence_and_the_files_are_still_written(
        h200_page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A faulty plotting library (its bar chart raises) costs the DDP plot only: the page and the JUnit file are
    written, the failure is one line naming the file and the cause; a file that cannot be written is one line."""
    import matplotlib.axes
    from acceptance_workload.writers.exports import write_exports

    report, _ = h200_page

    def broken(*args, **kwargs):
        raise RuntimeError("bar broke\nsecond line")

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", broken)
    html, xml = tmp_path / "r.html", tmp_path / "r.xml"
    lines = write_exports(report, html=str(html), junit=str(xml), name="ns/t")
    assert lines == [f"wrote the JUnit XML to {xml}", f"wrote the HTML report to {html}",
                     f"{html}: the DDP plot left out: RuntimeError: bar broke"]
    page = Page(html.read_text())
    assert "verdict" in page.ids and DDP_PLOT_ID in page.ids and DDP_PLOT_ID not in page.figure_svgs
    assert all(NCCL_PLOT_ID.format(collective=c) in page.figure_svgs for c in COLLECTIVES)  # the rest is drawn
    assert "the DDP plot could not be drawn (RuntimeError: bar broke)" in html.read_text()
    blocked = tmp_path / "a-directory"
    blocked.mkdir()
    lines = write_exports(report, html=str(blocked), junit=str(xml))
    assert lines[0] == f"wrote the JUnit XML to {xml}"
    assert lines[1].startswith(f"could not write the HTML report to {blocked}: ") and len(lines) == 2
