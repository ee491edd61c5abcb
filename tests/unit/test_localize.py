"""The localisation stage's plan and judgement (pure): who is paired with whom, and who is named."""

from __future__ import annotations

import pytest
from acceptance_operator.judging.rejudge import RunFacts, rejudge
from acceptance_workload.checks.nccl import localize
from acceptance_workload.checks.report_model import assemble
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.evidence import shard_names, split
from acceptance_workload.report.model import PairRow

from tests.reports import node_names, passing_report

FAST, SLOW = 100.0, 20.0
UID = "uid-1"


def names(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def slow_with(bad: set[str], only_at_scale: bool = False):
    def measure(block: tuple[str, ...]) -> float:
        hit = bool(bad & set(block)) and (len(block) > 2 or not only_at_scale)
        return SLOW if hit else FAST
    return measure


def failing(detail, nodes: list[str]) -> list[str]:
    return sorted({r.node for r in localize.results(detail, nodes) if not r.passed})


def test_the_first_round_pairs_neighbours_and_an_odd_node_waits():
    assert localize.first_round(names(5)) == [("n0", "n1"), ("n2", "n3")]
    assert localize.first_round(names(1)) == []


@pytest.mark.parametrize("n", [3, 4, 5, 8, 16])
def test_one_slow_node_is_named_in_two_rounds_at_any_even_count(n: int):
    nodes = names(n)
    bad = nodes[n // 2]
    detail = localize.plan_and_measure(nodes, slow_with({bad}), 0.75, None)
    assert failing(detail, nodes) == [bad]
    # 5 nodes: the odd node and both suspects need the 2 good ones, so one of the three waits a round;
    # 3 nodes: the culprit meets its second known-good node in round 3 (its round-1 partner was a suspect too)
    assert detail.rounds == (3 if n in (3, 5) else 2)
    second = [set(p.nodes) for p in detail.pairs if p.round == 2]
    # paired with a node that was fast in round 1; with 3 nodes its partner is cleared by the odd node instead
    assert any(bad in p for p in second) or n == 3


@pytest.mark.parametrize(("n", "rounds"), [(2, 1), (4, 1), (5, 2), (8, 1)])
def test_a_healthy_job_takes_one_round_and_an_odd_node_one_more(n: int, rounds: int):
    nodes = names(n)
    detail = localize.plan_and_measure(nodes, slow_with(set()), 0.75, None)
    assert detail.rounds == rounds and failing(detail, nodes) == []
    assert {m for p in detail.pairs for m in p.nodes} == set(nodes)  # every node measured


def dipping(bad: set[str], dips: set[frozenset[str]]):
    """slow_with(bad), and each pair in `dips` slow the first time it is measured (a healthy pair's bad moment)."""
    seen: set[frozenset[str]] = set()

    def measure(block: tuple[str, ...]) -> float:
        key = frozenset(block)
        dipped = key in dips and key not in seen
        seen.add(key)
        return SLOW if dipped or bad & set(block) else FAST
    return measure


@pytest.mark.parametrize(("n", "bad", "dip", "rounds"), [
    (3, set(), ("n2", "n0"), 3),  # a healthy 3-node run on GPU: the odd node's one pair dipped
    (4, {"n3"}, ("n2", "n0"), 3),  # the culprit's round-1 partner dipped with its known-good node too
    (8, set(), ("n4", "n5"), 2),  # a first-round dip: both nodes get a fresh known-good partner
])
def test_a_healthy_node_is_named_only_when_slow_with_two_known_good_nodes(n, bad, dip, rounds):
    nodes = names(n)
    detail = localize.plan_and_measure(nodes, dipping(bad, {frozenset(dip)}), 0.75, None)
    assert failing(detail, nodes) == sorted(bad) and detail.rounds == rounds
    dipped = next(r.round for r in detail.pairs if set(r.nodes) == set(dip))
    later = [set(r.nodes) for r in detail.pairs if dip[0] in r.nodes and r.round > dipped]
    assert later and all(dip[1] not in p for p in later)  # met someone new, not the pair that dipped


def test_with_one_known_good_node_one_pair_with_it_settles():
    nodes = names(3)
    detail = localize.plan_and_measure(nodes, slow_with({"n0", "n1"}), 0.75, None)
    assert detail.rounds <= 3 and len({frozenset(r.nodes) for r in detail.pairs}) == len(detail.pairs)


def test_two_slow_nodes_in_different_pairs_are_both_named_and_their_partners_cleared():
    nodes = names(8)
    detail = localize.plan_and_measure(nodes, slow_with({"n1", "n6"}), 0.75, None)
    assert failing(detail, nodes) == ["n1", "n6"] and detail.rounds == 2


def test_with_two_nodes_only_a_floor_can_fail_and_it_names_both():
    nodes = names(2)
    relative = localize.plan_and_measure(nodes, slow_with({"n1"}), 0.75, None)
    assert failing(relative, nodes) == []  # one pair: nothing to compare it with
    floored = localize.plan_and_measure(nodes, slow_with({"n1"}), 0.75, 50.0)
    assert failing(floored, nodes) == ["n0", "n1"]


def test_a_node_above_the_ratio_but_under_the_floor_fails():
    nodes = names(4)
    detail = localize.plan_and_measure(nodes, lambda b: 40.0, 0.75, 50.0)
    results = localize.results(detail, nodes)
    assert all(not r.passed and r.threshold == 50.0 for r in results)
    assert "floor 50 GB/s" in results[0].message


def test_the_culprits_result_shows_its_pairs_beside_the_median():
    nodes = names(4)
    detail = localize.plan_and_measure(nodes, slow_with({"n2"}), 0.75, None)
    r = next(x for x in localize.results(detail, nodes) if x.node == "n2")
    assert (r.value, r.threshold, r.passed) == (SLOW, 0.75 * FAST, False)
    assert "with n3 20 GB/s (round 1)" in r.message and "with n0 20 GB/s (round 2)" in r.message
    assert "median of the other nodes 100 GB/s" in r.message and "slow with every partner" in r.message


def test_a_fault_no_pair_shows_is_bisected_down_to_its_block_in_log_n_rounds():
    nodes = names(64)
    detail = localize.plan_and_measure(nodes, slow_with({"n37"}, only_at_scale=True), 0.75, None, failed=True)
    assert detail.rounds == 1 + 5  # the pairs, then 32, 16, 8, 4 and 2 nodes a half
    blocks = [r for r in localize.results(detail, nodes) if r.name == localize.BLOCK_RESULT]
    assert sorted(r.node for r in blocks) == ["n36", "n37", "n38", "n39"]
    assert all(not r.passed for r in blocks)
    assert failing(detail, nodes) == ["n36", "n37", "n38", "n39"]


def test_no_bisection_without_a_job_wide_failure_or_on_small_jobs():
    big = localize.plan_and_measure(names(64), slow_with({"n37"}, only_at_scale=True), 0.75, None)
    small = localize.plan_and_measure(names(16), slow_with({"n7"}, only_at_scale=True), 0.75, None, failed=True)
    assert big.rounds == 1 and small.rounds == 1


@pytest.mark.parametrize(("mode", "nodes", "failed", "floor", "runs"), [
    ("never", 8, True, None, False),
    ("always", 8, False, 300.0, True),
    ("always", 1, True, None, False),
    ("always", 2, True, 300.0, False),  # one pair: the job-wide sweep again, nothing to compare it with
    ("onFailure", 2, False, None, False),
    ("onFailure", 3, False, None, True),
    ("onFailure", 8, True, 300.0, True),
    ("onFailure", 8, False, 300.0, False),
    ("onFailure", 8, False, None, True),  # nothing absolute judged the fabric: the stage is the judgement
])
def test_when_the_stage_runs(mode, nodes, failed, floor, runs):
    assert localize.wanted(mode, nodes, failed, floor) is runs


def test_the_job_failed_on_a_job_wide_or_transport_failure_not_a_nodes_own_sweep():
    def r(name: str, node: str | None) -> CheckResult:
        return CheckResult(check="nccl", name=name, value=1.0, passed=False, node=node)
    assert localize.job_failed([r("all_reduce_busbw", None)])
    assert localize.job_failed([r("transport", "n1")])
    assert not localize.job_failed([r("node_all_reduce_busbw", "n1")])


def test_the_plan_is_bounded_even_when_every_round_looks_new():
    nodes = names(6)
    calls = []

    def flaky(block: tuple[str, ...]) -> float:
        calls.append(block)
        return SLOW if len(calls) % 2 else FAST
    detail = localize.plan_and_measure(nodes, flaky, 0.75, None)
    assert detail.rounds <= localize.max_rounds(6)


# ----------------------------------------------------------------------------- the operator's judgement


def config(nodes: int = 4, gpus: int = 4, checks: dict | None = None) -> WorkloadConfig:
    return WorkloadConfig.build(checks=ChecksSpec.model_validate(checks or {}), profile="h100-sxm", nodes=nodes,
                                gpus_per_node=gpus, test=TestRef(name="t", namespace="ns", uid=UID, generation=1))


def facts(cfg: WorkloadConfig) -> RunFacts:
    return RunFacts(cfg, UID, frozenset(node_names(cfg.nodes)))


def test_a_healthy_report_with_the_stage_passes_and_without_a_floor_the_stage_is_required():
    cfg = config()  # 4 GPUs a node: no inter-node floor from the 8-GPU profile, so onFailure runs the stage
    report = passing_report(cfg)
    assert report.localization is not None
    out = rejudge(report, facts(cfg))
    assert out.report.verdict(), [r.message for r in out.report.results if not r.passed]
    report.results = [r for r in report.results if r.name != localize.RESULT]
    out = rejudge(report, facts(cfg))
    missing = [r for r in out.report.results if r.name == localize.RESULT]
    assert len(missing) == 4 and not any(r.passed for r in missing)  # the pairs are there: each node's result too
    report.localization = None
    out = rejudge(report, facts(cfg))
    missing = [r for r in out.report.results if r.name == localize.RESULT]
    # no stage at all: one job-wide failure, and no node blamed for the report's shape
    assert [(r.node, r.passed) for r in missing] == [(None, False)] and out.report.failed_nodes == []


def test_with_a_floor_and_a_passing_job_the_stage_is_not_required():
    cfg = config(gpus=8)
    report = passing_report(cfg)
    assert report.localization is None
    assert rejudge(report, facts(cfg)).report.verdict()


def test_the_operator_recomputes_each_node_from_the_pair_rows():
    cfg = config()
    report = passing_report(cfg)
    nodes = node_names(4)
    slow = nodes[2]
    assert report.localization is not None
    report.localization.pairs = [
        PairRow(round=1, nodes=nodes[:2], busbw_gbps=FAST), PairRow(round=1, nodes=nodes[2:], busbw_gbps=SLOW),
        PairRow(round=2, nodes=[slow, nodes[0]], busbw_gbps=SLOW),
        PairRow(round=2, nodes=[nodes[3], nodes[1]], busbw_gbps=FAST)]
    out = rejudge(report, facts(cfg))  # the per-node results still claim every node fast
    assert out.report.failed_nodes == [slow]
    judged = next(r for r in out.report.results if r.name == localize.RESULT and r.node == slow)
    assert judged.value == SLOW and judged.threshold == pytest.approx(0.75 * FAST)
    assert "its pair rows give 20.0" in judged.message


def test_a_job_wide_failure_calls_for_the_stage_even_where_a_floor_exists():
    cfg = config(gpus=8)
    report = passing_report(cfg)
    next(r for r in report.results if r.name == "all_reduce_busbw").value = 120.0  # under the 340 floor
    out = rejudge(report, facts(cfg))
    failed = sorted((r.name, r.node) for r in out.report.results if not r.passed)
    assert failed == [("all_reduce_busbw", None), (localize.RESULT, None)] and out.report.failed_nodes == []


def test_per_node_results_without_pair_rows_fail():
    cfg = config()
    report = passing_report(cfg)
    report.localization = None
    out = rejudge(report, facts(cfg))
    assert all(not r.passed for r in out.report.results if r.name == localize.RESULT)


def test_a_bisection_block_always_fails():
    cfg = config()
    report = passing_report(cfg)
    report.results.append(CheckResult(check="nccl", name=localize.BLOCK_RESULT, value=None, passed=True,
                                      node=node_names(4)[1]))
    assert rejudge(report, facts(cfg)).report.failed_nodes == [node_names(4)[1]]


def test_the_pairs_travel_in_the_job_wide_evidence_and_the_nodes_results_in_their_shards():
    cfg = config(nodes=12)
    report = passing_report(cfg)
    status, shards = split(report, shard_names("t-evidence", 12))
    assert "localization" in shards["t-evidence-job"] and "localization" not in shards["t-evidence-1"]
    assert all(row.results >= 1 for row in status.nodes)  # each node's own row counts its inter_node_busbw
    assert assemble(status, shards).localization == report.localization
    assert report.localization is not None and status.localization is not None
    assert (status.localization.rounds, status.localization.groups) == (1, 6)  # the status says how long it took


def test_each_group_is_shown_beside_what_it_was_compared_with():
    names_, detail = localize.simulated(32, {16}, failed=True, only_at_scale=True)
    named = {r.node for r in localize.results(detail, names_) if not r.passed}
    views = localize.group_views(detail, named)
    assert [v.row for v in views] == detail.pairs
    pairs = [v for v in views if v.row.kind == "pair"]
    assert all(v.reference == 1.0 and not v.slow for v in pairs)  # no pair shows the fault
    halves = [v for v in views if v.row.kind == "block"]
    slow = [v for v in halves if v.slow]
    # each bisection round: the half holding n16 at 0.1 beside its sibling at 1.0, down to the block of 4
    assert [len(v.row.nodes) for v in slow] == [16, 8, 4] and all("n16" in v.row.nodes for v in slow)
    assert all(v.reference == 1.0 and localize.ratio_of(v.row.busbw_gbps, v.reference) == 0.1 for v in slow)
    assert set(slow[-1].named) == named and "n16" in named
