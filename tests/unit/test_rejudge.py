"""The operator judges every result again from the spec and profile, and checks the report fits the run."""

from __future__ import annotations

import pytest
from acceptance_operator.judging.rejudge import RULES, Context, RunFacts, judge_result, rejudge, required_results
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import TestRef
from acceptance_workload.contract.results import CheckResult

from tests.reports import node_names, one_rank, passing_report

UID = "0f6b7c1e-uid"


def config(nodes: int = 2, gpus: int = 8, profile: str = "h100-sxm", checks: dict | None = None) -> WorkloadConfig:
    return WorkloadConfig.build(checks=ChecksSpec.model_validate(checks or {}), profile=profile, nodes=nodes,
                                gpus_per_node=gpus, test=TestRef(name="t", namespace="ns", uid=UID, generation=3))


def facts(cfg: WorkloadConfig, pod_nodes: list[str] | None = None) -> RunFacts:
    return RunFacts(cfg, UID, frozenset(pod_nodes if pod_nodes is not None else node_names(cfg.nodes)))


def find(report, check: str, name: str, node: str | None = None) -> CheckResult:
    return next(r for r in report.results if (r.check, r.name, r.node) == (check, name, node))


def test_a_healthy_report_passes_with_the_operators_thresholds():
    cfg = config()
    out = rejudge(passing_report(cfg), facts(cfg))
    assert out.problems == []
    assert out.report.verdict(), [r.message for r in out.report.results if not r.passed]
    busbw = find(out.report, "nccl", "all_reduce_busbw")
    assert (busbw.threshold, busbw.comparison) == (340, "ge")  # h100-sxm, several nodes


def test_a_result_below_its_threshold_fails_whatever_it_claims():
    cfg = config()
    report = passing_report(cfg)
    claimed = find(report, "nccl", "all_reduce_busbw")
    claimed.value, claimed.threshold, claimed.passed = 1.0, 0.5, True
    out = rejudge(report, facts(cfg))
    judged = find(out.report, "nccl", "all_reduce_busbw")
    assert (judged.passed, judged.threshold) == (False, 340)
    assert not out.report.verdict()
    assert claimed.passed and claimed.threshold == 0.5  # the report itself is left as written


def test_an_overruled_result_says_so_before_the_workloads_own_text():
    cfg = config()
    report = passing_report(cfg)
    claimed = find(report, "nccl", "all_reduce_busbw")
    claimed.value, claimed.threshold, claimed.passed = 300.0, 299.0, True
    claimed.message = "300 GB/s busbw at 1Gi >= 299"
    judged = find(rejudge(report, facts(cfg)).report, "nccl", "all_reduce_busbw")
    assert not judged.passed
    assert judged.message == ("failed as the operator judges it (300 >= 340; the report said passed); "
                              "300 GB/s busbw at 1Gi >= 299")
    agreed = find(rejudge(passing_report(cfg), facts(cfg)).report, "nccl", "all_reduce_busbw")
    assert agreed.passed and "as the operator judges it" not in agreed.message


def test_a_threshold_set_in_the_spec_wins_over_the_profile():
    cfg = config(checks={"ddp": {"thresholds": {"minThroughputPerGpu": 500_000}}})
    out = rejudge(passing_report(cfg), facts(cfg))
    assert not find(out.report, "ddp", "throughput_per_gpu").passed
    assert find(out.report, "ddp", "throughput_per_gpu").threshold == 500_000


@pytest.mark.parametrize(("check", "name", "value", "node_gpu"), [
    ("preflight", "temperature", 95.0, ("gpu-node-0001", 3)),
    ("preflight", "ecc_uncorrected", 2.0, ("gpu-node-0000", 0)),
    ("preflight", "gpu_in_use", 76_000.0, ("gpu-node-0001", 2)),
    ("preflight", "nvlink_active_links", 12.0, ("gpu-node-0000", 5)),
    ("preflight", "gpu_count", 7.0, ("gpu-node-0001", None)),
    ("preflight", "shm_size", float(1 << 20), ("gpu-node-0000", None)),
    ("preflight", "ib_port_rate", 200.0, ("gpu-node-0000", None)),
    ("nccl", "node_all_reduce_busbw", 120.0, ("gpu-node-0001", None)),
    ("ddp", "straggler_ratio", 1.5, ("gpu-node-0000", 0)),
    ("ddp", "loss_decrease", 0.0, (None, None)),
    ("ddp", "scaling_efficiency", 0.5, (None, None)),
])
def test_each_family_is_judged_from_the_value(check, name, value, node_gpu):
    cfg = config()
    report = passing_report(cfg)
    node, gpu = node_gpu
    target = next(r for r in report.results if (r.check, r.name, r.node) == (check, name, node)
                  and (gpu is None or r.gpu == gpu))
    target.value = value
    out = rejudge(report, facts(cfg))
    assert not out.report.verdict()
    failed = [(r.check, r.name, r.node) for r in out.report.results if not r.passed]
    assert failed == [(check, name, node)]
    if node:
        assert out.report.failed_nodes == [node]


def test_version_and_model_flags_are_judged_from_what_was_observed():
    cfg = config()
    report = passing_report(cfg)
    find(report, "preflight", "driver_version", "gpu-node-0000").observed = "470.1"  # value still says 1 (good)
    next(r for r in report.results if r.name == "gpu_model" and r.node == "gpu-node-0001").observed = "NVIDIA A10"
    out = rejudge(report, facts(cfg))
    failed = {(r.name, r.node) for r in out.report.results if not r.passed}
    assert failed == {("driver_version", "gpu-node-0000"), ("gpu_model", "gpu-node-0001")}


def test_a_transport_judged_against_another_requirement_fails():
    cfg = config()
    report = passing_report(cfg)
    t = find(report, "nccl", "transport", "gpu-node-0000")
    t.expected = t.observed = "SOCKET"  # the report "required" sockets and saw them: the spec requires IB_GDR
    out = rejudge(report, facts(cfg))
    assert not find(out.report, "nccl", "transport", "gpu-node-0000").passed
    assert "requires IB_GDR" in find(out.report, "nccl", "transport", "gpu-node-0000").message


def test_an_unknown_result_fails_closed():
    cfg = config()
    report = passing_report(cfg)
    report.results.append(CheckResult(check="nccl", name="vibes", value=1.0, passed=True))
    out = rejudge(report, facts(cfg))
    unknown = find(out.report, "nccl", "vibes")
    assert not unknown.passed and "does not know" in unknown.message


def test_a_culprit_rank_always_fails():
    cfg = config()
    report = passing_report(cfg)
    report.results.append(CheckResult(check="nccl", name="rank_responding", value=1.0, threshold=0.0,
                                      passed=True, node="gpu-node-0001"))
    out = rejudge(report, facts(cfg))
    assert out.report.failed_nodes == ["gpu-node-0001"]


def test_leaving_out_a_judged_result_fails_it():
    cfg = config()
    report = passing_report(cfg)
    report.results = [r for r in report.results
                      if (r.name, r.node) not in {("all_reduce_busbw", None), ("gpu_count", "gpu-node-0001")}]
    out = rejudge(report, facts(cfg))
    missing = {(r.name, r.node) for r in out.report.results if not r.passed}
    assert missing == {("all_reduce_busbw", None), ("gpu_count", "gpu-node-0001")}


def test_node_sweeps_are_required_only_where_per_node_asks_for_them():
    def node_rows(cfg, nodes):
        return [r.node for r in required_results(cfg, nodes) if r.name == "node_all_reduce_busbw"]
    assert node_rows(config(), ["a", "b"]) == ["a", "b"]
    off = config(checks={"nccl": {"perNode": False}})
    assert node_rows(off, ["a", "b"]) == []
    assert node_rows(config(nodes=1, checks={"nccl": {"perNode": False}}), ["a"]) == ["a"]  # the job's sweep


def test_a_disabled_check_is_not_required_and_an_enabled_one_without_results_fails():
    cfg = config(checks={"ddp": {"enabled": False}})
    assert not [r for r in required_results(cfg, ["a"]) if r.check == "ddp"]
    report = passing_report(config())  # ddp results present but ddp disabled: judged, not required
    report.results = [r for r in report.results if r.check != "preflight"]
    out = rejudge(report, facts(cfg))
    assert not out.report.verdict()
    assert ("gpu_count", "gpu-node-0000") in {(r.name, r.node) for r in out.report.results if not r.passed}


@pytest.mark.parametrize(("change", "why"), [
    (lambda r: setattr(r, "mode", "cpu-smoke"), "cpu-smoke report"),
    (lambda r: setattr(r, "uid", "someone-else"), "uid someone-else"),
    (lambda r: setattr(r, "generation", 2), "generation 2, not 3"),
    (lambda r: setattr(r.environment, "gpus_per_node", 2), "2 GPU(s) per node"),
    (lambda r: setattr(r.environment, "hostnames", ["gpu-node-0000"]), "measured 1 node(s)"),
    (lambda r: setattr(r.environment, "hostnames", ["gpu-node-0000", "elsewhere"]), "elsewhere ran no pod"),
])
def test_a_report_that_does_not_describe_the_run_is_named(change, why):
    cfg = config()
    report = passing_report(cfg)
    change(report)
    out = rejudge(report, facts(cfg))
    assert any(why in p for p in out.problems), out.problems


def test_a_report_for_fewer_nodes_than_the_spec_is_a_problem():
    small = passing_report(config(nodes=1), ["gpu-node-0000"])
    out = rejudge(small, facts(config(nodes=64)))
    assert any("spec.nodes is 64" in p for p in out.problems)


def test_every_result_the_workload_writes_has_a_rule():
    cfg = config()
    names = {(r.check, r.name) for r in passing_report(cfg).results}
    assert names <= set(RULES), names - set(RULES)


def test_judging_keeps_the_message_short():
    cfg = config()
    r = CheckResult(check="nccl", name="all_reduce_busbw", value=1.0, passed=True, message="x" * 100_000)
    assert len(judge_result(r, Context(cfg, passing_report(cfg))).message) <= 500


def gpu_result(report, name: str, node: str, gpu: int) -> CheckResult:
    return next(r for r in report.results if (r.check, r.name, r.node, r.gpu) == ("gpu", name, node, gpu))


def test_a_gpu_below_the_profile_floor_fails_naming_node_and_gpu():
    cfg = config()
    report = passing_report(cfg)
    gpu_result(report, "hbm_bandwidth", "gpu-node-0001", 6).value = 1_000.0
    out = rejudge(report, facts(cfg))
    failed = [(r.name, r.node, r.gpu) for r in out.report.results if not r.passed]
    # absolute floor (h100-sxm 2,500 GB/s), and against its node's median: the ratio is recomputed from the values
    assert failed == [("hbm_bandwidth", "gpu-node-0001", 6), ("hbm_bandwidth_ratio_to_node_median", "gpu-node-0001", 6)]
    ratio = gpu_result(out.report, "hbm_bandwidth_ratio_to_node_median", "gpu-node-0001", 6)
    assert ratio.value == pytest.approx(1_000 / 4_200, abs=1e-3) and "the report said 1.0" in ratio.message


def test_a_gpu_slower_than_its_neighbours_fails_even_under_a_loose_floor():
    cfg = config(checks={"gpu": {"thresholds": {"minGemmTflops": 100}}})
    report = passing_report(cfg)
    gpu_result(report, "gemm_tflops", "gpu-node-0000", 2).value = 400.0  # its ratio still claims 1.0
    out = rejudge(report, facts(cfg))
    assert [(r.name, r.gpu) for r in out.report.results if not r.passed] == [("gemm_tflops_ratio_to_node_median", 2)]
    assert out.report.failed_nodes == ["gpu-node-0000"]


def test_every_gpu_must_be_reported():
    cfg = config()
    report = passing_report(cfg)
    report.results = [r for r in report.results if not (r.check == "gpu" and r.node == "gpu-node-0001" and r.gpu == 7)]
    out = rejudge(report, facts(cfg))
    missing = {(r.name, r.gpu) for r in out.report.results if not r.passed}
    assert ("gemm_tflops", 7) in missing and ("d2h_bandwidth_ratio_to_node_median", 7) in missing
    assert len(missing) == 8


def test_cross_check_results_are_required_per_node_and_judged_by_the_tolerance():
    cfg = config(checks={"nccl": {"crossCheck": True, "collectives": ["all_reduce", "all_gather"],
                                  "thresholds": {"crossCheckTolerance": 0.05}}})
    report = passing_report(cfg)
    out = rejudge(report, facts(cfg))
    missing = sorted((r.name, r.node) for r in out.report.results if not r.passed)
    assert missing == [(f"{c}_cross_check", n) for c in ("all_gather", "all_reduce")
                       for n in ("gpu-node-0000", "gpu-node-0001")]
    assert all("crossCheck" in r.message for r in out.report.results if not r.passed)
    for node in ("gpu-node-0000", "gpu-node-0001"):
        for c in ("all_reduce", "all_gather"):  # the workload claims pass, and a 0.5 tolerance
            report.results.append(CheckResult(check="nccl", name=f"{c}_cross_check", value=0.03, threshold=0.5,
                                              comparison="le", passed=True, node=node))
    find(report, "nccl", "all_gather_cross_check", "gpu-node-0001").value = 0.08
    out = rejudge(report, facts(cfg))
    assert [(r.name, r.node, r.threshold) for r in out.report.results if not r.passed] == [
        ("all_gather_cross_check", "gpu-node-0001", 0.05)]
    assert out.report.failed_nodes == ["gpu-node-0001"]
    default = config(checks={"nccl": {"crossCheck": True}})
    assert default.checks.nccl.thresholds.cross_check_limit() == 0.1
    assert config(profile="custom").checks.nccl.thresholds.cross_check_limit() == 0.1  # custom sets none: the default


def test_a_one_gpu_report_without_busbw_or_scaling_efficiency_passes_as_the_operator_judges_it():
    """One rank: the workload skips busbw and DDP scaling, saying why (nccl.py, ddp.py). The operator requires
    neither, so its verdict and the headline of the summary agree with the workload's: passed, no 0.0 numbers."""
    cfg = config(nodes=1, gpus=1)
    judged = rejudge(one_rank(passing_report(cfg)), facts(cfg)).report
    assert judged.passed, [r.message for r in judged.results if not r.passed]
    head = judged.headline()
    assert head.all_reduce_busbw_gbps is None and head.scaling_efficiency is None
    assert "ddp" in {req.check for req in required_results(cfg, ["gpu-node-0000"])}
    assert not {"scaling_efficiency", "all_reduce_busbw", "node_all_reduce_busbw"} & {
        req.name for req in required_results(cfg, ["gpu-node-0000"])}
