"""The workload reports, the operator decides: against the real API server and the operator process.

The workload's own token (the per-test ServiceAccount the operator created)
may write only its run's evidence ConfigMaps: every write to the AcceptanceTest
(status or main resource) is refused, and the run goes on to a verdict the
operator draws itself. Reports that do not describe the run, or whose results
claim a pass their values do not earn, end Failed naming why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acceptance_workload.report.kubeclient import api_client
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.operator_harness import MERGE, Cluster, report

FORGED = {"phase": "Succeeded", "summary": {"result": "Passed", "allReduceBusbwGBps": 999},
          "conditions": [{"type": "Succeeded", "status": "True", "reason": "ChecksPassed", "message": "trust me",
                          "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
          "observedGeneration": 1, "report": {"generation": 1, "passed": True}}


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    """Each test in a namespace of its own under the module's one operator: they judge their own tests only."""
    return shared_cluster


def workload_api(cluster: Cluster, name: str, tmp_path: Path) -> client.CustomObjectsApi:
    """A client with the token of the test's workload ServiceAccount, as rank 0 has in its pod."""
    token = cluster.server.token_for_service_account(cluster.ns, f"{name}-workload", create=False)
    return client.CustomObjectsApi(api_client(str(cluster.server.kubeconfig_for_token(
        token, tmp_path / f"{name}.kubeconfig"))))


def test_the_workloads_token_can_write_no_field_of_any_acceptancetest(cluster: Cluster, tmp_path: Path):
    cluster.create_test("forge", {"nodes": 1})
    cluster.wait_phase("forge", "Pending")
    api = workload_api(cluster, "forge", tmp_path)
    before = cluster.get_test("forge") or {}
    whole = {k: v for k, v in before.items() if not k.startswith("_")}
    at = ("gpu-acceptance.io", "v1alpha1", cluster.ns, "acceptancetests")
    attempts = {
        "patch status": lambda: api.patch_namespaced_custom_object_status(*at, "forge", {"status": FORGED},
                                                                          _content_type=MERGE),
        "replace status": lambda: api.replace_namespaced_custom_object_status(*at, "forge", {
            **whole, "status": FORGED}),
        "patch spec": lambda: api.patch_namespaced_custom_object(*at, "forge", {"spec": {"nodes": 2}},
                                                                 _content_type=MERGE),
        "patch metadata": lambda: api.patch_namespaced_custom_object(*at, "forge", {"metadata": {
            "labels": {"x": "y"}, "annotations": {"gpu-acceptance.io/rerun": "forged"}}}, _content_type=MERGE),
        "replace": lambda: api.replace_namespaced_custom_object(*at, "forge", whole),
        "delete": lambda: api.delete_namespaced_custom_object(*at, "forge"),
        "create": lambda: api.create_namespaced_custom_object(*at, {
            "apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "metadata": {"name": "other"},
            "spec": {}}),
        "patch another test's status": lambda: api.patch_namespaced_custom_object_status(
            *at, "witness", {"status": FORGED}, _content_type=MERGE),
    }
    cluster.create_test("witness", {"nodes": 1})
    for what, attempt in attempts.items():
        with pytest.raises(ApiException) as refused:
            attempt()
        assert refused.value.status == 403, what
    after = cluster.get_test("forge") or {}
    assert after["spec"] == before["spec"] and after["metadata"].get("labels") == before["metadata"].get("labels")
    assert "report" not in after.get("status", {}) and after["status"]["phase"] in ("Pending", "Running")

    # The run goes on and its verdict is the operator's.
    cluster.write_report("forge", report(1, busbw=371.5))
    status = cluster.wait_phase("forge", "Succeeded")
    assert status["summary"]["allReduceBusbwGBps"] == 371.5
    assert status["report"]["headline"]["allReduceBusbwGBps"] == 371.5  # copied by the operator with its verdict


def verdict_on(cluster: Cluster, name: str, nodes: int, written: dict[str, Any]) -> tuple[dict, dict]:
    """Create a test of `nodes` nodes, deliver `written` as its report; its Failed status and Succeeded condition."""
    cluster.create_test(name, {"nodes": nodes})
    cluster.wait_phase(name, "Pending")
    cluster.write_report(name, written)
    return cluster.wait_phase(name, "Failed"), cluster.condition(name, "Succeeded")


def test_a_cpu_smoke_report_fails_naming_why(cluster: Cluster):
    _, succeeded = verdict_on(cluster, "smoke", 1, {**report(1), "mode": "cpu-smoke"})
    assert succeeded["reason"] == "ReportRejected"
    assert "cpu-smoke report" in succeeded["message"]


def test_a_report_for_the_wrong_node_count_fails_naming_why(cluster: Cluster):
    _, succeeded = verdict_on(cluster, "wide", 64, report(1, nodes=("node-a",)))
    assert succeeded["reason"] == "ReportRejected"
    assert "spec.nodes is 64" in succeeded["message"]


def test_a_passing_claim_below_its_threshold_fails(cluster: Cluster):
    written = report(1)
    busbw = next(r for r in written["results"] if r["name"] == "all_reduce_busbw")
    busbw.update(value=1.0, threshold=0.5, passed=True)
    status, succeeded = verdict_on(cluster, "claim", 1, written)
    assert succeeded["reason"] == "ChecksFailed"
    assert "nccl/all_reduce_busbw: 1 < 340 GB/s" in succeeded["message"]
    assert status["summary"]["failed"] == 1


def test_a_report_of_another_generation_is_ignored_saying_why(cluster: Cluster):
    cluster.create_test("stale", {"nodes": 1})
    cluster.wait_phase("stale", "Pending")
    cluster.write_report("stale", report(5))
    cluster.wait(lambda: (c := cluster.condition("stale", "Running")) and "generation 5, not 1"
                 in c["message"] and c, "the ignored report to be explained")
    assert cluster.status("stale")["phase"] in ("Pending", "Running")
