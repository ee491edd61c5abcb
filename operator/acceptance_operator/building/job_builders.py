"""The job of each backend, built as plain dicts: PyTorchJob (torchrun on every node), MPIJob (mpirun from a
launcher, sshd on the GPU workers), an Indexed Job with a headless Service, or a JobSet (both torchrun with a
static rendezvous), or a Kubeflow Trainer v2 TrainJob with its own TrainingRuntime. backends.py's table says which
a test uses; the pod template and names are manifests.py's.
"""

from __future__ import annotations

import copy
from typing import Any

from acceptance_operator.building.manifests import (
    BATCH_JOB_API_VERSION,
    HOST_NETWORK_SSHD_PORT,
    JOBSET_API_VERSION,
    LABEL_GENERATION,
    LABEL_ROLE,
    LABEL_TEST,
    LAUNCHER_RESOURCES,
    MPI_LAUNCHER_CONTAINER,
    MPI_MASTER_PORT,
    MPI_SSH_AUTH_MOUNT_PATH,
    MPI_WORKER_CONTAINER,
    MPIJOB_API_VERSION,
    POD_ENV_FILE,
    POD_SPECIFIC_ENV,
    PYTORCH_CONTAINER,
    PYTORCH_PORT,
    PYTORCH_PORT_NAME,
    PYTORCHJOB_API_VERSION,
    ROLE_GPU,
    ROLE_LAUNCHER,
    RUN_DIR,
    RUN_VOLUME,
    TRAINER_API_VERSION,
    _downward_env,
    _env_list,
    _gpu_container,
    _metadata,
    _pod_spec,
    _run_policy,
    _template,
    job_labels,
    job_name,
    test_labels,
    workload_env,
    workload_image,
)
from acceptance_operator.resource.api import (
    DEFAULT_OPERATOR_IMAGE,
    AcceptanceTest,
)
from acceptance_operator.workload import GUARD_MODULE, LAUNCHER_FLAG

# --------------------------------------------------------------------------- PyTorchJob


def torchrun_command(test: AcceptanceTest) -> list[str]:
    """torchrun takes nnodes, nproc-per-node, node rank and master from the training-operator's PET_* env.

    One node (every sweep run) needs no rendezvous between pods: `--standalone` keeps it inside the pod
    (localhost), so a single-node run depends on no Service DNS name (a cluster without DNS, hostNetwork pods).
    Each rank runs under its guard (acceptance_workload.guard), which tells rank 0 at once how a rank died:
    torchrun would only stop the others.
    """
    standalone = ["--standalone"] if test.spec.nodes == 1 else []
    return ["torchrun", *standalone, f"--rdzv-conf=timeout={test.spec.timeout_seconds}", "--max-restarts=0",
            "-m", GUARD_MODULE]


def pod_command(test: AcceptanceTest) -> list[str]:
    """The container's command: torchrun_command under the guard's `--launcher`, so the container's exit code is
    the workload's own (0 passed, 1 failed, 2 could not answer; acceptance_workload.guard), not torchrun's 1 for
    any failed rank."""
    return ["python", "-m", GUARD_MODULE, LAUNCHER_FLAG, *torchrun_command(test)]


def build_pytorchjob(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> dict[str, Any]:
    """kubeflow.org/v1 PyTorchJob: a Master and nodes-1 Workers, each one pod of gpusPerNode processes."""
    spec = test.spec

    def replica(count: int) -> dict[str, Any]:
        container = _gpu_container(
            test, PYTORCH_CONTAINER, pod_command(test), [*_env_list(workload_env(test)), *_downward_env()]
        )
        container["ports"] = [{"name": PYTORCH_PORT_NAME, "containerPort": PYTORCH_PORT, "protocol": "TCP"}]
        return {"replicas": count, "restartPolicy": "Never",
                "template": _template(test, ROLE_GPU, _pod_spec(test, [container], gpu=True, init_image=init_image))}

    replicas = {"Master": replica(1)}
    if spec.nodes > 1:
        replicas["Worker"] = replica(spec.nodes - 1)
    return {
        "apiVersion": PYTORCHJOB_API_VERSION,
        "kind": "PyTorchJob",
        "metadata": _metadata(test, job_name(test), job_labels(test)),
        "spec": {
            "nprocPerNode": str(spec.gpus_per_node),
            "runPolicy": _run_policy(test),
            "pytorchReplicaSpecs": replicas,
        },
    }


# --------------------------------------------------------------------------- MPIJob


def mpi_master_addr(test: AcceptanceTest) -> str:
    """worker-0's DNS name under mpi-operator's headless Service (named like the job); rank 0 runs there."""
    name = job_name(test)
    return f"{name}-worker-0.{name}.{test.metadata.namespace}.svc"


def mpi_exported_env(test: AcceptanceTest) -> list[str]:
    """Launcher variables mpirun forwards (-x) to every rank: ranks started by sshd inherit nothing else.

    KUBERNETES_SERVICE_* let rank 0 find the API server with its in-cluster
    config; PATH and LD_LIBRARY_PATH are the image's (the launcher runs the same image).
    """
    names = ["PATH", "LD_LIBRARY_PATH", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
             "MASTER_ADDR", "MASTER_PORT", *workload_env(test)]
    return list(dict.fromkeys(names))


def mpirun_command(test: AcceptanceTest) -> list[str]:
    """mpirun over nodes x gpusPerNode slots, gpusPerNode ranks per worker, each sourcing its pod's env first and
    running under its guard (acceptance_workload.guard: rank 0 learns at once how a rank died)."""
    spec = test.spec
    cmd = ["mpirun", "--allow-run-as-root", "--tag-output",
           "-np", str(spec.nodes * spec.gpus_per_node),
           "--map-by", f"ppr:{spec.gpus_per_node}:node", "--bind-to", "none"]
    if spec.pod.host_network:
        cmd += ["--mca", "plm_rsh_args", f"-p {HOST_NETWORK_SSHD_PORT} -o ConnectionAttempts=10"]
    for name in mpi_exported_env(test):
        cmd += ["-x", name]
    cmd += ["sh", "-c", f". {POD_ENV_FILE} && exec python -m {GUARD_MODULE}"]
    return cmd


def _mpi_worker_command(test: AcceptanceTest) -> list[str]:
    """Write the pod's own NODE_NAME/POD_NAME/POD_NAMESPACE for the ranks, then run sshd as mpi-operator expects."""
    values = " ".join(f'"{n}=${n}"' for n in POD_SPECIFIC_ENV)
    sshd = "/usr/sbin/sshd -De"
    if test.spec.pod.host_network:
        sshd += f" -p {HOST_NETWORK_SSHD_PORT}"
    return ["sh", "-c", f"printf 'export %s\\n' {values} > {POD_ENV_FILE} && exec {sshd}"]


def build_mpijob(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> dict[str, Any]:
    """kubeflow.org/v2beta1 MPIJob: a GPU-less launcher running mpirun, one GPU worker per node running sshd."""
    spec = test.spec
    run_volume = {"name": RUN_VOLUME, "emptyDir": {}}
    run_mount = {"name": RUN_VOLUME, "mountPath": RUN_DIR}
    worker = _gpu_container(
        test, MPI_WORKER_CONTAINER, _mpi_worker_command(test),
        [*_env_list(workload_env(test)), *_downward_env()], extra_mounts=[run_mount],
    )
    launcher = {
        "name": MPI_LAUNCHER_CONTAINER,
        "image": workload_image(test),
        "command": mpirun_command(test),
        "env": [*_env_list({"MASTER_ADDR": mpi_master_addr(test), "MASTER_PORT": str(MPI_MASTER_PORT)}),
                *_env_list(workload_env(test))],
        "resources": copy.deepcopy(LAUNCHER_RESOURCES),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "apiVersion": MPIJOB_API_VERSION,
        "kind": "MPIJob",
        "metadata": _metadata(test, job_name(test), job_labels(test)),
        "spec": {
            "slotsPerWorker": spec.gpus_per_node,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": MPI_SSH_AUTH_MOUNT_PATH,
            "runPolicy": _run_policy(test),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": _template(test, ROLE_LAUNCHER, _pod_spec(test, [launcher], gpu=False,
                                                                               init_image=init_image))},
                "Worker": {"replicas": spec.nodes, "restartPolicy": "Never",
                           "template": _template(test, ROLE_GPU, _pod_spec(test, [worker], gpu=True,
                                                                         init_image=init_image,
                                                                         extra_volumes=[run_volume]))},
            },
        },
    }


# --------------------------------------------------------------------------- Job (Indexed) and JobSet

STATIC_MASTER_PORT = 29500
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"  # the Job controller writes each pod's index here
# The container's name in the Job and JobSet backends (no controller looks for a particular one).
WORKLOAD_CONTAINER = "workload"
JOBSET_REPLICATED_JOB = "node"  # one replicated Job of `nodes` indexed pods: pod hostnames <name>-node-0-<index>


def _static_rendezvous_env(test: AcceptanceTest, master_addr: str) -> list[dict[str, Any]]:
    """torchrun's arguments as its PET_* variables: the node rank is the pod's completion index.

    The same torchrun_command as the PyTorchJob's (where the training-operator
    sets these); with PET_MASTER_ADDR set, torchrun's default rendezvous is the
    static one: rank 0's node (index 0) hosts the store, no etcd, no controller.
    """
    spec = test.spec
    index = {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}}
    return [*_env_list({"PET_NNODES": str(spec.nodes), "PET_NPROC_PER_NODE": str(spec.gpus_per_node),
                        "PET_MASTER_ADDR": master_addr, "PET_MASTER_PORT": str(STATIC_MASTER_PORT)}), index]


def _pod_failure_policy(container: str = WORKLOAD_CONTAINER) -> dict[str, Any]:
    """Fail the Job at the first failed pod, and say why in its Failed condition.

    With backoffLimit 0 any failure ends the Job anyway; these rules make the
    condition's message name the pod and the exit code (or the disruption: a
    node lost, a pod evicted), which is what is left once the pods are gone.
    """
    return {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": container, "operator": "NotIn",
                                              "values": [0]}},
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]}


def _indexed_job_spec(test: AcceptanceTest, master_addr: str, subdomain: str, init_image: str) -> dict[str, Any]:
    """An Indexed Job of one GPU pod per node (completions = parallelism = nodes), no retries, the run's deadline,
    torchrun's static rendezvous at `master_addr`."""
    job = _indexed_gpu_job(test, WORKLOAD_CONTAINER, _static_rendezvous_env(test, master_addr), init_image)
    container = job["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "rendezvous", "containerPort": STATIC_MASTER_PORT, "protocol": "TCP"}]
    job["template"]["spec"]["subdomain"] = subdomain
    job["activeDeadlineSeconds"] = test.spec.timeout_seconds
    return job


def _indexed_gpu_job(test: AcceptanceTest, container_name: str, rendezvous_env: list[dict[str, Any]],
                     init_image: str) -> dict[str, Any]:
    """The Indexed Job spec every torchrun backend without a training-operator shares: one GPU pod per node
    (completions = parallelism = nodes), no retries, failed at the first failed pod."""
    spec = test.spec
    container = _gpu_container(test, container_name, pod_command(test), [
        *_env_list(workload_env(test)), *_downward_env(), *rendezvous_env])
    pod_spec = _pod_spec(test, [container], gpu=True, init_image=init_image)
    pod_spec["restartPolicy"] = "Never"
    return {
        "completionMode": "Indexed",
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        "backoffLimit": 0,
        "podFailurePolicy": _pod_failure_policy(container_name),
        "template": _template(test, ROLE_GPU, pod_spec),
    }


def job_master_addr(test: AcceptanceTest) -> str:
    """Index 0's DNS name under the headless Service: the Job controller names it <job>-0, the Service <job>."""
    name = job_name(test)
    return f"{name}-0.{name}.{test.metadata.namespace}.svc"


def build_headless_service(test: AcceptanceTest) -> dict[str, Any]:
    """The Service that gives each pod of the Indexed Job a DNS name (<job>-<index>.<job>): MASTER_ADDR's.

    publishNotReadyAddresses: the names must resolve while the pods start, before any is Ready.
    """
    labels = test_labels(test)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(test, job_name(test), labels),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_TEST: labels[LABEL_TEST], LABEL_GENERATION: labels[LABEL_GENERATION],
                         LABEL_ROLE: ROLE_GPU},
            "ports": [{"name": "rendezvous", "port": STATIC_MASTER_PORT, "targetPort": STATIC_MASTER_PORT,
                       "protocol": "TCP"}],
        },
    }


def build_indexed_job(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> list[dict[str, Any]]:
    """batch/v1 Indexed Job plus its headless Service: torchrun with a static rendezvous, nothing but Kubernetes."""
    name = job_name(test)
    job = {
        "apiVersion": BATCH_JOB_API_VERSION,
        "kind": "Job",
        "metadata": _metadata(test, name, job_labels(test)),
        "spec": {
            **_indexed_job_spec(test, job_master_addr(test), name, init_image),
            "ttlSecondsAfterFinished": test.spec.ttl_seconds_after_finished,
        },
    }
    return [build_headless_service(test), job]


def jobset_master_addr(test: AcceptanceTest) -> str:
    """Pod 0 of the JobSet's one replicated Job: <jobset>-node-0-0 under the Service the JobSet controller makes."""
    name = job_name(test)
    return f"{name}-{JOBSET_REPLICATED_JOB}-0-0.{name}.{test.metadata.namespace}.svc"


def build_jobset(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> list[dict[str, Any]]:
    """jobset.x-k8s.io/v1alpha2 JobSet: one replicated Indexed Job; the JobSet controller makes the headless
    Service (network.enableDNSHostnames) and ends the set at the first failure (failurePolicy.maxRestarts 0).

    The replicated Job's own metadata carries no test label: only the JobSet and the pods are the run's, so
    the operator's watch on batch Jobs (the Job backend) never mistakes the JobSet's Job for a run of its own.
    """
    name = job_name(test)
    return [{
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": _metadata(test, name, job_labels(test)),
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "ttlSecondsAfterFinished": test.spec.ttl_seconds_after_finished,
            "replicatedJobs": [{
                "name": JOBSET_REPLICATED_JOB,
                "replicas": 1,
                "template": {"spec": _indexed_job_spec(test, jobset_master_addr(test), name, init_image)},
            }],
        },
    }]


# --------------------------------------------------------------------------- TrainJob (Kubeflow Trainer v2)

# Trainer v2's names (pkg/constants of github.com/kubeflow/trainer/v2): the torch plugin sets torchrun's PET_*
# variables (nodes, processes, node rank, master <trainjob>-node-0-0.<trainjob>:29500) in the container named `node`
# of the replicated Job whose template carries the trainer ancestor label.
TRAINER_NODE = "node"
TRAINER_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"
TRAINING_RUNTIME_KIND = "TrainingRuntime"


def build_training_runtime(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> dict[str, Any]:
    """The run's own TrainingRuntime (namespaced, named like the TrainJob, owned by the test): the torch ML policy
    and a JobSet template whose one replicated Job holds the pods exactly as the other backends build them.

    One per run rather than a ClusterTrainingRuntime the chart installs: the pods' shape (GPUs, /dev/shm, the
    ulimit init container, network, placement, pull Secrets) is the test's, and Trainer v2.3's runtimePatches may
    not set container resources, the command or the image; a runtime of the test's own carries them all, and the
    TrainJob needs no patch. No rendezvous variables here: the torch plugin injects them (it refuses them too).
    """
    spec = test.spec
    job = _indexed_gpu_job(test, TRAINER_NODE, [], init_image)
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": TRAINING_RUNTIME_KIND,
        "metadata": _metadata(test, job_name(test), test_labels(test)),
        "spec": {
            "mlPolicy": {"numNodes": spec.nodes, "torch": {}},
            "template": {"spec": {
                "failurePolicy": {"maxRestarts": 0},
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
                "replicatedJobs": [{
                    "name": TRAINER_NODE,
                    "replicas": 1,
                    "template": {"metadata": {"labels": {TRAINER_ANCESTOR_LABEL: TRAINER_ANCESTOR}},
                                 "spec": job},
                }],
            }},
        },
    }


def build_trainjob(test: AcceptanceTest, *, init_image: str = DEFAULT_OPERATOR_IMAGE) -> list[dict[str, Any]]:
    """trainer.kubeflow.org/v1alpha1 TrainJob plus its TrainingRuntime (build_training_runtime), the runtime first.

    The TrainJob names the runtime, the node count and the processes per node (torchrun's PET_NNODES and
    PET_NPROC_PER_NODE: gpusPerNode, not the plugin's `auto`, which a cpu-smoke pod without GPUs would turn into
    its CPU count) and carries the run's deadline (Trainer fails it with Reason DeadlineExceeded, counted from
    Kueue's admission). The Trainer makes a JobSet named like the TrainJob, labelled only from the runtime's
    template metadata (none here): only the TrainJob and the pods carry the test's labels, so the operator's watch
    on JobSets (the JobSet backend) never mistakes the Trainer's JobSet for a run of its own.
    """
    spec = test.spec
    name = job_name(test)
    trainjob = {
        "apiVersion": TRAINER_API_VERSION,
        "kind": "TrainJob",
        "metadata": _metadata(test, name, job_labels(test)),
        "spec": {
            "runtimeRef": {"name": name, "apiGroup": TRAINER_API_VERSION.partition("/")[0],
                           "kind": TRAINING_RUNTIME_KIND},
            "trainer": {"numNodes": spec.nodes, "numProcPerNode": spec.gpus_per_node},
            "activeDeadlineSeconds": spec.timeout_seconds,
        },
    }
    return [build_training_runtime(test, init_image=init_image), trainjob]
