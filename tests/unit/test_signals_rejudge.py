"""checks.signals' failing reports re-judged by the operator: the same verdict, the node in failedNodes, and the
condition's message naming the signal. The watches are records as every rank's watch gives them (watch.py); the
workload's judge (judge.py) writes the results, the operator's re-judging (rejudge.py) judges them again with the
thresholds it resolves from the spec and the h100-sxm profile."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from acceptance_operator.judging.rejudge import RunFacts, rejudge
from acceptance_operator.judging.verdict import verdict_message
from acceptance_workload.checks.report_model import Report
from acceptance_workload.checks.signals import judge
from acceptance_workload.checks.signals.details import SignalsDetail
from acceptance_workload.checks.signals.rules import PORT_COUNTERS
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef

from tests.reports import passing_report

NODES = ["gpu-node-a", "gpu-node-b"]
BAD = "gpu-node-b"
COUNTERS = {"ecc_corrected": 3.0, "ecc_uncorrected": 0.0, "pcie_replays": 0.0, "remapped_rows_uncorrectable": 0.0,
            "pending_row_remap": 0.0, "row_remap_failure": 0.0,
            **{f"nvlink L{link} {c}": 0.0 for link in range(18)
               for c in ("replay", "recovery", "crc_flit", "crc_data")}}
PORT = {"device": "mlx5_0", "port": 1, "netdev": "ib0", "state": "ACTIVE", "phys_state": "LinkUp",
        "rate": "400 Gb/sec (4X NDR)", "counters": {"link_downed": 0.0, "symbol_error": 0.0}, "hw": {},
        "unreadable": {}}


def records(gpus: int = 8) -> list[dict[str, Any]]:
    """Every rank's watch of a healthy H100 SXM run: counters still, fabric completed in one clique, a port up."""
    out = []
    for n, node in enumerate(NODES):
        for g in range(gpus):
            out.append({"rank": n * gpus + g, "node": node, "gpu": g, "nvml": None, "serial": f"16{n}{g}",
                        "busId": f"00000000:{0x18 + g:02X}:00.0", "start": dict(COUNTERS), "end": dict(COUNTERS),
                        "fabric": {"state": 3, "status": 0, "clique": 1, "cluster": "ab" * 16},
                        "unsupported": {"retired_pages_sbe": "NVMLError_NotSupported: Not Supported",
                                        "retired_pages_dbe": "NVMLError_NotSupported: Not Supported"},
                        "noNvlink": None, "xids": [], "xidsOmitted": 0, "error": None, "seconds": 600.0,
                        "ports": {"start": {"ports": [copy.deepcopy(PORT)]}, "end": {"ports": [copy.deepcopy(PORT)]}}
                        if g == 0 else None})
    return out


def gpu(recs: list[dict[str, Any]], g: int = 3) -> dict[str, Any]:
    return next(r for r in recs if r["node"] == BAD and r["gpu"] == g)


def xid(code: int, stage: str):
    def fault(recs):
        gpu(recs)["xids"].append({"code": code, "stage": stage, "t": 321.0})
    return fault


def counter(key: str, by: float):
    def fault(recs):
        gpu(recs)["end"][key] += by
    return fault


def xid_watch_lost(recs):
    gpu(recs)["xidError"] = {"xid": "the XID event wait failed: NVMLError_GpuIsLost: GPU is lost"}


def fabric_in_progress(recs):
    gpu(recs)["fabric"] = {"state": 2, "status": 0, "clique": 0, "cluster": "00" * 16}


def port(name: str, by: float):
    def fault(recs):
        gpu(recs, 0)["ports"]["end"]["ports"][0]["counters"][name] += by
    return fault


def report_of(fault) -> tuple[Report, WorkloadConfig]:
    cfg = WorkloadConfig.build(checks=ChecksSpec.model_validate({"p2p": {"enabled": False}}), profile="h100-sxm",
                               nodes=2, gpus_per_node=8,
                               test=TestRef(name="t", namespace="ns", uid="u-1", generation=1))
    recs = records()
    if fault is not None:
        fault(recs)
    results, skipped, nodes = judge.judge(recs, cfg.checks.signals.thresholds, cfg.estimated_thresholds)
    report = passing_report(cfg, NODES)
    report.results = [r for r in report.results if r.check != "signals"] + results
    report.skipped += skipped
    report.signals = SignalsDetail(seconds=600.0, nodes=nodes)
    return report.finalize(), cfg


FAULTS = {
    "xid79-nccl": (xid(79, "nccl"), "xid", "XID 79 (GPU has fallen off the bus) during stage nccl"),
    "xid94-ddp": (xid(94, "ddp"), "xid", "XID 94 (contained ECC error"),
    "xid-watch-lost": (xid_watch_lost, "xid", "GPU is lost, so the rest of the run was not watched (fail closed)"),
    "nvlink-replay": (counter("nvlink L5 replay", 400), "nvlink_replays", "nvlink L5 replay grew 400"),
    "fabric": (fabric_in_progress, "fabric", "systemctl status nvidia-fabricmanager"),
    "link-downed": (port("link_downed", 1), "link_downed", "mlx5_0 port 1 (ib0) went down during the run"),
    "symbol-errors": (port("symbol_error", 5000), "symbol_error", "symbol_error grew 5000"),
    "ecc-uncorrected": (counter("ecc_uncorrected", 1), "ecc_uncorrected", "ecc_uncorrected grew 1"),
}


@pytest.mark.parametrize("case", FAULTS)
def test_the_operator_agrees_with_a_failing_signal_and_names_the_node_and_the_signal(case: str) -> None:
    fault, name, said = FAULTS[case]
    report, cfg = report_of(fault)
    workload = [(r.check, r.name, r.node, r.gpu) for r in report.results if not r.passed]
    assert workload == [("signals", name, BAD, None if name in ("link_downed", "symbol_error") else 3)]
    assert report.failed_nodes == [BAD]
    judged = rejudge(report, RunFacts(cfg, "u-1", frozenset(NODES)))
    again = judged.report
    assert not judged.problems and not again.verdict() and again.failed_nodes == [BAD]
    assert [(r.check, r.name, r.node, r.gpu) for r in again.results if not r.passed] == workload
    message = verdict_message(again)
    assert f"signals/{name} on {BAD}" in message and f"nodes to blame: {BAD}" in message, message
    assert said in next(r.message for r in again.results if not r.passed)


@pytest.mark.parametrize("fault", [None, xid(13, "gpu")], ids=["healthy", "xid13"])
def test_the_operator_passes_a_healthy_watch_and_an_application_xid(fault) -> None:
    report, cfg = report_of(fault)
    judged = rejudge(report, RunFacts(cfg, "u-1", frozenset(NODES)))
    assert report.passed and judged.report.verdict() and not judged.problems, verdict_message(judged.report)
    # The port has two of the counters (the others: a skip saying so); no H100 has retired pages.
    assert {s.name for s in judged.report.skipped if s.check == "signals"} == {
        "retired_pages", *(set(PORT_COUNTERS) - set(PORT["counters"]))}
    estimated = [r for r in judged.report.results if r.check == "signals" and r.estimated]
    assert {r.name for r in estimated} >= {"nvlink_replays", "pcie_replays", "symbol_error"}


def test_a_report_without_a_nodes_watch_fails_that_node() -> None:
    """Fail closed: the watch of every node is required; a report that drops one fails it."""
    report, cfg = report_of(None)
    report.results = [r for r in report.results if not (r.name == "watched" and r.node == BAD)]
    again = rejudge(report, RunFacts(cfg, "u-1", frozenset(NODES))).report
    (missing,) = [r for r in again.results if not r.passed]
    assert (missing.check, missing.name, missing.node) == ("signals", "watched", BAD)
    assert again.failed_nodes == [BAD]


def test_the_reports_show_a_grid_per_node_with_the_failed_signals_row_in_red() -> None:
    """The HTML page's grid (a row per GPU and port), the text table and the JUnit output, from the check's parts."""
    from acceptance_workload.writers.html import render_html
    from acceptance_workload.writers.junit import junit_xml
    from acceptance_workload.writers.text import full_text

    report, _ = report_of(port("link_downed", 1))
    page = render_html(report)
    grid = page.split('<h2 id="signals">')[1]
    node_b = grid.split(f"<h3>{BAD}</h3>")[1].split("</table>")[0]
    assert node_b.count("<tr") == 1 + 8 + 1  # the header, 8 GPUs, 1 port
    bad_rows = [row for row in node_b.split("<tr")[1:] if 'class="bad"' in row]
    assert len(bad_rows) == 1 and "mlx5_0 port 1 (ib0)" in bad_rows[0] and "link_downed +1" in bad_rows[0]
    assert 'class="bad"' not in grid.split("<h3>gpu-node-a</h3>")[1].split("</table>")[0]
    text = full_text(report)
    assert "# signals: watched 600 s" in text and "mlx5_0 port 1 (ib0)  ACTIVE/LinkUp 400 Gb/sec (4X NDR)" in text
    assert "link_downed +1" in text and "down" in text
    xml = junit_xml(report)
    assert "# signals: watched 600 s" in xml and xml.count("<failure") == 1
    assert "went down during the run" in xml.split("<failure")[1].split("</failure>")[0]
