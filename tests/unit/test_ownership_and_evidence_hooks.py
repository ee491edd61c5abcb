"""How the operator reads a delivered report back from the evidence; condition messages within bounds."""

from __future__ import annotations

from typing import Any

from acceptance_operator.building.manifests import evidence_names
from acceptance_operator.reconcile import evidence_hooks
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.conditions import MAX_CONDITION_MESSAGE, clip_message
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef
from acceptance_workload.report.evidence import EVIDENCE_KEY, split

from tests.reports import passing_report


def test_condition_messages_are_clipped_saying_so():
    clipped = clip_message("y" * 100_000)
    assert len(clipped) == MAX_CONDITION_MESSAGE and "more characters" in clipped


class Kube:
    def __init__(self, data: dict[str, str]) -> None:
        self.data = data
        self.read_names: list[str] = []

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.read_names.append(name)
        return {"data": {EVIDENCE_KEY: self.data[name]}} if name in self.data else None


def a_test(nodes: int = 9) -> AcceptanceTest:
    return AcceptanceTest.model_validate({"metadata": {"name": "t", "namespace": "ns", "uid": "u", "generation": 2},
                                         "spec": {"nodes": nodes}})


def delivered(nodes: int = 9) -> tuple[Report, Any, dict[str, str]]:
    config = WorkloadConfig.build(checks=ChecksSpec(), profile="h100-sxm", nodes=nodes, gpus_per_node=8,
                                  test=TestRef(name="t", namespace="ns", uid="u", generation=2))
    report = passing_report(config)
    status, shards = split(report, evidence_names(a_test(nodes)))
    return report, status, shards


def test_the_full_report_comes_from_this_runs_evidence():
    report, status, shards = delivered()
    full = Report.model_validate(evidence_hooks.full_report(Kube(shards), a_test(), status.to_wire()))
    assert len(full.results) == len(report.results) and full.error is None


def test_evidence_names_the_status_part_lists_are_not_followed():
    _, status, shards = delivered()
    k = Kube({**shards, "someone-elses": shards["t-evidence-job"]})
    forged = status.model_copy(update={"evidence": ["someone-elses", *status.evidence[1:]]})
    full = Report.model_validate(evidence_hooks.full_report(k, a_test(), forged.to_wire()))
    assert full.error and "this run's are" in full.error and "someone-elses" not in k.read_names


def test_missing_evidence_fails_and_another_generation_is_only_a_stub():
    _, status, shards = delivered()
    missing = {k: v for k, v in shards.items() if k != "t-evidence-1"}
    full = Report.model_validate(evidence_hooks.full_report(Kube(missing), a_test(), status.to_wire()))
    assert not full.verdict() and "t-evidence-1 is missing" in full.error
    old = status.model_copy(update={"generation": 1})
    k = Kube(shards)
    assert evidence_hooks.full_report(k, a_test(), old.to_wire()) == {"generation": 1} and not k.read_names
    assert evidence_hooks.full_report(k, a_test(), None) is None


def _faulty(nodes: int = 20) -> tuple[Report, dict[str, str]]:
    """A 20-node report (3 node shards) with a node short of a GPU, a slow GPU and a node missing a result."""
    report, _, _ = delivered(nodes)
    names = sorted({r.node for r in report.results if r.node})
    for r in report.results:
        if (r.name, r.node) == ("gpu_count", names[3]):
            r.value = 7.0
        if (r.name, r.node, r.gpu) == ("gemm_tflops", names[17], 5):
            r.value = 300.0  # below the floor, and half its node's median
    report.results = [r for r in report.results if (r.name, r.node) != ("node_all_reduce_busbw", names[11])]
    status, shards = split(report, evidence_names(a_test(nodes)))
    return report, {"status": status.to_wire(), **shards}


def test_the_verdict_judges_the_evidence_part_by_part_as_the_whole_report_would():
    """What the operator concludes from a report read one ConfigMap at a time, keeping only what the verdict needs,
    is what judging the assembled report gives: verdict, counts, headline, message, blamed and measured nodes."""
    from acceptance_operator.judging.rejudge import RunFacts, rejudge
    from acceptance_operator.judging.verdict import measured_nodes, summarize, verdict_message

    test = a_test(20)
    facts = RunFacts(manifests_config(test), "u", None)
    _, delivery = _faulty()
    status = delivery.pop("status")
    raw, judged = evidence_hooks.judged_report(Kube(delivery), test, status, facts)
    whole = rejudge(Report.model_validate(evidence_hooks.full_report(Kube(delivery), test, status)), facts)
    assert raw is None and judged is not None and judged.problems == whole.problems == []
    assert summarize(judged.report) == summarize(whole.report)
    assert summarize(judged.report).failed == 4 and len(summarize(judged.report).failed_nodes) == 3  # gemm: 2
    assert verdict_message(judged.report) == verdict_message(whole.report)
    assert measured_nodes(judged.report) == measured_nodes(whole.report)
    # Folded: the failures and the job-wide results as judged, one stand-in per check and node for the rest.
    kept = {id(r) for r in judged.report.results}
    assert len(judged.report.results) == len(whole.report.results) > 20 * 100
    assert len(kept) <= 4 + sum(1 for r in whole.report.results if r.node is None) + len(whole.report.checks_run) * 20
    assert all(s.scope == "job" for s in judged.report.nccl) and not (judged.report.gpu and judged.report.gpu.rows)


def _all_failing(nodes: int = 20) -> tuple[Report, dict[str, str]]:
    """A 20-node report in which every result fails (none has a value: a missing measurement fails closed), ~160
    a node, and the last node's GPU results left out (each then fails as a missing required result)."""
    report, _, _ = delivered(nodes)
    last = max(r.node for r in report.results if r.node)
    report.results = [r.model_copy(update={"value": None}) for r in report.results
                      if (r.check, r.node) != ("gpu", last)]
    status, shards = split(report, evidence_names(a_test(nodes)))
    return report, {"status": status.to_wire(), **shards}


def _judged_both_ways(delivery: dict[str, Any], nodes: int = 20) -> tuple[Report, Report]:
    """The report judged as the operator's verdict does (part by part, folded) and judged whole."""
    from acceptance_operator.judging.rejudge import RunFacts, rejudge

    test = a_test(nodes)
    facts = RunFacts(manifests_config(test), "u", None)
    status = delivery["status"]
    evidence = {name: text for name, text in delivery.items() if name != "status"}
    raw, judged = evidence_hooks.judged_report(Kube(evidence), test, status, facts)
    whole = rejudge(Report.model_validate(evidence_hooks.full_report(Kube(evidence), test, status)), facts)
    assert raw is None and judged is not None and judged.problems == whole.problems == []
    return judged.report, whole.report


def test_a_report_failing_everywhere_gets_the_same_verdict_folded():
    """Every result failing, ~160 a node: what the status, the condition and the node actions read of the folded
    report is what the whole report gives."""
    from acceptance_operator.judging.verdict import measured_nodes, summarize, verdict_message
    from acceptance_workload.report.evidence import MAX_FAILURES, compact, node_rows

    judged, whole = _judged_both_ways(_all_failing()[1])
    assert not judged.verdict() and not whole.verdict()
    assert len(judged.results) == len(whole.results) and all(not r.passed for r in whole.results)
    assert judged.blamed_nodes() == whole.blamed_nodes() and len(whole.blamed_nodes()) == 20
    assert judged.tally() == whole.tally() and judged.headline() == whole.headline()
    assert summarize(judged) == summarize(whole) and verdict_message(judged) == verdict_message(whole)
    assert measured_nodes(judged) == measured_nodes(whole) and node_rows(judged) == node_rows(whole)
    first = [r for r in judged.results if not r.passed][:MAX_FAILURES]
    assert first == [r for r in whole.results if not r.passed][:MAX_FAILURES]
    assert compact(judged, ["e"]) == compact(whole, ["e"])


def test_a_folded_verdict_keeps_a_bounded_number_of_each_nodes_failures():
    """Past the report's first MAX_FAILURES, a node's failures are kept whole up to FAILED_KEPT_PER_NODE; each
    further one (a missing required result too) is a shared stand-in of its check on its node, in its place; a
    failed transport, which says the job failed, stays whole."""
    from acceptance_operator.judging.rejudge import FAILED_KEPT_PER_NODE
    from acceptance_workload.checks.nccl import localize
    from acceptance_workload.report.evidence import MAX_FAILURES

    judged, whole = _judged_both_ways(_all_failing()[1])
    kept: dict[str, set[int]] = {}  # per node, the distinct failed results kept as judged
    shared: dict[str, set[int]] = {}  # per node, the distinct stand-ins
    signals: dict[str, list[str]] = {}  # per node, the failures kept because they say the job failed
    for mine, theirs in zip(judged.results, whole.results, strict=True):
        assert (mine.check, mine.node, mine.passed) == (theirs.check, theirs.node, theirs.passed)
        if mine.node is None:
            continue
        if mine == theirs and localize.job_failed((mine,)):
            signals.setdefault(mine.node, []).append(mine.name)
        else:
            (kept if mine == theirs else shared).setdefault(mine.node, set()).add(id(mine))
    assert set(signals) == set(kept) and all(names == ["transport"] for names in signals.values())
    job_failures = next(i for i, r in enumerate(whole.results) if r.node)  # the job-wide part's, all failed
    first, *others = sorted(kept)
    assert len(kept[first]) == MAX_FAILURES - job_failures > FAILED_KEPT_PER_NODE  # the status's first failures
    assert {len(kept[node]) for node in others} == {FAILED_KEPT_PER_NODE}
    checks = {node: {r.check for r in whole.results if r.node == node} for node in kept}
    assert all(len(shared[node]) == len(checks[node]) for node in kept)  # one stand-in per check and node
    assert sum(1 for r in whole.results if r.node == others[-1] and r.check == "gpu") > FAILED_KEPT_PER_NODE
    assert len({id(r) for r in judged.results}) < len(whole.results) // 5


def test_a_failure_that_decides_what_is_required_is_never_folded():
    """A node's failed transport says the fabric failed, which makes the localisation stage's results required:
    folded past the node's first failures, it would leave that requirement out of the verdict and the counts."""
    from acceptance_operator.judging.verdict import summarize, verdict_message
    from acceptance_workload.checks.nccl import localize

    report, _, _ = delivered(20)
    report.results = [r if r.node is None else r.model_copy(update={"value": None}) for r in report.results]
    status, shards = split(report, evidence_names(a_test(20)))
    judged, whole = _judged_both_ways({"status": status.to_wire(), **shards})
    job_wide = [r for r in whole.results if r.node is None and r.check == "nccl"]
    assert [r.name for r in job_wide if not r.passed] == [localize.RESULT]  # the report's own job-wide ones pass
    assert summarize(judged) == summarize(whole) and verdict_message(judged) == verdict_message(whole)


def test_the_verdict_reads_the_evidence_one_configmap_at_a_time():
    from acceptance_workload.checks.report_model import parts
    from acceptance_workload.report.evidence import StatusReport

    _, status, shards = delivered(20)
    k = Kube(shards)
    each = parts(StatusReport.model_validate(status.to_wire()), lambda name: k.read("ConfigMap", "ns", name)
                 and shards[name])
    assert next(each).results and k.read_names == ["t-evidence-job"]
    next(each)
    assert k.read_names == ["t-evidence-job", "t-evidence-0"]


def test_a_nodes_results_spread_over_two_configmaps_are_refused():
    """A GPU is judged against the rest of its node, found in the node's own ConfigMap: a report that puts one of
    a node's results into another ConfigMap (to be compared with nothing) cannot pass."""
    from acceptance_operator.judging.rejudge import RunFacts

    test = a_test(20)
    _, delivery = _faulty()
    status = delivery.pop("status")
    first, second = Report.model_validate_json(delivery["t-evidence-0"]), Report.model_validate_json(
        delivery["t-evidence-1"])
    moved = next(r for r in first.results if r.name == "gemm_tflops")
    first.results.remove(moved)
    second.results.append(moved)
    delivery.update({"t-evidence-0": first.model_dump_json(by_alias=True),
                     "t-evidence-1": second.model_dump_json(by_alias=True)})
    raw, judged = evidence_hooks.judged_report(Kube(delivery), test, status, RunFacts(manifests_config(test), "u"))
    refused = Report.model_validate(raw)
    assert judged is None and not refused.verdict()
    assert f"t-evidence-0 and t-evidence-1 both hold results of node {moved.node}" in (refused.error or "")
    full = Report.model_validate(evidence_hooks.full_report(Kube(delivery), test, status))
    assert "both hold results" in (full.error or "")


def manifests_config(test: AcceptanceTest) -> WorkloadConfig:
    from acceptance_operator.building.manifests import build_workload_config

    return build_workload_config(test)


def test_the_delivered_status_part_is_found_only_once_rank_0_wrote_it():
    """The job-wide ConfigMap's status part (written last) is what says the evidence is complete."""
    assert evidence_hooks.delivered(None) is None and evidence_hooks.delivered({EVIDENCE_KEY: "{}"}) is None
    assert evidence_hooks.delivered({"status.json": '{"generation": 1}'}) == {"generation": 1}
    assert evidence_hooks.delivered({"status.json": "not json"}) == "not json"  # judged as unreadable
