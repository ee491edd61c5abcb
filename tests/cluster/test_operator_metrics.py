"""/metrics of a running operator, scraped over HTTP after real runs, values asserted."""

from __future__ import annotations

from tests.cluster.operator_harness import Cluster, OperatorProcess, report


def get(samples: dict, metric: str, **labels: str) -> float | None:
    return samples.get((metric, frozenset(labels.items())))


def test_metrics_after_a_pass_and_a_failure(cluster: Cluster, operator: OperatorProcess):
    ns = cluster.ns
    cluster.create_test("good", {"nodes": 2})
    cluster.create_test("bad", {"nodes": 2})
    cluster.wait_job("PyTorchJob", "good-g1")
    cluster.wait_job("PyTorchJob", "bad-g1")
    running = operator.samples()
    assert get(running, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Pending") == 1
    assert get(running, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Succeeded") == 0

    cluster.write_report("good", report(1, nodes=("m-1", "m-2"), busbw=380.25))
    cluster.write_report("bad", report(1, nodes=("m-3", "m-4"), failed_node="m-4", busbw=210.0))
    cluster.wait_phase("good", "Succeeded")
    cluster.wait_phase("bad", "Failed")
    def recorded() -> dict | None:
        # Metrics are recorded just after the verdict is written: wait for the last ones of both runs.
        s = operator.samples()
        done = (get(s, "gpu_acceptance_runs_total", result="failed") == 1
                and get(s, "gpu_acceptance_runs_total", result="passed") == 1
                and get(s, "gpu_acceptance_node_passed", node="m-1") is not None
                and get(s, "gpu_acceptance_node_passed", node="m-4") is not None)
        return s if done else None

    m = cluster.wait(recorded, "both runs to be counted")

    assert get(m, "gpu_acceptance_runs_total", result="passed") == 1
    assert get(m, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Succeeded") == 1
    assert get(m, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Pending") == 0
    assert get(m, "gpu_acceptance_test_phase", namespace=ns, name="bad", phase="Failed") == 1
    assert get(m, "gpu_acceptance_allreduce_busbw_gbps", namespace=ns, name="good") == 380.25
    assert get(m, "gpu_acceptance_allreduce_busbw_gbps", namespace=ns, name="bad") == 210.0
    assert get(m, "gpu_acceptance_ddp_throughput_per_gpu", namespace=ns, name="good", unit="tokens/s") == 400000
    assert get(m, "gpu_acceptance_scaling_efficiency", namespace=ns, name="good") == 0.95
    for node, passed in (("m-1", 1), ("m-2", 1), ("m-3", 1), ("m-4", 0)):
        assert get(m, "gpu_acceptance_node_passed", node=node) == passed
    assert get(m, "gpu_acceptance_run_duration_seconds_count", result="passed") == 1
    assert get(m, "gpu_acceptance_run_duration_seconds_count", result="failed") == 1
    assert not [k for k in m if k[0] == "gpu_acceptance_reconcile_errors_total"]
    # Bounded cardinality: no label carries a message size, collective or check name.
    names = {label for _, labels in m for label, _ in labels if _ is not None}
    assert names <= {"namespace", "name", "phase", "unit", "node", "result", "le", "reason"}

    cluster.delete_test("bad")
    cluster.wait(lambda: cluster.get_test("bad") is None, "the deleted test to go")
    after = operator.samples()
    assert not [k for k in after if ("name", "bad") in k[1]]
    assert get(after, "gpu_acceptance_test_phase", namespace=ns, name="good", phase="Succeeded") == 1
