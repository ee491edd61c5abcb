"""The workload reports, the operator decides: against the real API server and the operator process.

The workload's own token (the per-test ServiceAccount the operator created) can
patch the status subresource; what it writes into phase, conditions or summary
is put back within one reconcile, and the run goes on to a verdict the operator
draws itself. Reports that do not describe the run, or whose results claim a
pass their values do not earn, end Failed naming why.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from acceptance_workload.status import custom_objects_api

from tests.cluster.operator_harness import MERGE, Cluster, report

FORGED = {"phase": "Succeeded", "summary": {"result": "Passed", "allReduceBusbwGBps": 999},
          "conditions": [{"type": "Succeeded", "status": "True", "reason": "ChecksPassed", "message": "trust me",
                          "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
          "observedGeneration": 1}


def workload_api(cluster: Cluster, name: str, tmp_path: Path) -> Any:
    """A client with the token of the test's workload ServiceAccount, as rank 0 has in its pod."""
    token = cluster.server.token_for_service_account(cluster.ns, f"{name}-workload", create=False)
    return custom_objects_api(str(cluster.server.kubeconfig_for_token(token, tmp_path / f"{name}.kubeconfig")))


def forge(api: Any, cluster: Cluster, name: str) -> dict[str, Any]:
    """The forged write with the workload's token; the API server's answer (the object as written)."""
    return api.patch_namespaced_custom_object_status("gpu-acceptance.io", "v1alpha1", cluster.ns, "acceptancetests",
                                                     name, {"status": FORGED}, _content_type=MERGE)


def test_what_the_workload_writes_into_phase_summary_or_conditions_does_not_stand(cluster: Cluster, tmp_path: Path):
    cluster.create_test("forge", {"nodes": 1})
    cluster.wait_phase("forge", "Pending")
    api = workload_api(cluster, "forge", tmp_path)

    def put_back() -> dict[str, Any] | None:
        status = cluster.status("forge")
        ok = status.get("phase") == "Pending" and "summary" not in status and all(
            c.get("message") != "trust me" for c in status.get("conditions", []))
        return status if ok else None

    # A forgery that lands while the operator is writing its own status of the new run is simply overwritten
    # by that write (no event); one that lands on a settled run is put back and reported. Either way it must
    # not stand, every time; the event must come at the latest once the run has settled.
    event = None
    for _ in range(3):
        # The API server took it (its answer; a read after it may already see the operator's put-back)...
        assert forge(api, cluster, "forge")["status"]["phase"] == "Succeeded"
        cluster.wait(put_back, "the operator to put its status back", timeout=10)  # ...the operator did not
        event = next((e for e in cluster.events("forge") if e[1] == "ForeignStatusWrite"), None)
        if event is None:
            with contextlib.suppress(AssertionError):
                event = cluster.wait_event("forge", "ForeignStatusWrite", timeout=10)
        if event is not None:
            break
    assert event is not None and event[0] == "Warning"

    # The run goes on and its verdict is the operator's.
    cluster.write_report("forge", report(1, busbw=371.5))
    status = cluster.wait_phase("forge", "Succeeded")
    assert status["summary"]["allReduceBusbwGBps"] == 371.5


def test_a_finished_verdict_is_put_back_too(cluster: Cluster):
    cluster.create_test("done", {"nodes": 1})
    cluster.wait_phase("done", "Pending")
    cluster.write_report("done", report(1, passed=False))
    failed = cluster.wait_phase("done", "Failed")
    cluster.patch_status("done", FORGED)  # as anyone allowed to patch the status
    status = cluster.wait(lambda: (s := cluster.status("done")).get("phase") == "Failed" and s, "the verdict back",
                          timeout=10)
    assert status["summary"] == failed["summary"] and status["conditions"] == failed["conditions"]


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
