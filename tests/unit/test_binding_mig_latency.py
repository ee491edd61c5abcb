"""Issue 21 items 3-5 on the judging side: MIG mode, small-message latency per fabric, the operator's re-judging
of cpu_affinity / cpu_limit / memory_limit / mig_mode / latency, and the spec's bounds on the new fields."""

from __future__ import annotations

import pytest
from acceptance_operator.judging.rejudge import rejudge
from acceptance_workload.checks.nccl import latency
from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.checks.preflight import mig
from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import PodLimits, TestRef
from acceptance_workload.contract.wire import format_bytes
from acceptance_workload.report.model import NcclRow, NcclSweep

from tests.reports import node_names, passing_report
from tests.unit.test_bounds import errors_of, manifest
from tests.unit.test_rejudge import UID, facts, find


class NvmlError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class Nvml:
    """What nvmlDeviceGetMigMode returns or raises on one GPU (pynvml's NVMLError carries `.value`)."""

    def __init__(self, answer: object):
        self.answer = answer

    def nvmlDeviceGetMigMode(self, _handle: object) -> list[int]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


@pytest.mark.parametrize(("answer", "want", "value", "passed", "said"), [
    ([0, 0], "disabled", 0.0, True, "disabled"),
    ([1, 1], "disabled", 1.0, False, "enabled"),
    ([0, 1], "disabled", 0.0, True, "disabled (pending enabled after a GPU reset)"),
    ([1, 1], "enabled", 1.0, True, "enabled"),
    (NvmlError(mig.NVML_ERROR_NOT_SUPPORTED), "disabled", 0.0, True, "no MIG support"),  # consumer cards
    (NvmlError(mig.NVML_ERROR_FUNCTION_NOT_FOUND), "disabled", 0.0, True, "no MIG support"),
    (NvmlError(999), "disabled", None, False, None),  # a read error fails closed
])
def test_mig_mode_is_judged_and_an_unreadable_mode_fails_closed(answer, want, value, passed, said) -> None:
    r = mig.judge_mig(Nvml(answer), object(), PreflightThresholds(mig_mode=want), "n1", 3)
    assert (r.name, r.node, r.gpu, r.value, r.passed) == ("mig_mode", "n1", 3, value, passed)
    assert (said is None and "cannot read the MIG mode" in r.message) or said in (r.observed or "")
    if value == 1.0 and not passed:
        assert "GPU 3 on node n1: MIG enabled; the test needs MIG disabled" in r.message


def _sweep(times: dict[int, float], node: str | None = None, ranks: int = 8) -> NcclSweep:
    return NcclSweep(collective="all_reduce", scope="node" if node else "job", node=node, ranks=ranks,
                     dtype="float32", rows=[NcclRow(size=s, count=s // 4, timeUs=t, algbwGBps=0.1, busbwGBps=0.1,
                                                    wrong=0) for s, t in times.items()])


def test_latency_is_the_worst_time_from_8_bytes_to_64_kib_per_node_and_over_the_job() -> None:
    check = NcclCheck.model_validate({"thresholds": {"allReduceLatencyUs": 250, "nodeAllReduceLatencyUs": 100}})
    fast = {8: 9.0, 1024: 10.0, 65536: 14.0, 1 << 20: 900.0}  # 1 MiB is outside the window
    slow = {8: 9.0, 1024: 130.0, 65536: 15.0}
    sweeps = [_sweep({8: 30.0, 65536: 60.0}, ranks=16), _sweep(fast, "a"), _sweep(slow, "b")]
    out = {(r.name, r.node): r for r in latency.latency_results(check, sweeps, ["a", "b"], {})}
    job, a, b = out[("all_reduce_latency", None)], out[("node_all_reduce_latency", "a")], \
        out[("node_all_reduce_latency", "b")]
    assert (job.value, job.threshold, job.comparison, job.passed) == (60.0, 250, "le", True)
    assert (a.value, a.passed, a.observed) == (14.0, True, "64Ki")
    assert (b.value, b.passed, b.observed) == (130.0, False, "1Ki") and "needs <= 100 us" in b.message
    # a ceiling whose window the sweep never reached, or a node not measured: fails (fail closed)
    high = [_sweep({1 << 20: 1.0}, ranks=16)]
    missing = latency.latency_results(check, high, ["a"], {})
    assert [(r.name, r.value, r.passed) for r in missing] == [("all_reduce_latency", None, False),
                                                              ("node_all_reduce_latency", None, False)]
    assert "lower checks.nccl.minBytes" in missing[0].message
    assert latency.window(_sweep({4: 1.0, 8: 2.0, 65536: 3.0, 131072: 4.0}).rows)[-1].size == 65536
    assert format_bytes(latency.MAX_BYTES) == "64Ki"


def _config(nodes: int, gpus: int, fabric: str, checks: dict | None = None, **facts_: object) -> WorkloadConfig:
    return WorkloadConfig.build(checks=ChecksSpec.model_validate(checks or {}), profile="h100-sxm", nodes=nodes,
                                gpus_per_node=gpus, fabric=fabric,
                                test=TestRef(name="t", namespace="ns", uid=UID, generation=3), **facts_)


@pytest.mark.parametrize(("nodes", "gpus", "fabric", "job", "node"), [
    (1, 8, "infiniband", 100, 100),  # one node: NVLink for both
    (2, 8, "infiniband", 250, 100),  # between nodes: the fabric's ceiling
    (2, 4, "roce", 250, 100),
    (2, 8, "ethernet", None, 100),  # NCCL's sockets: reported, not judged
    (2, 1, "infiniband", 250, None),  # one GPU a node: nothing inside a node
])
def test_latency_ceilings_follow_the_fabric_and_the_gpu_count(nodes, gpus, fabric, job, node) -> None:
    th = _config(nodes, gpus, fabric).checks.nccl.thresholds
    assert (th.all_reduce_latency_us, th.node_all_reduce_latency_us) == (job, node)
    spec = _config(nodes, gpus, fabric, {"nccl": {"thresholds": {"allReduceLatencyUs": 42}}})
    assert spec.checks.nccl.thresholds.all_reduce_latency_us == 42  # a spec's own ceiling wins


def test_the_operator_rejudges_latency_binding_limits_and_mig_whatever_the_report_claims() -> None:
    cfg = _config(2, 8, "infiniband", limits=PodLimits(cpu="96", memory="1000Gi"))
    report = passing_report(cfg)
    n0, n1 = node_names(2)
    find(report, "nccl", "node_all_reduce_latency", n1).value = 480.0  # claimed passed
    affinity = next(r for r in report.results if r.name == "cpu_affinity" and r.node == n0 and r.gpu == 2)
    affinity.value = 0.5
    mode = next(r for r in report.results if r.name == "mig_mode" and r.node == n1 and r.gpu == 7)
    mode.value = 1.0
    report.results = [r for r in report.results if not (r.name == "cpu_affinity" and r.node == n1 and r.gpu == 0)]
    out = rejudge(report, facts(cfg))
    failed = {(r.name, r.node, r.gpu) for r in out.report.results if not r.passed}
    assert {("node_all_reduce_latency", n1, None), ("cpu_affinity", n0, 2), ("mig_mode", n1, 7),
            ("cpu_affinity", n1, 0)} <= failed  # the last one: missing from the report
    # spec.resources asked for limits: each node's cpu_limit and memory_limit are required
    assert {("cpu_limit", n0, None), ("memory_limit", n1, None)} <= failed
    judged = find(out.report, "nccl", "node_all_reduce_latency", n1)
    assert (judged.threshold, judged.comparison) == (100, "le")
    assert {n0, n1} <= set(out.report.failed_nodes)


def test_a_healthy_report_with_the_new_results_passes_the_operator() -> None:
    cfg = _config(1, 8, "infiniband")
    out = rejudge(passing_report(cfg, node_names(1)), facts(cfg))
    assert out.problems == [] and out.report.verdict(), [r.message for r in out.report.results if not r.passed]
    assert find(out.report, "nccl", "all_reduce_latency").threshold == 100


@pytest.mark.parametrize(("spec", "expected"), [
    ({"checks": {"nccl": {"thresholds": {"allReduceLatencyUs": 0}}}},
     "spec.checks.nccl.thresholds.allReduceLatencyUs: Input should be greater than 0"),
    ({"checks": {"nccl": {"thresholds": {"nodeAllReduceLatencyUs": 1e9}}}},
     "spec.checks.nccl.thresholds.nodeAllReduceLatencyUs: Input should be less than or equal to 10000000"),
    ({"checks": {"preflight": {"thresholds": {"migMode": "off"}}}},
     "spec.checks.preflight.thresholds.migMode: Input should be 'disabled' or 'enabled'"),
    ({"checks": {"preflight": {"thresholds": {"requireNumaLocalCpus": "sometimes"}}}},
     "spec.checks.preflight.thresholds.requireNumaLocalCpus: Input should be a valid boolean"),
])
def test_new_fields_are_refused_naming_the_field(spec: dict, expected: str) -> None:
    lines = errors_of(manifest(spec))
    assert any(line.startswith(expected) for line in lines), lines


def test_render_shows_the_new_thresholds_and_the_limits_the_workload_judges(tmp_path) -> None:
    import json

    import yaml

    from tests.unit.test_render_cli import render

    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"nodes": 2, "resources": {"cpu": "90000m", "memory": "1000Gi"},
                 "checks": {"nccl": {"thresholds": {"allReduceLatencyUs": 80}}}}}))
    proc = render(str(path))
    assert proc.returncode == 0, proc.stderr
    envs = [e for d in yaml.safe_load_all(proc.stdout) if d
            for c in _containers(d) for e in c.get("env", []) if e["name"] == "GPU_ACCEPTANCE_CONFIG"]
    config = json.loads(envs[0]["value"])
    assert config["limits"] == {"cpu": "90000m", "memory": "1000Gi"}
    assert config["checks"]["preflight"]["thresholds"]["requireNumaLocalCpus"] is True
    assert config["checks"]["preflight"]["thresholds"]["migMode"] == "disabled"
    nccl = config["checks"]["nccl"]["thresholds"]
    assert (nccl["allReduceLatencyUs"], nccl["nodeAllReduceLatencyUs"]) == (80, 100)


def _containers(doc: dict) -> list[dict]:
    """Every container in a rendered object, wherever its pod template sits."""
    found: list[dict] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            found.extend(c for c in node.get("containers", []) if isinstance(c, dict))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(doc)
    return found


def _slow_latency_report(tmp_path):
    """A judged two-node report whose node b is slow at small sizes (its latency over the NVLink ceiling)."""
    cfg = _config(2, 8, "infiniband")
    n0, n1 = node_names(2)
    report = passing_report(cfg, [n0, n1])
    find(report, "nccl", "node_all_reduce_latency", n1).value = 450.0
    for s in report.nccl:
        if s.node == n1:
            for row in latency.window(s.rows):
                row.time_us = 450.0
    return rejudge(report, facts(cfg)).report, n1


def test_the_html_report_plots_latency_with_its_ceilings(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from acceptance_workload.checks.nccl.html import LATENCY_PLOT_ID
    from acceptance_workload.writers.html import render_html

    report, slow = _slow_latency_report(tmp_path)
    page = render_html(report, title="ns/t")
    start = page.index(f'id="{LATENCY_PLOT_ID}"')
    figure = page[start:page.index("</figure>", start)]
    assert figure.count("<svg") == 1
    assert "node ceiling 100 us" in figure and "job ceiling 250 us" in figure
    assert f"node {slow}" in figure and "time per all_reduce" in figure


def test_junit_has_a_failing_latency_case_naming_the_node(tmp_path) -> None:
    junitparser = pytest.importorskip("junitparser")
    from acceptance_workload.writers.junit import junit_xml

    report, slow = _slow_latency_report(tmp_path)
    path = tmp_path / "junit.xml"
    path.write_text(junit_xml(report, "ns/t"))
    failed = [c for suite in junitparser.JUnitXml.fromfile(str(path)) for c in suite if c.is_failure]
    assert [c.name for c in failed] == [f"node_all_reduce_latency [node {slow}]"]
    (failure,) = failed[0].result
    assert "450" in failure.text and "threshold: <= 100" in failure.text
