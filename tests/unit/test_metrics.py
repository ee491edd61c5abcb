"""The operator's Prometheus metrics: names, labels, values, and series removed with their test."""

from __future__ import annotations

import urllib.request

from acceptance_operator.plumbing.metrics import OperatorMetrics
from acceptance_operator.resource.api import Summary
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.processes import free_ports


def samples(m: OperatorMetrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: OperatorMetrics, metric: str, **labels) -> float | None:
    return samples(m).get((metric, tuple(sorted(labels.items()))))


def test_phase_is_one_hot():
    m = OperatorMetrics()
    m.set_phase("ns", "t", "Running")
    assert value(m, "gpu_acceptance_test_phase", namespace="ns", name="t", phase="Running") == 1
    for other in ("Pending", "Succeeded", "Failed"):
        assert value(m, "gpu_acceptance_test_phase", namespace="ns", name="t", phase=other) == 0
    m.set_phase("ns", "t", "Failed")
    assert value(m, "gpu_acceptance_test_phase", namespace="ns", name="t", phase="Running") == 0
    assert value(m, "gpu_acceptance_test_phase", namespace="ns", name="t", phase="Failed") == 1


def test_headline_numbers_and_their_removal():
    m = OperatorMetrics()
    m.set_headline("ns", "t", Summary(result="Passed", all_reduce_busbw_gbps=371.5, ddp_throughput_per_gpu=41000,
                                      ddp_throughput_unit="tokens/s", scaling_efficiency=0.93))
    assert value(m, "gpu_acceptance_allreduce_busbw_gbps", namespace="ns", name="t") == 371.5
    assert value(m, "gpu_acceptance_ddp_throughput_per_gpu", namespace="ns", name="t", unit="tokens/s") == 41000
    assert value(m, "gpu_acceptance_scaling_efficiency", namespace="ns", name="t") == 0.93
    # A new run without DDP numbers leaves no stale DDP series behind.
    assert value(m, "gpu_acceptance_test_failed_nodes", namespace="ns", name="t") == 0
    m.set_headline("ns", "t", Summary(result="Failed", all_reduce_busbw_gbps=100, failed_nodes=["gpu-2", "gpu-5"]))
    assert value(m, "gpu_acceptance_test_failed_nodes", namespace="ns", name="t") == 2
    assert value(m, "gpu_acceptance_ddp_throughput_per_gpu", namespace="ns", name="t", unit="tokens/s") is None
    assert value(m, "gpu_acceptance_scaling_efficiency", namespace="ns", name="t") is None
    assert value(m, "gpu_acceptance_allreduce_busbw_gbps", namespace="ns", name="t") == 100
    m.set_phase("ns", "t", "Failed")
    m.set_phase("ns", "other", "Running")
    m.forget("ns", "t")
    left = [k for k in samples(m) if dict(k[1]).get("name") == "t"]
    assert left == []
    assert value(m, "gpu_acceptance_test_phase", namespace="ns", name="other", phase="Running") == 1


def test_runs_and_duration_by_result():
    m = OperatorMetrics()
    assert value(m, "gpu_acceptance_runs_total", result="passed") == 0  # both results exist from the start
    m.record_run(True, 120)
    m.record_run(False, 4000)
    m.record_run(False, None)
    assert value(m, "gpu_acceptance_runs_total", result="passed") == 1
    assert value(m, "gpu_acceptance_runs_total", result="failed") == 2
    assert value(m, "gpu_acceptance_run_duration_seconds_count", result="failed") == 1
    assert value(m, "gpu_acceptance_run_duration_seconds_bucket", result="passed", le="300.0") == 1
    assert value(m, "gpu_acceptance_run_duration_seconds_bucket", result="passed", le="60.0") == 0


def test_nodes_and_errors():
    m = OperatorMetrics()
    m.set_nodes({"gpu-1": True, "gpu-2": False})
    m.reconcile_error("http_500")
    m.reconcile_error("http_500")
    assert value(m, "gpu_acceptance_node_passed", node="gpu-1") == 1
    assert value(m, "gpu_acceptance_node_passed", node="gpu-2") == 0
    assert value(m, "gpu_acceptance_reconcile_errors_total", reason="http_500") == 2


def test_registries_are_separate():
    a, b = OperatorMetrics(), OperatorMetrics()
    a.reconcile_error("x")
    assert value(b, "gpu_acceptance_reconcile_errors_total", reason="x") is None


def test_served_over_http():
    m = OperatorMetrics()
    m.set_phase("ns", "t", "Pending")
    (port,) = free_ports(1)
    m.serve(port, addr="127.0.0.1")
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'gpu_acceptance_test_phase{name="t",namespace="ns",phase="Pending"} 1.0' in body


def test_last_pass_is_the_latest_and_shown_only_for_nodes_that_exist():
    m = OperatorMetrics()
    m.set_last_pass("gpu-1", 2000.0)  # from a test's status, before the node watch saw the node
    assert value(m, "gpu_acceptance_node_last_pass_timestamp_seconds", node="gpu-1") is None
    m.node_exists("gpu-1", 1000.0)
    assert value(m, "gpu_acceptance_node_last_pass_timestamp_seconds", node="gpu-1") == 2000.0
    assert value(m, "gpu_acceptance_gpu_node_created_timestamp_seconds", node="gpu-1") == 1000.0
    m.set_last_pass("gpu-1", 1500.0)  # an older pass (another source) changes nothing
    assert value(m, "gpu_acceptance_node_last_pass_timestamp_seconds", node="gpu-1") == 2000.0
    m.set_last_pass("gpu-1", 3000.0)
    assert value(m, "gpu_acceptance_node_last_pass_timestamp_seconds", node="gpu-1") == 3000.0
    m.node_exists("cpu-1", None)  # no GPUs: no creation series
    assert value(m, "gpu_acceptance_gpu_node_created_timestamp_seconds", node="cpu-1") is None
    m.node_deleted("gpu-1")
    assert value(m, "gpu_acceptance_node_last_pass_timestamp_seconds", node="gpu-1") is None
    assert value(m, "gpu_acceptance_gpu_node_created_timestamp_seconds", node="gpu-1") is None
