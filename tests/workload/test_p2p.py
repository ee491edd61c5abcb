"""checks.p2p on the CPU smoke path under `gpu-acceptance local --cpu`: the node's processes take turns in pairs over
real gloo, every ordered pair is measured, judged and written into the report; one process a node is a skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workload.faults import run_local

P2P_ON = {"p2p": {"enabled": True}}


@pytest.mark.parametrize(("gpus", "nodes"), [(3, 1), (4, 2)])
def test_every_ordered_pair_of_each_nodes_processes_is_measured_and_judged(tmp_path: Path, gpus: int,
                                                                           nodes: int) -> None:
    code, report, out = run_local(tmp_path, P2P_ON, "--gpus", str(gpus), "--simulate-nodes", str(nodes))
    assert code == 0, out[-3000:]
    per = gpus // nodes
    assert report.checks_run == ["p2p"] and report.passed, [r.message for r in report.results if not r.passed]
    assert len(report.p2p.nodes) == nodes
    for node in report.p2p.nodes:
        assert node.gpus == per and len(node.pairs) == per * (per - 1)
        assert {(p.src, p.dst) for p in node.pairs} == {(i, j) for i in range(per) for j in range(per) if i != j}
        for p in node.pairs:
            assert p.path == "gloo" and p.error is None
            assert p.copy_gbps > 0 and p.bidir_gbps > 0 and p.latency_us > 0
    counts = {r.node: r.value for r in report.results if r.name == "pairs_measured"}
    assert counts == {n.node: float(per * (per - 1)) for n in report.p2p.nodes}
    assert len([r for r in report.results if r.name == "copy_gbps"]) == gpus
    assert "p2p: " in out and "GB/s one way" in out


def test_one_process_a_node_is_a_skip_that_says_why(tmp_path: Path) -> None:
    code, report, out = run_local(tmp_path, P2P_ON, "--gpus", "1")
    assert code == 0, out[-3000:]
    assert [(s.check, s.reason) for s in report.skipped] == [
        ("p2p", "one GPU a node: there is no pair of GPUs to copy between")]
    (count,) = report.results
    assert (count.name, count.value, count.threshold, count.passed) == ("pairs_measured", 0.0, 0.0, True)
