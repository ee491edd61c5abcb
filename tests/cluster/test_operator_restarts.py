"""Restarts, spec changes and deletion: never two jobs for one run, never a finished run re-run, nothing left behind."""

from __future__ import annotations

import json

import pytest
from acceptance_operator import manifests
from acceptance_operator.handlers import parse_test

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, OperatorProcess, report

LABELS = {"gpu-acceptance.io/test": "run", "gpu-acceptance.io/generation": "1"}


@pytest.fixture
def proc(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator) -> OperatorProcess:
    return start_operator(acceptance_crd.kubeconfig, [namespace])


@pytest.fixture
def view(acceptance_crd: ApiServer, namespace: str, proc: OperatorProcess) -> Cluster:
    return Cluster(acceptance_crd, namespace, proc.log_tail)


def test_restart_mid_run_follows_the_same_job(view: Cluster, proc: OperatorProcess):
    view.create_test("run", {"nodes": 1})
    started = view.wait_phase("run", "Pending")
    view.wait_job("PyTorchJob", "run-g1")
    proc.kill()
    # While the operator is down the run goes on.
    view.set_job_condition("PyTorchJob", "run-g1", "Running")
    view.create_pod("run-g1-master-0", LABELS, node="node-a")
    view.set_pod_status("run-g1-master-0", {"phase": "Running"})
    proc.start()
    status = view.wait_phase("run", "Running")
    assert status["startTime"] == started["startTime"]
    assert view.job_names("PyTorchJob") == ["run-g1"]
    view.write_report("run", report(1))
    view.wait_phase("run", "Succeeded")
    assert view.job_names("PyTorchJob") == ["run-g1"]
    assert [r for _, r, _ in view.events("run")].count("RunStarted") == 1


def test_existing_job_is_adopted_not_duplicated(view: Cluster, proc: OperatorProcess):
    """A crash between creating the job and recording it: the next operator finds the job and adopts it."""
    proc.kill()
    created = view.create_test("run", {})
    test = parse_test(created)  # as the operator reads it
    for child in manifests.build_children(test):
        kind = child["kind"]
        if kind == "PyTorchJob":
            view.server.request("POST", view.job_path(kind), child)
        elif kind == "ServiceAccount":
            view.server.request("POST", f"/api/v1/namespaces/{view.ns}/serviceaccounts", child)
    proc.start()
    status = view.wait_phase("run", "Pending")
    assert status["job"]["name"] == "run-g1"
    assert view.job_names("PyTorchJob") == ["run-g1"]
    event = view.wait_event("run", "RunStarted")
    assert "PyTorchJob run-g1 adopted" in event[2]
    assert view.exists(view.role_path("run-workload"))  # the missing children were created


def test_spec_change_stops_the_old_run_and_starts_a_new_one(view: Cluster):
    view.create_test("run", {"nodes": 1})
    view.wait_job("PyTorchJob", "run-g1")
    view.set_job_condition("PyTorchJob", "run-g1", "Running")
    view.patch_spec("run", {"nodes": 2})
    status = view.wait_phase("run", "Pending")
    assert status["observedGeneration"] == 2
    assert status["job"]["name"] == "run-g2"
    view.wait(lambda: view.job_names("PyTorchJob") == ["run-g2"], "the generation-1 job to be replaced")
    job = view.job("PyTorchJob", "run-g2")
    assert job["metadata"]["labels"]["gpu-acceptance.io/generation"] == "2"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    started = view.wait(lambda: [m for _, r, m in view.events("run") if r == "RunStarted" and "generation 2" in m],
                        "the generation-2 RunStarted event")
    assert "stopped the previous run (PyTorchJob run-g1)" in started[0]

    # A report of the old run does not decide the new one.
    view.write_report("run", report(1))
    view.write_report("run", report(2))
    status = view.wait_phase("run", "Succeeded")
    assert status["observedGeneration"] == 2
    for condition in status["conditions"]:
        assert condition["observedGeneration"] == 2

    # Changing a finished test runs it again.
    view.patch_spec("run", {"nodes": 1})
    assert view.wait_phase("run", "Pending")["job"]["name"] == "run-g3"
    view.wait(lambda: view.job_names("PyTorchJob") == ["run-g3"], "the generation-3 job")


def test_finished_run_is_not_rerun_after_restart(view: Cluster, proc: OperatorProcess):
    view.create_test("run", {})
    view.wait_job("PyTorchJob", "run-g1")
    view.write_report("run", report(1))
    finished = view.wait_phase("run", "Succeeded")
    proc.kill()
    # As ttlSecondsAfterFinished would: the finished job is gone. A naive operator would recreate it.
    view.server.request("DELETE", view.job_path("PyTorchJob", "run-g1"))
    proc.start()
    # Witnesses that the restarted operator has looked: it re-exports the finished test's phase,
    # and it runs a test created after the restart.
    view.wait(lambda: proc.sample("gpu_acceptance_test_phase", namespace=view.ns, name="run", phase="Succeeded") == 1,
              "the resumed test's metrics")
    view.create_test("witness", {})
    view.wait_job("PyTorchJob", "witness-g1")
    assert view.job_names("PyTorchJob") == ["witness-g1"]
    after = view.status("run")
    assert {k: after.get(k) for k in finished} == finished
    assert [r for _, r, _ in view.events("run")].count("RunStarted") == 1


def test_deleting_the_test_removes_its_children(view: Cluster, proc: OperatorProcess):
    view.create_test("run", {"backend": "MPIJob", "nodes": 2})
    view.wait_job("MPIJob", "run-g1")
    assert view.exists(view.service_account_path("run-workload"))
    binding = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{view.ns}/rolebindings/run-workload"
    assert view.exists(binding)
    view.wait(lambda: proc.sample("gpu_acceptance_test_phase", namespace=view.ns, name="run", phase="Pending") == 1,
              "the test's metrics")
    view.delete_test("run")
    view.wait(lambda: view.get_test("run") is None, "the test to be deleted (finalizer released)")
    assert view.jobs("MPIJob") == []
    assert not view.exists(view.service_account_path("run-workload"))
    assert not view.exists(view.role_path("run-workload"))
    assert not view.exists(binding)
    assert not [key for key in proc.samples() if ("name", "run") in key[1]]


def test_json_logs(acceptance_crd: ApiServer, namespace: str, start_operator: StartOperator):
    """--json-logs: one JSON object per line, our messages among them with the object they are about."""
    proc = start_operator(acceptance_crd.kubeconfig, [namespace], args=("--json-logs",))
    view = Cluster(acceptance_crd, namespace, proc.log_tail)
    view.create_test("run", {})
    view.wait_job("PyTorchJob", "run-g1")
    view.wait_phase("run", "Pending")

    def records() -> list[dict]:
        lines = [line for line in proc.log_path.read_text().splitlines() if line.strip()]
        return [json.loads(line) for line in lines]  # fails on any line that is not JSON

    started = view.wait(lambda: [r for r in records() if "PyTorchJob run-g1 created" in r.get("message", "")],
                        "the run-started log record")
    assert started[0]["severity"] == "info"
    assert started[0]["object"] == {"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                                     "name": "run", "namespace": namespace,
                                     "uid": view.get_test("run")["metadata"]["uid"]}
