"""checks.p2p judged on recorded matrices (judge.py is pure): a healthy node, a slow GPU named as the GPU, a slow pair
named as the pair with both GPUs' serials and bus ids, pairs that could not be measured, one GPU; the operator
re-judges the same; what a report must hold; the matrix in the text, HTML and JUnit reports."""

from __future__ import annotations

import random

import pytest
from acceptance_operator.judging.rejudge import RunFacts, rejudge, required_results
from acceptance_workload.checks.p2p.details import P2pDetail, P2pNode, P2pPair
from acceptance_workload.checks.p2p.judge import judge_node, pair_ratios
from acceptance_workload.checks.p2p.parts import p2p_section, p2p_table
from acceptance_workload.checks.p2p.profile import RATIO_TO_NODE_MEDIAN
from acceptance_workload.checks.p2p.spec import P2pThresholds
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.rules import Run
from acceptance_workload.report.model import Environment
from acceptance_workload.writers.junit import junit_xml

from tests.checks import only

TH = P2pThresholds(min_ratio_to_node_median=RATIO_TO_NODE_MEDIAN)
# 8x H100 SXM through NVSwitch as nvbandwidth's memcpy_ce tests show such a node: every pair alike, within ~2%.
COPY, BIDIR, LATENCY = 380.0, 740.0, 12.0


def identity(g: int) -> str:
    return f"serial 16529220{g:05d}, bus 00000000:{0x1B + g:02X}:00.0"


def matrix(gpus: int = 8, slow: dict[tuple[int, int], float] | None = None, broken: set[tuple[int, int]] = frozenset(),
           seed: int = 1, path: str = "NVLink", links: int | None = 18) -> P2pNode:
    """A node's recorded matrix: healthy pairs with 2% noise; `slow` pairs at a share of it; `broken` unmeasured."""
    rng = random.Random(seed)
    pairs = []
    for i in range(gpus):
        for j in (j for j in range(gpus) if j != i):
            if (i, j) in broken:
                pairs.append(P2pPair(src=i, dst=j, path=path, links=links,
                                     error="CUDA error: an illegal memory access"))
                continue
            share = (slow or {}).get((i, j), 1.0)
            pairs.append(P2pPair(src=i, dst=j, path=path, links=links, copy_gbps=COPY * share * rng.uniform(0.98, 1),
                                 bidir_gbps=BIDIR * share * rng.uniform(0.98, 1),
                                 latency_us=LATENCY / share * rng.uniform(1, 1.05)))
    return P2pNode(node="gpu-node-0001", gpus=gpus, pairs=pairs)


def failures(node: P2pNode) -> list:
    return [r for r in judge_node(node, TH, Run(gpus_per_node=node.gpus), identity) if not r.passed]


def test_a_healthy_node_passes_with_a_result_per_gpu_and_none_per_pair() -> None:
    results = judge_node(matrix(), TH, Run(gpus_per_node=8), identity)
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    assert len(results) == 1 + 8 * 5  # pairs measured, and per GPU: copy, both ways, latency, two ratios
    (count,) = [r for r in results if r.name == "pairs_measured"]
    assert (count.value, count.threshold) == (56.0, 56.0)
    assert {r.gpu for r in results if r.name == "copy_gbps"} == set(range(8))


def test_a_gpu_whose_row_and_column_are_low_is_named_as_the_gpu() -> None:
    slow = {(i, j): 0.5 for i in range(8) for j in range(8) if i != j and 3 in (i, j)}
    failed = failures(matrix(slow=slow))
    assert {(r.name, r.gpu) for r in failed} == {("copy_gbps_ratio_to_node_median", 3),
                                                 ("bidir_gbps_ratio_to_node_median", 3)}
    assert all(identity(3) in r.message and r.node == "gpu-node-0001" for r in failed)


def test_a_single_low_pair_is_named_as_the_pair_with_both_gpus() -> None:
    failed = failures(matrix(slow={(2, 5): 0.4}))
    (pair,) = failed
    assert (pair.name, pair.gpu, pair.observed) == ("pair_ratio_to_path_median", None, "GPU 2 -> GPU 5")
    assert pair.value < RATIO_TO_NODE_MEDIAN and pair.node == "gpu-node-0001"
    assert identity(2) in pair.message and identity(5) in pair.message and "NVLink, 18 links" in pair.message


def test_a_pair_one_way_slow_of_two_gpus_is_named() -> None:
    (pair,) = failures(matrix(gpus=2, slow={(0, 1): 0.4}))
    assert pair.observed == "GPU 0 -> GPU 1"


def test_a_pair_that_could_not_be_measured_fails_and_so_does_its_nodes_count() -> None:
    failed = failures(matrix(broken={(1, 4)}))
    assert {r.name for r in failed} == {"pairs_measured", "pair_ratio_to_path_median"}
    (pair,) = [r for r in failed if r.name == "pair_ratio_to_path_median"]
    assert pair.value is None and "could not be measured: CUDA error" in pair.message
    (count,) = [r for r in failed if r.name == "pairs_measured"]
    assert count.value == 55.0 and "55 of 56" in count.message


def test_a_gpu_with_no_pair_measured_fails_as_the_gpu_without_a_failure_per_pair() -> None:
    broken = {(i, j) for i in range(8) for j in range(8) if i != j and 6 in (i, j)}
    failed = failures(matrix(broken=broken))
    assert {r.gpu for r in failed if r.gpu is not None} == {6}
    assert not [r for r in failed if r.name == "pair_ratio_to_path_median"]
    assert {r.name for r in failed if r.gpu == 6} == {"copy_gbps", "bidir_gbps", "latency_us",
                                                      "copy_gbps_ratio_to_node_median",
                                                      "bidir_gbps_ratio_to_node_median"}


def test_pairs_are_compared_with_pairs_of_their_own_path() -> None:
    """A PCIe box: pairs under one switch reach twice what pairs across the CPUs do, and neither is slow."""
    node = matrix(gpus=4, path="PCIe switch", links=None)
    for p in node.pairs:
        if (p.src < 2) != (p.dst < 2):
            p.path = "CPU interconnect"
            p.copy_gbps, p.bidir_gbps = p.copy_gbps / 2, p.bidir_gbps / 2  # type: ignore[operator]
    assert failures(node) == []
    assert min(v for v in pair_ratios(node).values() if v is not None) > 0.95


def test_one_gpu_has_no_pair_and_passes_its_count() -> None:
    (count,) = judge_node(P2pNode(node="n", gpus=1), TH, Run(gpus_per_node=1), identity)
    assert (count.name, count.value, count.threshold, count.passed) == ("pairs_measured", 0.0, 0.0, True)


def report_of(node: P2pNode, config: WorkloadConfig) -> Report:
    results = judge_node(node, config.checks.p2p.thresholds, Run(gpus_per_node=node.gpus), identity)
    return Report(checks_run=["p2p"], results=results, environment=Environment(hostnames=[node.node]),
                  p2p=P2pDetail(bytes=256 << 20, iters=10, latency_iters=100, nodes=[node])).finalize()


@pytest.mark.parametrize("case", ["healthy", "slow GPU", "slow pair", "broken pair"])
def test_the_operator_rejudges_the_matrix_as_the_workload_does(case: str) -> None:
    config = WorkloadConfig.build(checks=ChecksSpec.model_validate(only("p2p")), profile="h100-sxm", nodes=1,
                                  gpus_per_node=8)
    node = {"healthy": matrix(), "slow GPU": matrix(slow={(i, 3): 0.5 for i in range(8) if i != 3}
                                                     | {(3, j): 0.5 for j in range(8) if j != 3}),
            "slow pair": matrix(slow={(2, 5): 0.4}), "broken pair": matrix(broken={(1, 4)})}[case]
    report = report_of(node, config)
    judged = rejudge(report, RunFacts(config=config, uid=None)).report
    assert [(r.name, r.gpu, r.passed) for r in judged.results] == [(r.name, r.gpu, r.passed) for r in report.results]
    assert judged.passed is (case == "healthy")
    if case != "healthy":
        assert judged.failed_nodes == ["gpu-node-0001"]


def test_a_report_must_hold_every_gpus_figures_and_every_nodes_count() -> None:
    def due(gpus: int) -> set[tuple[str, str | None, int | None]]:
        config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=2, gpus_per_node=gpus)
        return {(r.name, r.node, r.gpu) for r in required_results(config, ["a", "b"]) if r.check == "p2p"}
    assert due(1) == {("pairs_measured", "a", None), ("pairs_measured", "b", None)}
    assert len(due(8)) == 2 + 2 * 8 * 5 and ("latency_us", "b", 7) in due(8)


def test_the_matrix_is_in_the_text_html_and_junit_reports() -> None:
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=1, gpus_per_node=4)
    report = report_of(matrix(gpus=4, slow={(2, 1): 0.3}), config)
    text = p2p_table(report)
    assert "gpu-node-0001: NVLink x18 (12 pairs)" in text and "GPU 2" in text and "->3" in text
    html = p2p_section(None, report, [])
    assert html.count("<td title=") == 12 and "hsl(0, 70%, 80%)" in html  # the slow pair red
    xml = junit_xml(report, "t")
    assert xml.count('name="p2p [node gpu-node-0001, GPU') == 4 and "GPU 2 -&gt; GPU 1" in xml
