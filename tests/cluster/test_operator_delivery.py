"""A run whose pods ended without a delivered report, and whose rank 0 said why in its termination message, ends
ReportNotDelivered: the pod's error, and its own summary marked unverified, never a pass (issue 35)."""

from __future__ import annotations

from acceptance_workload.checks.report_model import Report
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.delivery import not_delivered

from tests.cluster.operator_harness import Cluster

LABELS = {"gpu-acceptance.io/test": "cut-off", "gpu-acceptance.io/generation": "1"}


def terminated(code: int, message: str = "") -> dict:
    state = {"exitCode": code, "reason": "Error", "startedAt": "2025-01-01T00:00:00Z",
             "finishedAt": "2025-01-01T00:01:00Z"}
    if message:
        state["message"] = message
    return {"phase": "Failed", "containerStatuses": [{
        "name": "pytorch", "image": "ghcr.io/gpu-acceptance/workload:test", "imageID": "", "ready": False,
        "restartCount": 0, "state": {"terminated": state}}]}


def test_a_finished_job_whose_pod_could_not_deliver_ends_report_not_delivered_with_its_unverified_summary(
        cluster: Cluster):
    cluster.create_test("cut-off", {"nodes": 2})
    cluster.wait_job("PyTorchJob", "cut-off-g1")
    said = Report(generation=1, checks_run=["preflight"], results=[
        CheckResult(check="preflight", name="gpu_count", value=8, threshold=8, comparison="ge", passed=True)])
    message = not_delivered("could not write evidence ConfigMap cut-off-evidence-0 of acceptancetests/cut-off "
                            "within 120s (14 attempts); last error: MaxRetryError: Connection refused",
                            "https://10.96.0.1:443", said.finalize())
    cluster.create_pod("cut-off-g1-master-0", LABELS, node="gpu-node-1")
    cluster.set_pod_status("cut-off-g1-master-0", terminated(2, message))
    cluster.create_pod("cut-off-g1-worker-0", LABELS, node="gpu-node-2")
    cluster.set_pod_status("cut-off-g1-worker-0", terminated(2))
    cluster.set_job_condition("PyTorchJob", "cut-off-g1", "Failed", message="1 Master replica(s) failed.")
    status = cluster.wait_phase("cut-off", "Failed")
    succeeded = cluster.condition("cut-off", "Succeeded")
    assert (succeeded["status"], succeeded["reason"]) == ("False", "ReportNotDelivered"), succeeded
    text = succeeded["message"]
    assert text.startswith("the run's report was not delivered: pod cut-off-g1-master-0 on node gpu-node-1, "
                           "container pytorch: could not write evidence ConfigMap cut-off-evidence-0"), text
    assert "(API server https://10.96.0.1:443)" in text
    assert text.endswith("UNVERIFIED (the operator has no report to judge, and never passes a run on it): "
                         "PASSED: 1/1 checks passed"), text
    # Nothing of the pod's word is taken: no report, no numbers, nobody blamed.
    assert status["summary"]["result"] == "Failed" and status["summary"]["failedNodes"] == []
    assert not status.get("report")
    assert cluster.wait_event("cut-off", "ReportNotDelivered")[0] == "Warning"
