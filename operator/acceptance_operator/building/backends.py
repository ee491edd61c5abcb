"""The backend table: one record per kind of child job the operator can run a test as.

Everything that differs between backends lives in its record (which API and
CRD it needs, who installs that, how to build the job, how to read its status,
which controller moves it along), so the handlers, the API client and the
assessment ask the table instead of branching on spec.backend. A new backend
is a new record: a builder in job_builders.py and, if its controller speaks a new
dialect, a reader in jobstate.py.

Pure: no API calls, no kopf or Kubernetes client imports (`gpu-acceptance render`
runs without them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acceptance_operator.building import job_builders, manifests, queueing
from acceptance_operator.building.jobstate import (
    JobState,
    batch_job_state,
    jobset_state,
    kubeflow_state,
    trainjob_state,
)
from acceptance_operator.resource.api import DEFAULT_OPERATOR_IMAGE, AcceptanceTest, Backend

KubeDict = dict[str, Any]
Builder = Callable[..., list[KubeDict]]


@dataclass(frozen=True)
class BackendSpec:
    """One backend: its job kind and API, the CRD it needs (None: built into Kubernetes), what to install,
    the controller that runs it, how to build its objects and how to read its state."""

    kind: Backend
    api_version: str  # the builder's (manifests.py): the one home of each backend's API version
    plural: str
    crd: str | None
    install: str
    controller: str
    build: Builder  # (test, init_image=...) -> the job, plus any object that goes with it (named like the job)
    read_state: Callable[[KubeDict | None], JobState]
    # Where the job says it is suspended (spec.queueName: created so, Kueue unsuspends it on admission), and the
    # name of Kueue's integration that manages it (Kueue's configuration: integrations.frameworks).
    suspend: tuple[str, ...]
    kueue_framework: str
    # Kinds the builder adds beside the job, named like it and deleted with it (the Job backend's Service, the
    # TrainJob's TrainingRuntime).
    companions: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


def _one(build: Callable[..., KubeDict]) -> Builder:
    def wrapped(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> list[KubeDict]:
        return [build(test, init_image=init_image)]

    wrapped.__doc__ = build.__doc__
    return wrapped


BACKENDS: dict[str, BackendSpec] = {b.kind: b for b in (
    BackendSpec("PyTorchJob", manifests.PYTORCHJOB_API_VERSION, "pytorchjobs", "pytorchjobs.kubeflow.org",
                "the Kubeflow training-operator (v1.7 or later)", "the Kubeflow training-operator",
                _one(job_builders.build_pytorchjob), kubeflow_state, ("spec", "runPolicy", "suspend"),
                "kubeflow.org/pytorchjob"),
    BackendSpec("MPIJob", manifests.MPIJOB_API_VERSION, "mpijobs", "mpijobs.kubeflow.org",
                "the Kubeflow mpi-operator (v0.4 or later, which serves kubeflow.org/v2beta1)",
                "the Kubeflow mpi-operator", _one(job_builders.build_mpijob), kubeflow_state,
                ("spec", "runPolicy", "suspend"), "kubeflow.org/mpijob"),
    BackendSpec("Job", manifests.BATCH_JOB_API_VERSION, "jobs", None,
                "nothing: Job is built into Kubernetes (1.27 or later)",
                "kube-controller-manager's Job controller", job_builders.build_indexed_job, batch_job_state,
                ("spec", "suspend"), "batch/job", companions=("Service",)),
    BackendSpec("JobSet", manifests.JOBSET_API_VERSION, "jobsets", "jobsets.jobset.x-k8s.io",
                "the JobSet controller (sigs.k8s.io/jobset v0.5 or later)", "the JobSet controller",
                job_builders.build_jobset, jobset_state, ("spec", "suspend"), "jobset.x-k8s.io/jobset"),
    BackendSpec("TrainJob", manifests.TRAINER_API_VERSION, "trainjobs", "trainjobs.trainer.kubeflow.org",
                "Kubeflow Trainer v2 (v2.3 or later, with JobSet)", "the Kubeflow Trainer controller manager",
                job_builders.build_trainjob, trainjob_state, ("spec", "suspend"), "trainer.kubeflow.org/trainjob",
                companions=(job_builders.TRAINING_RUNTIME_KIND,)),
)}

# Companions that are custom resources (the Service is core): (group, version, plural) of each, for the API client.
CUSTOM_COMPANIONS: dict[str, tuple[str, str, str]] = {
    job_builders.TRAINING_RUNTIME_KIND: (*manifests.TRAINER_API_VERSION.split("/"), "trainingruntimes"),
}


def backend_of(kind: str) -> BackendSpec:
    """The record for a job kind; KeyError for a kind the operator does not run."""
    return BACKENDS[kind]


def job_state(job: KubeDict | None) -> JobState:
    """The job's state read by its backend's reader (by the job's kind; Kubeflow's when unknown)."""
    spec = BACKENDS.get((job or {}).get("kind", ""))
    return (spec.read_state if spec else kubeflow_state)(job)


def controller_of(kind: str) -> str:
    spec = BACKENDS.get(kind)
    return spec.controller if spec else f"the controller for {kind}"


def _run_objects(test: AcceptanceTest, init_image: str) -> list[KubeDict]:
    """What the backend's builder makes for the run, the job last: with spec.queueName, queued for Kueue."""
    backend = BACKENDS[test.spec.backend]
    objects = backend.build(test, init_image=init_image)
    queueing.enqueue(objects[-1], test.spec.queue_name, backend.suspend)
    return objects


def build_job(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> KubeDict:
    """The run's job for spec.backend alone (builders put it last, after what goes with it)."""
    return _run_objects(test, init_image)[-1]


def build_children(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> list[KubeDict]:
    """Everything to create for one run, in creation order: RBAC first, so the pods start with their identity;
    the job last, after what it needs (the Job backend's Service). `init_image` runs the ulimit init container."""
    run = _run_objects(test, init_image)
    return [*manifests.build_rbac(test), *manifests.build_evidence(test), *run]
