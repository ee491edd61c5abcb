"""Restarts, spec changes and deletion: never two jobs for one run, never a finished run re-run, nothing left behind."""

from __future__ import annotations

import json

from acceptance_operator import ownership
from acceptance_operator.backends import build_children
from acceptance_operator.handlers import parse_test

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, OperatorProcess, now_ts, report

LABELS = {"gpu-acceptance.io/test": "run", "gpu-acceptance.io/generation": "1"}
RECORD = ownership.RECORD_ANNOTATION


def test_restart_mid_run_follows_the_same_job(cluster: Cluster, operator: OperatorProcess):
    cluster.create_test("run", {"nodes": 1})
    started = cluster.wait_phase("run", "Pending")
    cluster.wait_job("PyTorchJob", "run-g1")
    operator.kill()
    # While the operator is down the run goes on.
    cluster.set_job_condition("PyTorchJob", "run-g1", "Running")
    cluster.create_pod("run-g1-master-0", LABELS, node="node-a")
    cluster.set_pod_status("run-g1-master-0", {"phase": "Running"})
    operator.start()
    status = cluster.wait_phase("run", "Running")
    assert status["startTime"] == started["startTime"]
    assert cluster.job_names("PyTorchJob") == ["run-g1"]
    cluster.write_report("run", report(1))
    cluster.wait_phase("run", "Succeeded")
    assert cluster.job_names("PyTorchJob") == ["run-g1"]
    assert [r for _, r, _ in cluster.events("run")].count("RunStarted") == 1


def test_existing_job_is_adopted_not_duplicated(cluster: Cluster, operator: OperatorProcess):
    """A crash between creating the job and recording it: the next operator finds the job and adopts it."""
    operator.kill()
    created = cluster.create_test("run", {})
    test = parse_test(created)  # as the operator reads it
    for child in build_children(test):
        kind = child["kind"]
        if kind == "PyTorchJob":
            cluster.server.request("POST", cluster.job_path(kind), child)
        elif kind == "ServiceAccount":
            cluster.server.request("POST", f"/api/v1/namespaces/{cluster.ns}/serviceaccounts", child)
    operator.start()
    status = cluster.wait_phase("run", "Pending")
    assert status["job"]["name"] == "run-g1"
    assert cluster.job_names("PyTorchJob") == ["run-g1"]
    event = cluster.wait_event("run", "RunStarted")
    assert "PyTorchJob run-g1 adopted" in event[2]
    assert cluster.exists(cluster.role_path("run-workload"))  # the missing children were created


def test_spec_change_stops_the_old_run_and_starts_a_new_one(cluster: Cluster):
    cluster.create_test("run", {"nodes": 1})
    cluster.wait_job("PyTorchJob", "run-g1")
    cluster.set_job_condition("PyTorchJob", "run-g1", "Running")
    cluster.patch_spec("run", {"nodes": 2})
    status = cluster.wait_phase("run", "Pending")
    assert status["observedGeneration"] == 2
    assert status["job"]["name"] == "run-g2"
    cluster.wait(lambda: cluster.job_names("PyTorchJob") == ["run-g2"], "the generation-1 job to be replaced")
    job = cluster.job("PyTorchJob", "run-g2")
    assert job["metadata"]["labels"]["gpu-acceptance.io/generation"] == "2"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    started = cluster.wait(
        lambda: [m for _, r, m in cluster.events("run") if r == "RunStarted" and "generation 2" in m],
        "the generation-2 RunStarted event")
    assert "stopped the previous run (PyTorchJob run-g1)" in started[0]

    # A report of the old run does not decide the new one.
    cluster.write_report("run", report(1))
    cluster.write_report("run", report(2, nodes=("node-a", "node-b")))
    status = cluster.wait_phase("run", "Succeeded")
    assert status["observedGeneration"] == 2
    for condition in status["conditions"]:
        assert condition["observedGeneration"] == 2

    # Changing a finished test runs it again.
    cluster.patch_spec("run", {"nodes": 1})
    assert cluster.wait_phase("run", "Pending")["job"]["name"] == "run-g3"
    cluster.wait(lambda: cluster.job_names("PyTorchJob") == ["run-g3"], "the generation-3 job")


def test_finished_run_is_not_rerun_after_restart(cluster: Cluster, operator: OperatorProcess):
    cluster.create_test("run", {})
    cluster.wait_job("PyTorchJob", "run-g1")
    cluster.write_report("run", report(1))
    finished = cluster.wait_phase("run", "Succeeded")
    operator.kill()
    # As ttlSecondsAfterFinished would: the finished job is gone. A naive operator would recreate it.
    cluster.server.request("DELETE", cluster.job_path("PyTorchJob", "run-g1"))
    operator.start()
    # Witnesses that the restarted operator has looked: it re-exports the finished test's phase,
    # and it runs a test created after the restart.
    cluster.wait(
        lambda: operator.sample("gpu_acceptance_test_phase", namespace=cluster.ns, name="run", phase="Succeeded") == 1,
        "the resumed test's metrics")
    cluster.create_test("witness", {})
    cluster.wait_job("PyTorchJob", "witness-g1")
    assert cluster.job_names("PyTorchJob") == ["witness-g1"]
    after = cluster.status("run")
    assert {k: after.get(k) for k in finished} == finished
    assert [r for _, r, _ in cluster.events("run")].count("RunStarted") == 1


def test_deleting_the_test_removes_its_children(cluster: Cluster, operator: OperatorProcess):
    cluster.create_test("run", {"backend": "MPIJob", "nodes": 2})
    cluster.wait_job("MPIJob", "run-g1")
    assert cluster.exists(cluster.service_account_path("run-workload"))
    binding = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{cluster.ns}/rolebindings/run-workload"
    assert cluster.exists(binding)
    cluster.wait(
        lambda: operator.sample("gpu_acceptance_test_phase", namespace=cluster.ns, name="run", phase="Pending") == 1,
        "the test's metrics")
    cluster.delete_test("run")
    cluster.wait(lambda: cluster.get_test("run") is None, "the test to be deleted (no finalizer holds it)")
    # The operator deletes what the test owned once it has gone (no garbage collector runs beside this API server)
    cluster.wait(lambda: cluster.jobs("MPIJob") == [] and not cluster.exists(binding) and not any(
        cluster.exists(p("run-workload")) for p in (cluster.service_account_path, cluster.role_path)),
        "its job, ServiceAccount, Role and RoleBinding to be deleted")
    assert not [key for key in operator.samples() if ("name", "run") in key[1]]


def test_a_test_created_again_under_its_name_keeps_its_own_children(cluster: Cluster, operator: OperatorProcess):
    """Deleted and created again at once (kubectl replace --force, a GitOps re-sync): the old test's cleanup
    deletes only what the old uid owns, never the new test's job or RBAC of the same names."""
    old_uid = cluster.create_test("again", {})["metadata"]["uid"]
    cluster.wait_job("PyTorchJob", "again-g1")
    operator.kill()  # the deletion and the new test are seen together when it is back
    cluster.delete_test("again")
    cluster.wait(lambda: cluster.get_test("again") is None, "the test to be deleted (no finalizer holds it)")
    new_uid = cluster.create_test("again", {})["metadata"]["uid"]
    operator.start()
    job = cluster.wait(lambda: (j := cluster.job("PyTorchJob", "again-g1")) and
                       j["metadata"]["ownerReferences"][0]["uid"] == new_uid and j, "the new test's job")
    assert cluster.wait_phase("again", "Pending")["job"]["name"] == "again-g1"
    assert job["metadata"]["ownerReferences"][0]["uid"] != old_uid
    assert cluster.exists(cluster.service_account_path("again-workload"))
    assert cluster.exists(cluster.role_path("again-workload"))


def test_the_finalizer_of_earlier_versions_is_removed(cluster: Cluster, operator: OperatorProcess):
    """Tests created by an operator that kept a finalizer can still be deleted after the upgrade."""
    body = {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
            "metadata": {"name": "legacy", "finalizers": ["gpu-acceptance.io/finalizer"]}, "spec": {}}
    cluster.server.request("POST", cluster.test_path(), body)
    cluster.wait(lambda: not (cluster.get_test("legacy") or {}).get("metadata", {}).get("finalizers"),
                 "the old finalizer to be removed")
    cluster.wait_job("PyTorchJob", "legacy-g1")
    cluster.delete_test("legacy")
    cluster.wait(lambda: cluster.get_test("legacy") is None, "the test to be deleted")
    cluster.wait(lambda: cluster.jobs("PyTorchJob") == [], "its job to be deleted")


def test_json_logs(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator):
    """--json-logs: one JSON object per line, our messages among them with the object they are about."""
    operator = start_operator(acceptance_crd.kubeconfig, [namespace], args=("--json-logs",))
    cluster = Cluster(acceptance_crd, namespace, operator.log_tail)
    cluster.create_test("run", {})
    cluster.wait_job("PyTorchJob", "run-g1")
    cluster.wait_phase("run", "Pending")

    def records() -> list[dict]:
        lines = [line for line in operator.log_path.read_text().splitlines() if line.strip()]
        return [json.loads(line) for line in lines]  # fails on any line that is not JSON

    started = cluster.wait(lambda: [r for r in records() if "PyTorchJob run-g1 created" in r.get("message", "")],
                        "the run-started log record")
    assert started[0]["severity"] == "info"
    assert started[0]["object"] == {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                                     "name": "run", "namespace": namespace,
                                     "uid": cluster.get_test("run")["metadata"]["uid"]}


def test_after_an_upgrade_new_runs_use_the_new_workload_image(acceptance_crd, namespace: str,
                                                               start_operator: StartOperator):
    """The CRD pins no image: a test without spec.image runs the image the operator is configured with at the
    time of the run, so after `helm upgrade` (a new workloadImage, a restarted operator) a new run uses the new one."""
    cluster = Cluster(acceptance_crd, namespace)
    old = start_operator(acceptance_crd.kubeconfig, [namespace], {"GPU_ACCEPTANCE_DEFAULT_IMAGE": "mirror.local/w:1"})
    cluster.operator_log = old.log_tail
    created = cluster.create_test("run", {"backend": "Job"})
    assert "image" not in created["spec"]  # nothing defaulted into the stored object
    job = cluster.wait_job("Job", "run-g1")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "mirror.local/w:1"
    old.stop()
    new = start_operator(acceptance_crd.kubeconfig, [namespace], {"GPU_ACCEPTANCE_DEFAULT_IMAGE": "mirror.local/w:2"})
    cluster.operator_log = new.log_tail
    cluster.patch_spec("run", {"nodes": 1, "timeoutSeconds": 1800})  # a new run
    job = cluster.wait_job("Job", "run-g2")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "mirror.local/w:2"


def _as_before_the_record(cluster: Cluster, name: str) -> None:
    """The test as an operator that kept no record of the status left it: the same status, no annotation."""
    cluster.server.request("PATCH", cluster.test_path(name), {"metadata": {"annotations": {RECORD: None}}},
                           content_type="application/merge-patch+json")
    assert RECORD not in (cluster.get_test(name) or {})["metadata"].get("annotations", {})


def test_upgrade_judges_a_finished_verdict_without_a_record_again_and_does_not_rerun_it(
        cluster: Cluster, operator: OperatorProcess):
    cluster.create_test("run", {})
    cluster.wait_job("PyTorchJob", "run-g1")
    cluster.write_report("run", report(1))
    finished = cluster.wait_phase("run", "Succeeded")
    operator.kill()
    _as_before_the_record(cluster, "run")
    cluster.server.request("DELETE", cluster.job_path("PyTorchJob", "run-g1"))  # its TTL has passed
    operator.start()
    event = cluster.wait_event("run", "StatusAdopted")
    assert event[0] == "Normal" and "verdict Succeeded adopted" in event[2], event
    assert "judged again from its report: confirmed (ChecksPassed" in event[2], event
    adopted = cluster.wait(lambda: ownership.record(cluster.get_test("run") or {}), "the operator's record")
    after = cluster.status("run")
    assert after["phase"] == adopted["phase"] == "Succeeded"
    assert {k: after.get(k) for k in ("startTime", "completionTime", "summary", "job", "observedGeneration")} == {
        k: finished.get(k) for k in ("startTime", "completionTime", "summary", "job", "observedGeneration")}
    message = cluster.condition("run", "Succeeded")["message"]
    assert message.endswith(ownership.REJUDGED_NOTE), message
    # Not re-run, and from now on the record decides: a foreign write is put back.
    cluster.create_test("witness", {})
    cluster.wait_job("PyTorchJob", "witness-g1")
    assert cluster.job_names("PyTorchJob") == ["witness-g1"]
    assert [r for _, r, _ in cluster.events("run")].count("RunStarted") == 1
    cluster.patch_status("run", {"phase": "Failed"})
    cluster.wait(lambda: cluster.status("run")["phase"] == "Succeeded", "the forged phase to be put back")


def _forge_before_the_upgrade(cluster: Cluster, name: str, phase: str) -> None:
    """A verdict in the status as anyone who may patch the status can write it (the workload's token among
    them), on a test from before the operator's record, whose job has ended and gone."""
    cluster.patch_status(name, {"phase": phase, "completionTime": now_ts(), "summary": {
        "result": "Passed" if phase == "Succeeded" else "Failed", "passed": 1, "total": 1, "allReduceBusbwGBps": 999},
        "conditions": [{"type": "Succeeded", "status": str(phase == "Succeeded"), "reason": "ChecksPassed",
                        "message": "forged", "lastTransitionTime": now_ts()}]})
    _as_before_the_record(cluster, name)
    cluster.server.request("DELETE", cluster.job_path("PyTorchJob", f"{name}-g1"))


def test_upgrade_judges_a_forged_verdict_again_and_fails_its_report_naming_why(
        cluster: Cluster, operator: OperatorProcess):
    """Issue 8's forgery from before the operator kept its record: a Succeeded over a report below its threshold
    (which claims to pass) does not survive the upgrade."""
    cluster.create_test("run", {})
    cluster.wait_job("PyTorchJob", "run-g1")
    cluster.wait_phase("run", "Pending")
    operator.kill()
    cluster.write_report("run", report(1, passed=False))  # all_reduce busbw 120 GB/s, "passed": true
    _forge_before_the_upgrade(cluster, "run", "Succeeded")
    operator.start()
    event = cluster.wait_event("run", "StatusAdopted")
    assert event[0] == "Warning" and "judged again from its report: now Failed (ChecksFailed" in event[2], event
    status = cluster.wait_phase("run", "Failed")
    condition = cluster.condition("run", "Succeeded")
    assert (condition["status"], condition["reason"]) == ("False", "ChecksFailed")
    assert "nccl/all_reduce_busbw: 120 <" in condition["message"], condition
    assert condition["message"].endswith(ownership.REJUDGED_NOTE)
    assert status["summary"]["result"] == "Failed" and status["summary"].get("allReduceBusbwGBps") == 120
    assert [(e["id"], e["result"]) for e in status["history"]] == [("g1", "Failed")]
    assert ownership.record(cluster.get_test("run") or {})["phase"] == "Failed"
    assert cluster.job_names("PyTorchJob") == [] and [r for _, r, _ in cluster.events("run")].count("RunStarted") == 1
    cluster.patch_status("run", {"phase": "Succeeded"})  # and from now on the record decides
    cluster.wait(lambda: cluster.status("run")["phase"] == "Failed", "the forged phase to be put back")


def test_upgrade_does_not_trust_a_succeeded_without_a_report(cluster: Cluster, operator: OperatorProcess):
    """Nothing to judge: the adopted Succeeded fails closed as ReportMissing, saying how to run the test again;
    a Failed without a report stands as written."""
    cluster.create_test("run", {})
    cluster.create_test("broken", {})
    cluster.wait_job("PyTorchJob", "run-g1")
    cluster.wait_job("PyTorchJob", "broken-g1")
    cluster.wait_phase("run", "Pending")
    cluster.wait_phase("broken", "Pending")
    operator.kill()
    _forge_before_the_upgrade(cluster, "run", "Succeeded")
    _forge_before_the_upgrade(cluster, "broken", "Failed")
    operator.start()
    event = cluster.wait_event("run", "StatusAdopted")
    assert event[0] == "Warning" and "could not be checked" in event[2] and "Failed (ReportMissing)" in event[2]
    assert "gpu-acceptance.io/rerun" in event[2], event
    cluster.wait_phase("run", "Failed")
    condition = cluster.condition("run", "Succeeded")
    assert condition["reason"] == "ReportMissing" and "could not be checked" in condition["message"]
    assert cluster.status("run")["summary"]["result"] == "Failed"
    kept = cluster.wait_event("broken", "StatusAdopted")
    assert kept[0] == "Normal" and "no report to judge again" in kept[2], kept
    assert cluster.status("broken")["phase"] == "Failed"
    assert cluster.condition("broken", "Succeeded")["message"] == f"forged {ownership.ADOPTED_NOTE}"
    assert cluster.job_names("PyTorchJob") == []


def test_upgrade_drops_a_verdict_its_job_contradicts_and_follows_the_run(cluster: Cluster, operator: OperatorProcess):
    cluster.create_test("run", {"nodes": 1})
    cluster.wait_job("PyTorchJob", "run-g1")
    cluster.set_job_condition("PyTorchJob", "run-g1", "Running")
    cluster.create_pod("run-g1-master-0", LABELS, node="node-a")
    cluster.set_pod_status("run-g1-master-0", {"phase": "Running"})
    cluster.wait_phase("run", "Running")
    operator.kill()
    # Before the upgrade, the status claims a verdict the job does not support (it still runs): written by
    # whoever could patch the status, never by the earlier operator.
    cluster.patch_status("run", {"phase": "Succeeded", "completionTime": now_ts(),
                                 "summary": {"result": "Passed", "passed": 1, "total": 1}})
    _as_before_the_record(cluster, "run")
    operator.start()
    event = cluster.wait_event("run", "StatusAdopted")
    assert "has not ended: that verdict is dropped" in event[2]
    status = cluster.wait_phase("run", "Running")
    assert status.get("summary") is None and status.get("completionTime") is None
    assert ownership.record(cluster.get_test("run") or {})["phase"] == "Running"
    assert cluster.job_names("PyTorchJob") == ["run-g1"]  # the same job followed, none created
    cluster.write_report("run", report(1))
    cluster.wait_phase("run", "Succeeded")
    assert cluster.job_names("PyTorchJob") == ["run-g1"]
