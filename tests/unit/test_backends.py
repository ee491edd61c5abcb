"""The backend table and the job-state readers: every backend builds what its record says, and every controller's
way of saying "running", "succeeded" or "failed" reads as one state."""

from __future__ import annotations

import typing
from datetime import timedelta

import pytest
from acceptance_operator.building.backends import BACKENDS, build_children, build_job, controller_of, job_state
from acceptance_operator.building.jobstate import batch_job_state, jobset_state
from acceptance_operator.judging.diagnosis import progress
from acceptance_operator.plumbing.settings import CHILD_RESOURCES
from acceptance_operator.resource import api

from tests.unit.operator_samples import T0, ts


def make(backend: str) -> api.AcceptanceTest:
    return api.AcceptanceTest.model_validate({
        "apiVersion": api.API_VERSION, "kind": api.KIND,
        "metadata": {"name": "t", "namespace": "gpu", "uid": "u", "generation": 2},
        "spec": {"backend": backend, "nodes": 2}})


def test_the_table_is_the_api_enum():
    """spec.backend accepts exactly the kinds the table can run (the CRD enum is generated from the same Literal)."""
    assert set(BACKENDS) == set(typing.get_args(api.Backend))


@pytest.mark.parametrize("kind", sorted(BACKENDS))
def test_each_record_builds_its_own_kind_and_api_version(kind: str):
    record = BACKENDS[kind]
    job = build_job(make(kind))
    assert (job["kind"], job["apiVersion"], job["metadata"]["name"]) == (kind, record.api_version, "t-g2")
    assert (record.group, record.version) == tuple(record.api_version.rpartition("/")[::2])
    # What the builder adds beside the job is named like it (so deleting the job finds it) and is declared.
    beside = [c for c in build_children(make(kind)) if c["metadata"]["name"] == "t-g2" and c is not job]
    assert tuple(c["kind"] for c in beside if c["kind"] != kind) == record.companions


def test_every_backend_is_watched_by_the_test_label():
    assert {(b.group, b.version, b.plural) for b in BACKENDS.values()} <= set(CHILD_RESOURCES)


def test_only_job_needs_no_crd():
    assert [k for k, b in BACKENDS.items() if b.crd is None] == ["Job"]
    for b in BACKENDS.values():
        if b.crd:
            assert b.crd == f"{b.plural}.{b.group}" and b.install


def batch(conditions=(), **status) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t-g1"}, "status": {
        **status, "conditions": [{"type": t, "status": "True", "reason": r, "message": m,
                                  "lastTransitionTime": ts(T0)} for t, r, m in conditions]}}


def test_batch_job_state_from_start_to_end():
    assert batch_job_state(None).state is None
    assert batch_job_state({"kind": "Job", "status": {}}).state is None  # the Job controller has not seen it
    assert batch_job_state(batch(startTime=ts(T0))).state == "Created"
    assert batch_job_state(batch(startTime=ts(T0), active=2)).state == "Running"
    done = batch_job_state(batch([("Complete", "", "")], succeeded=2))
    assert (done.state, done.since, done.finished) == ("Succeeded", T0, True)
    failed = batch_job_state(batch([("Failed", "PodFailurePolicy", "Container workload for pod gpu/t-g1-1-x "
                                     "failed with exit code 3 matching FailJob rule at index 0")], active=1))
    assert (failed.state, failed.reason) == ("Failed", "PodFailurePolicy") and "exit code 3" in failed.message
    assert not failed.deadline_exceeded
    assert batch_job_state(batch([("Failed", "DeadlineExceeded", "Job was active longer than specified "
                                   "deadline")])).deadline_exceeded
    # Kubernetes 1.31+ says FailureTarget first, while the pods terminate: already decided.
    assert batch_job_state(batch([("FailureTarget", "BackoffLimitExceeded", "")], active=1)).state == "Failed"


def test_jobset_state_from_start_to_end():
    js = {"kind": "JobSet", "status": {}}
    assert jobset_state(js).state is None
    js["status"]["replicatedJobsStatus"] = [{"name": "node", "active": 0, "ready": 0}]
    assert jobset_state(js).state == "Created"
    js["status"]["replicatedJobsStatus"] = [{"name": "node", "active": 1, "ready": 1}]
    assert jobset_state(js).state == "Running"
    js["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "FailedJobs",
                                   "message": "jobset failed due to one or more job failures",
                                   "lastTransitionTime": ts(T0 + timedelta(seconds=3))}]
    failed = jobset_state(js)
    assert (failed.state, failed.reason, failed.since) == ("Failed", "FailedJobs", T0 + timedelta(seconds=3))
    js["status"]["conditions"] = [{"type": "Completed", "status": "True", "lastTransitionTime": ts(T0)}]
    assert jobset_state(js).state == "Succeeded"


def test_job_state_reads_each_kind_with_its_own_reader():
    # "Complete" means nothing to Kubeflow's reader, everything to the Job's.
    assert job_state(batch([("Complete", "", "")])).state == "Succeeded"
    kubeflow_shaped = {**batch([("Complete", "", "")]), "kind": "PyTorchJob"}
    assert job_state(kubeflow_shaped).state is None


def test_progress_names_the_backends_controller():
    assert "is kube-controller-manager's Job controller running?" in progress({"kind": "Job", "metadata": {
        "name": "t-g1"}}, [])
    assert "is the JobSet controller running?" in progress({"kind": "JobSet", "metadata": {"name": "t-g1"}}, [])
    assert controller_of("PyTorchJob") == "the Kubeflow training-operator"
