"""Restarts, spec changes and deletion: never two jobs for one run, never a finished run re-run, nothing left behind."""

from __future__ import annotations

import json

from acceptance_operator.building import manifests
from acceptance_operator.building.backends import build_children
from acceptance_operator.handlers import parse_test

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, OperatorProcess, report

LABELS = {"gpu-acceptance.io/test": "run", "gpu-acceptance.io/generation": "1"}


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


def test_a_run_an_earlier_operator_version_started_is_judged_from_status_report(
        cluster: Cluster, operator: OperatorProcess):
    """Upgrade path (one release): a job without the delivery label is an earlier version's, whose workload patches
    status.report; the new operator judges that report and says so in its log. On this version's jobs, a report in
    status.report (only an admin could write it) decides nothing."""
    cluster.create_test("old", {"nodes": 1})
    cluster.create_test("new", {"nodes": 1})
    cluster.wait_job("PyTorchJob", "old-g1")
    cluster.wait_phase("old", "Pending")
    cluster.wait_phase("new", "Pending")
    operator.kill()
    cluster.server.request("PATCH", cluster.job_path("PyTorchJob", "old-g1"), {"metadata": {"labels": {
        manifests.LABEL_DELIVERY: None}}}, content_type="application/merge-patch+json")
    operator.start()
    cluster.place_pods("old", 1, ["node-a"])
    cluster.write_legacy_report("old", {**report(1, busbw=366.0), "run": "g1"})
    status = cluster.wait_phase("old", "Succeeded")
    assert status["summary"]["allReduceBusbwGBps"] == 366.0
    assert "started by an earlier operator version" in operator.log_tail(200)
    cluster.place_pods("new", 1, ["node-a"])
    cluster.write_legacy_report("new", {**report(1, busbw=366.0), "run": "g1"})
    cluster.create_test("witness", {})
    cluster.wait_phase("witness", "Pending")  # the operator has looked at everything since
    assert cluster.status("new")["phase"] in ("Pending", "Running")
