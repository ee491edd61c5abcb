"""The TrainJob backend (Kubeflow Trainer v2): its pods are the JobSet backend's pods, the rendezvous left to the
Trainer's torch plugin; the TrainJob names its own runtime, its shape and deadline; Kueue queues it; its status reads
as every other backend's."""

from __future__ import annotations

import copy
from datetime import timedelta

from acceptance_operator.building.backends import BACKENDS, build_children, build_job, job_state
from acceptance_operator.building.job_builders import build_jobset, build_trainjob
from acceptance_operator.building.jobstate import trainjob_state
from acceptance_operator.resource import api

from tests.unit.operator_samples import T0, ts

UID = "6b3b1c4e-2f7a-4a8e-9d55-0c6f1e2d3a4b"
POD = {"labels": {"team": "infra"}, "annotations": {"k8s.v1.cni.cncf.io/networks": "ib"},
       "runtimeClassName": "nvidia", "imagePullSecrets": ["regcred"], "shmSize": "32Gi"}
PLACEMENT = {"nodeSelector": {"pool": "h100"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
             "priorityClassName": "high"}


def make(**spec) -> api.AcceptanceTest:
    return api.AcceptanceTest.model_validate({
        "apiVersion": api.API_VERSION, "kind": api.KIND,
        "metadata": {"name": "t", "namespace": "gpu", "uid": UID, "generation": 3},
        "spec": {"backend": "TrainJob", "nodes": 2, "gpusPerNode": 4, "pod": POD, "placement": PLACEMENT,
                 "network": {"fabric": "infiniband"}, **spec}})


def runtime_and_trainjob(test: api.AcceptanceTest) -> tuple[dict, dict]:
    runtime, trainjob = build_trainjob(test, init_image="registry.local/op:1")
    return runtime, trainjob


def runtime_job(runtime: dict) -> dict:
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return replicated


def test_the_trainjob_names_its_own_runtime_its_shape_and_deadline():
    runtime, trainjob = runtime_and_trainjob(make(timeoutSeconds=900))
    assert (trainjob["apiVersion"], trainjob["kind"], trainjob["metadata"]["name"]) == (
        "trainer.kubeflow.org/v1alpha1", "TrainJob", "t-g3")
    assert (runtime["apiVersion"], runtime["kind"], runtime["metadata"]["name"]) == (
        "trainer.kubeflow.org/v1alpha1", "TrainingRuntime", "t-g3")
    assert trainjob["spec"]["runtimeRef"] == {"name": "t-g3", "apiGroup": "trainer.kubeflow.org",
                                              "kind": "TrainingRuntime"}
    assert trainjob["spec"]["trainer"] == {"numNodes": 2, "numProcPerNode": 4}
    assert trainjob["spec"]["activeDeadlineSeconds"] == 900
    assert "runtimePatches" not in trainjob["spec"]  # the runtime is the test's own: nothing to patch
    # Both go with the test; the TrainJob is the run (labels, report delivery), the runtime is not watched as one.
    for obj in (runtime, trainjob):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == UID
    assert trainjob["metadata"]["labels"]["gpu-acceptance.io/report-delivery"] == "evidence"
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2, "torch": {}}


def test_the_runtime_is_created_before_the_trainjob_that_names_it():
    kinds = [c["kind"] for c in build_children(make())]
    assert kinds.index("TrainingRuntime") < kinds.index("TrainJob") == len(kinds) - 1
    assert BACKENDS["TrainJob"].companions == ("TrainingRuntime",)


def test_the_replicated_job_is_the_trainers_node_step():
    runtime, _ = runtime_and_trainjob(make())
    replicated = runtime_job(runtime)
    assert (replicated["name"], replicated["replicas"]) == ("node", 1)
    assert replicated["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    template_spec = runtime["spec"]["template"]["spec"]
    assert template_spec["failurePolicy"] == {"maxRestarts": 0}
    job = replicated["template"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"], job["backoffLimit"]) == (
        "Indexed", 2, 2, 0)
    (container,) = job["template"]["spec"]["containers"]
    assert container["name"] == "node"  # where the torch plugin puts torchrun's PET_* variables
    assert job["podFailurePolicy"]["rules"][0]["onExitCodes"]["containerName"] == "node"
    # The plugin sets the rendezvous and refuses runtimes that set it: none here.
    assert not [e for e in container["env"] if e["name"].startswith("PET_")]


def test_its_pods_are_the_jobset_backends_pods():
    """GPUs, /dev/shm, the ulimit init container, network env, the guard, placement, metadata, runtime class and
    pull Secrets: everything but the container's name and the static rendezvous the plugin replaces."""
    runtime, _ = runtime_and_trainjob(make())
    ours = copy.deepcopy(runtime_job(runtime)["template"]["spec"]["template"])
    (jobset,) = build_jobset(make(backend="JobSet"), init_image="registry.local/op:1")
    theirs = copy.deepcopy(jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    theirs["spec"].pop("subdomain")
    (container,) = theirs["spec"]["containers"]
    container["name"] = "node"
    container.pop("ports")
    container["env"] = [e for e in container["env"] if not e["name"].startswith("PET_")]
    # The config names the backend nowhere: the workload's configuration is the same.
    assert ours == theirs
    spec = ours["spec"]
    assert spec["initContainers"][0]["image"] == "registry.local/op:1"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}] and spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"pool": "h100"} and spec["tolerations"][0]["key"] == "gpu"
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert spec["containers"][0]["command"][:3] == ["python", "-m", "acceptance_workload.guard"]
    assert ours["metadata"]["annotations"] == POD["annotations"]
    assert ours["metadata"]["labels"]["team"] == "infra"


def test_a_queued_trainjob_is_created_suspended_with_kueues_label():
    job = build_job(make(queueName="gpu-queue"))
    assert job["kind"] == "TrainJob" and job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert BACKENDS["TrainJob"].kueue_framework == "trainer.kubeflow.org/trainjob"
    assert "suspend" not in build_job(make())["spec"]


def cond(kind: str, reason: str = "", message: str = "", seconds: int = 0) -> dict:
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": ts(T0 + timedelta(seconds=seconds))}


def test_trainjob_state_from_start_to_end():
    tj: dict = {"kind": "TrainJob", "status": {}}
    assert trainjob_state(tj).state is None and trainjob_state(None).state is None
    tj["status"]["conditions"] = [cond("Suspended", "Suspended", "TrainJob is suspended")]
    assert trainjob_state(tj).state == "Created"
    tj["status"] = {"jobsStatus": [{"name": "node", "active": 0, "ready": 0, "succeeded": 0, "failed": 0,
                                    "suspended": 0}]}
    assert trainjob_state(tj).state == "Created"
    tj["status"]["jobsStatus"][0]["active"] = 1
    assert trainjob_state(tj).state == "Running"
    tj["status"]["conditions"] = [cond("Failed", "FailedJobs", "jobset failed", 3)]
    failed = job_state(tj)
    assert (failed.state, failed.reason, failed.since) == ("Failed", "FailedJobs", T0 + timedelta(seconds=3))
    assert not failed.deadline_exceeded
    tj["status"]["conditions"] = [cond("Failed", "DeadlineExceeded", "TrainJob exceeded its activeDeadlineSeconds")]
    assert job_state(tj).deadline_exceeded
    tj["status"]["conditions"] = [cond("Complete", "JobsCompleted", "")]
    assert job_state(tj).state == "Succeeded"
    # A condition not True says nothing.
    tj["status"]["conditions"] = [{**cond("Complete"), "status": "False"}]
    assert job_state(tj).state == "Running"
