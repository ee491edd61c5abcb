"""Every object the operator creates for an AcceptanceTest, built as plain dicts.

Pure functions from a validated AcceptanceTest to Kubernetes manifests: the
handlers create what these return, `gpu-acceptance render` prints it, and the
tests check it without a cluster. Nothing here talks to an API server.

Children of one test: a per-test ServiceAccount, a Role that lets it write only
its run's evidence ConfigMaps (rank 0 delivers the report into them; it may
not write the AcceptanceTest), a RoleBinding, the evidence ConfigMaps, and one
job per generation: a Kubeflow PyTorchJob (torchrun on every node), an MPIJob
(mpirun from a launcher, sshd on the GPU workers), an Indexed Job with a
headless Service, a JobSet (both torchrun with a static rendezvous), or a Kubeflow Trainer v2 TrainJob with
its own TrainingRuntime (torchrun, the Trainer's torch plugin setting the rendezvous). Which
builder a test uses is the backend table's business (backends.py).
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

from acceptance_operator.building.network import build_network_env
from acceptance_operator.resource import efa
from acceptance_operator.resource.api import (
    API_VERSION,
    DEFAULT_IMAGE,
    GPU_RESOURCE,
    GROUP,
    KIND,
    RESERVED_VOLUME_PREFIX,
    SHM_PATH,
    STORAGE_VOLUME,
    AcceptanceTest,
    Resources,
)
from acceptance_operator.resource.conditions import is_smoke
from acceptance_operator.resource.kubetypes import wire_list
from acceptance_operator.resource.runs import run_of
from acceptance_operator.workload import CONFIG_ENV, PodLimits, TestRef, WorkloadConfig, cpu_smoke_checks, evidence

LABEL_TEST = f"{GROUP}/test"
LABEL_GENERATION = f"{GROUP}/generation"
LABEL_RUN = f"{GROUP}/run"  # the run's id (runs.run_id): pods of one run, among the runs of one generation
# gpu: a pod holding GPUs (one per node); launcher: the MPIJob's mpirun pod.
LABEL_ROLE = f"{GROUP}/role"
# On the job: its workload delivers the report into the evidence ConfigMaps only (status part last). A job without it
# was created by an earlier operator version, whose workload patches status.report (read from there through this
# release).
LABEL_DELIVERY = f"{GROUP}/report-delivery"
DELIVERY_EVIDENCE = "evidence"
ROLE_GPU, ROLE_LAUNCHER = "gpu", "launcher"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-acceptance"

PYTORCHJOB_API_VERSION = "kubeflow.org/v1"
MPIJOB_API_VERSION = "kubeflow.org/v2beta1"
BATCH_JOB_API_VERSION = "batch/v1"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
TRAINER_API_VERSION = "trainer.kubeflow.org/v1alpha1"  # Kubeflow Trainer v2: TrainJob and TrainingRuntime
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"

# Kubeflow derives Service and pod names (<job>-worker-4095, <job>-master-0) from the
# job name; 50 characters leaves room for those suffixes inside a 63-character DNS label.
MAX_CHILD_NAME = 50
MAX_LABEL_VALUE = 63

PYTORCH_CONTAINER = "pytorch"  # the training-operator looks for a container of this name
PYTORCH_PORT_NAME = "pytorchjob-port"  # and for this port on it (its rendezvous Service)
PYTORCH_PORT = 23456
MPI_LAUNCHER_CONTAINER = "launcher"
MPI_WORKER_CONTAINER = "worker"
MPI_SSH_AUTH_MOUNT_PATH = "/root/.ssh"  # mpi-operator's default: the image's sshd runs as root
MPI_MASTER_PORT = 29500
# sshd port on hostNetwork workers: 22 belongs to the node's own sshd there.
HOST_NETWORK_SSHD_PORT = 2222

SHM_VOLUME = f"{RESERVED_VOLUME_PREFIX}shm"
RUN_VOLUME = f"{RESERVED_VOLUME_PREFIX}run"
RUN_DIR = "/run/gpu-acceptance"
# MPI ranks are children of the worker's sshd, not of the container's entrypoint, so
# they do not see the container's env; the worker writes its pod-specific variables
# here at start and every rank sources the file (see _mpi_worker_command).
POD_ENV_FILE = f"{RUN_DIR}/pod.env"
POD_SPECIFIC_ENV = ("NODE_NAME", "POD_NAME", "POD_NAMESPACE")

NOFILE_LIMIT = 1048576
LAUNCHER_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}}
INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}

# The workload reads NCCL's INFO log to see which transport it used; pod.env or network.env may
# raise the detail (TRACE, ALL) but lowering it leaves the transport unknown, which fails a required one.
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}

_DNS_LABEL_CHARS = re.compile(r"[^a-z0-9-]")


# --------------------------------------------------------------------------- names and labels


def _digest(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _fit(base: str, suffix: str, limit: int) -> str:
    """base + suffix within `limit` characters; a shortened base keeps a hash of the whole, so names stay unique."""
    if len(base) + len(suffix) <= limit:
        return base + suffix
    keep = limit - len(suffix) - 9
    return f"{base[:keep].rstrip('-.')}-{_digest(base)}{suffix}"


def fit_name(base: str, limit: int) -> str:
    """`base` within `limit` characters (shortened with a hash of the whole, so names stay unique)."""
    return _fit(base, "", limit)


def generation_of(test: AcceptanceTest) -> int:
    """metadata.generation, 1 before the API server has assigned one (render, unit tests)."""
    return test.metadata.generation or 1


def job_name(test: AcceptanceTest) -> str:
    """<name>-<run id>: one job per run (<name>-g<generation> for a spec's first), a DNS label for Kubeflow's Services.

    A test name with dots or a leading digit (legal for a custom resource, not
    for a Service) is turned into a DNS label and marked with a hash.
    """
    name = test.metadata.name
    label = _DNS_LABEL_CHARS.sub("-", name)
    if not label[:1].isalpha():
        label = f"at-{label}"
    if label != name:
        label = f"{label.strip('-')}-{_digest(name)}"
    return _fit(label, f"-{run_of(test).id}", MAX_CHILD_NAME)


def service_account_name(test: AcceptanceTest) -> str:
    """<name>-workload: the identity rank 0 delivers the report with; also names its Role and binding."""
    return _fit(test.metadata.name, "-workload", MAX_CHILD_NAME)


def evidence_names(test: AcceptanceTest) -> list[str]:
    """The run's evidence ConfigMaps: <name>-evidence-job, then one per group of nodes (<name>-evidence-K)."""
    return evidence.shard_names(_fit(test.metadata.name, "-evidence", MAX_CHILD_NAME), test.spec.nodes)


def test_label_value(test: AcceptanceTest) -> str:
    """The test's name as a label value (names longer than 63 characters are shortened with a hash)."""
    return _fit(test.metadata.name, "", MAX_LABEL_VALUE)


test_label_value.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def test_labels(test: AcceptanceTest) -> dict[str, str]:
    """Labels of the job and of every pod it runs: which test, which run."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_TEST: test_label_value(test),
        LABEL_GENERATION: str(generation_of(test)),
        LABEL_RUN: run_of(test).id,
    }


test_labels.__test__ = False  # type: ignore[attr-defined]


def job_labels(test: AcceptanceTest) -> dict[str, str]:
    """Labels of the job itself: the test's, and how its workload delivers the report (LABEL_DELIVERY)."""
    return {**test_labels(test), LABEL_DELIVERY: DELIVERY_EVIDENCE}


def delivers_evidence(job: dict[str, Any]) -> bool:
    """The job's workload delivers its report into the evidence ConfigMaps (this version's jobs)."""
    return ((job.get("metadata") or {}).get("labels") or {}).get(LABEL_DELIVERY) == DELIVERY_EVIDENCE


def run_of_child(obj: dict[str, Any]) -> str:
    """The run a child (pod, job) belongs to, by its labels; one without a run label is its generation's first."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_RUN) or f"g{labels.get(LABEL_GENERATION, '')}"


def owner_references(test: AcceptanceTest) -> list[dict[str, Any]]:
    """The AcceptanceTest as controller owner, so deleting it garbage-collects the children.

    No blockOwnerDeletion: setting it needs update on acceptancetests/finalizers
    where OwnerReferencesPermissionEnforcement is on, which the operator is not granted.
    """
    if not test.metadata.uid:
        return []
    return [{"apiVersion": API_VERSION, "kind": KIND, "name": test.metadata.name, "uid": test.metadata.uid,
             "controller": True}]


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    """Whether `obj` names the object of this uid among its owners (what the garbage collector goes by)."""
    return any(o.get("uid") == uid for o in (obj.get("metadata") or {}).get("ownerReferences") or [])


def test_owners(obj: dict[str, Any]) -> set[str]:
    """The uids of the AcceptanceTests that own `obj` (none: nobody's, or its owner references were removed)."""
    return {o.get("uid", "") for o in (obj.get("metadata") or {}).get("ownerReferences") or [] if o.get("kind") == KIND}


def _metadata(test: AcceptanceTest, name: str, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": test.metadata.namespace, "labels": labels}
    owners = owner_references(test)
    if owners:
        meta["ownerReferences"] = owners
    return meta


# --------------------------------------------------------------------------- workload image


def resolve_image(test: AcceptanceTest, default_image: str | None,
                  pull_secrets: tuple[str, ...] = ()) -> AcceptanceTest:
    """The test with its workload image decided: its own spec.image, else the operator's configured one
    (`default_image`, chart value workloadImage), else the operator's own version's (DEFAULT_IMAGE); and the Secrets
    its pods pull it with: its own spec.pod.imagePullSecrets, else the chart's workloadImagePullSecrets
    (`pull_secrets`, names of Secrets in the test's namespace), so a test written for any cluster (the cpu-smoke
    example) runs unedited where the images live in a private registry.

    An image equal to DEFAULT_IMAGE counts as unset: CRDs before 0.2 wrote that default into every stored test.
    """
    image = test.spec.image if test.spec.image not in (None, DEFAULT_IMAGE) else default_image or DEFAULT_IMAGE
    secrets = test.spec.pod.image_pull_secrets or list(pull_secrets)
    if image == test.spec.image and secrets == test.spec.pod.image_pull_secrets:
        return test
    pod = test.spec.pod.model_copy(update={"image_pull_secrets": secrets})
    return test.model_copy(update={"spec": test.spec.model_copy(update={"image": image, "pod": pod})})


def workload_image(test: AcceptanceTest) -> str:
    """The image the builders put in the pods (resolve_image first, to apply the operator's configuration)."""
    return test.spec.image or DEFAULT_IMAGE


# --------------------------------------------------------------------------- workload configuration


def build_workload_config(test: AcceptanceTest) -> WorkloadConfig:
    """What the workload runs: the checks with the profile's thresholds filled in, and whose status to patch."""
    spec, meta = test.spec, test.metadata
    smoke = is_smoke(spec.profile)
    return WorkloadConfig.build(
        checks=cpu_smoke_checks(spec.checks) if smoke else spec.checks,
        mode="cpu-smoke" if smoke else "gpu",
        profile=spec.profile,
        nodes=spec.nodes,
        test=TestRef(name=meta.name, namespace=meta.namespace, uid=meta.uid, generation=generation_of(test),
                     run=run_of(test).id, evidence=evidence_names(test)),
        gpus_per_node=spec.gpus_per_node,
        fabric=spec.network.fabric,
        gpu_direct_rdma=spec.network.gpu_direct_rdma,
        timeout_seconds=spec.timeout_seconds,
        limits=pod_limits(spec.resources),
        storage_path=spec.storage.mount_path if spec.storage else None,
    )


def pod_limits(resources: Resources) -> PodLimits:
    """spec.resources' CPU and memory as the workload judges its cgroup against them (cpu_limit, memory_limit)."""
    return PodLimits(cpu=None if resources.cpu is None else str(resources.cpu),
                     memory=None if resources.memory is None else str(resources.memory))


def workload_env(test: AcceptanceTest) -> dict[str, str]:
    """Plain-value variables of the workload: config, NCCL debug, fabric, then network.env and pod.env on top."""
    return {
        **NCCL_DEBUG_ENV,
        **build_network_env(test.spec.network),
        **test.spec.pod.env,
        CONFIG_ENV: build_workload_config(test).to_env(),
    }


def _downward_env() -> list[dict[str, Any]]:
    def field(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}

    return [field("NODE_NAME", "spec.nodeName"), field("POD_NAME", "metadata.name"),
            field("POD_NAMESPACE", "metadata.namespace")]


def _env_list(values: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in values.items()]


# --------------------------------------------------------------------------- pods


def _anti_affinity_term(test: AcceptanceTest) -> dict[str, Any]:
    """No two GPU pods of this test on one node (any generation: an old run's pods still hold the GPUs)."""
    return {
        "labelSelector": {"matchLabels": {LABEL_TEST: test_label_value(test), LABEL_ROLE: ROLE_GPU}},
        "topologyKey": HOSTNAME_TOPOLOGY,
    }


def build_affinity(test: AcceptanceTest) -> dict[str, Any]:
    """placement.affinity with the required one-pod-per-node anti-affinity added; the user's terms are kept."""
    given = test.spec.placement.affinity
    affinity = given.to_wire() if given is not None else {}
    anti = affinity.get("podAntiAffinity") or {}
    required = list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    required.append(_anti_affinity_term(test))
    anti["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["podAntiAffinity"] = anti
    return affinity


def needs_ipc_lock(test: AcceptanceTest) -> bool:
    """Multi-node RDMA tests: the workload container gets CAP_IPC_LOCK and nothing more.

    ib_umem_get() (memory registration for InfiniBand/RoCE verbs) ignores
    RLIMIT_MEMLOCK for a process with CAP_IPC_LOCK, so NCCL can pin its buffers
    even where the container runtime's memlock limit is low. Over Ethernet NCCL
    uses sockets, and inside one node NVLink/shared memory: nothing is
    registered with a NIC, so no capability is added.
    """
    return test.spec.nodes > 1 and test.spec.network.fabric in ("infiniband", "roce", "efa")


def _gpu_resources(test: AcceptanceTest) -> dict[str, Any]:
    """nvidia.com/gpu, cpu, memory and extra devices: requests equal limits (extended resources demand it).

    A cpu-smoke pod requests no GPU: its gpusPerNode gloo processes run on CPU.
    """
    r = test.spec.resources
    amounts: dict[str, Any] = {} if is_smoke(test.spec.profile) else {GPU_RESOURCE: test.spec.gpus_per_node}
    if r.cpu is not None:
        amounts["cpu"] = r.cpu
    if r.memory is not None:
        amounts["memory"] = r.memory
    amounts.update(r.extra)
    efa_devices = efa.device_count(test.spec.network.efa_devices, test.spec.placement.node_selector)
    if test.spec.network.fabric == "efa" and efa_devices and not is_smoke(test.spec.profile):
        amounts[efa.EFA_RESOURCE] = efa_devices  # every EFA interface of the node (efa.py)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _ulimit_init_container(init_image: str) -> dict[str, Any]:
    """The privileged init container that raises memlock and nofile, and says what the workload will get.

    Honest limits of what it can do: rlimits belong to a process and its
    children, so raising them here changes nothing for the workload container,
    which starts with the container runtime's defaults. What this container does
    is prove that the node lets a container lift memlock to unlimited and nofile
    to 1048576, and log the runtime's defaults (the limits the workload will
    actually start with) where `kubectl logs -c ulimits` finds them. The
    workload's preflight then judges the limits it really has, and the workload
    container's CAP_IPC_LOCK lets RDMA pin memory regardless of memlock.

    Being privileged, it runs only the image the operator is configured with
    (by default the operator's own, which has a POSIX sh), never one a test
    names; as root, because the operator image's user could not raise a hard limit.
    """
    script = (
        'echo "runtime defaults (what the workload container starts with): '
        'memlock soft=$(ulimit -S -l) hard=$(ulimit -H -l), nofile soft=$(ulimit -S -n) hard=$(ulimit -H -n)"; '
        f"if ulimit -l unlimited && ulimit -n {NOFILE_LIMIT}; then "
        'echo "raised here: memlock=$(ulimit -l) nofile=$(ulimit -n)"; '
        'else echo "could not raise memlock/nofile even in a privileged container"; fi; '
        'echo "rlimits are per process: the workload preflight checks the limits it actually has"'
    )
    return {
        "name": "ulimits",
        "image": init_image,
        "command": ["sh", "-c", script],
        "securityContext": {"privileged": True, "runAsUser": 0, "runAsNonRoot": False},
        "resources": copy.deepcopy(INIT_RESOURCES),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _pod_spec(test: AcceptanceTest, containers: list[dict[str, Any]], *, gpu: bool, init_image: str,
              extra_volumes: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """Pod spec shared by every pod of the job; `gpu` adds placement, /dev/shm and the ulimit init container."""
    spec, place, pod = test.spec, test.spec.placement, test.spec.pod
    out: dict[str, Any] = {
        "serviceAccountName": pod.service_account_name or service_account_name(test),
        # Rank 0 (on a GPU pod) patches the status with this token; the launcher never calls the API.
        "automountServiceAccountToken": gpu,
    }
    if place.node_selector:
        out["nodeSelector"] = dict(place.node_selector)
    if place.tolerations:
        out["tolerations"] = wire_list(place.tolerations)
    if gpu:
        out["affinity"] = build_affinity(test)
    if place.priority_class_name:
        out["priorityClassName"] = place.priority_class_name
    if place.scheduler_name:
        out["schedulerName"] = place.scheduler_name
    if gpu and pod.runtime_class_name:
        # GPU pods only: under the NVIDIA runtime the launcher, which requests no GPU, would see every GPU of
        # its node (the image's NVIDIA_VISIBLE_DEVICES=all).
        out["runtimeClassName"] = pod.runtime_class_name
    if gpu and pod.host_network:
        out["hostNetwork"] = True
        out["dnsPolicy"] = "ClusterFirstWithHostNet"  # Service names still resolve (MASTER_ADDR)
    if pod.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": n} for n in pod.image_pull_secrets]
    if gpu and pod.ulimit_init:
        out["initContainers"] = [_ulimit_init_container(init_image)]
    out["containers"] = containers
    volumes: list[dict[str, Any]] = []
    if gpu:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.pod.shm_size}})
        volumes.extend(extra_volumes)
        volumes.extend(storage_mount(test)[0])
        volumes.extend(wire_list(pod.volumes))
    if volumes:
        out["volumes"] = volumes
    return out


def storage_mount(test: AcceptanceTest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """spec.storage: the shared volume, and its mount at spec.storage.mountPath (none without spec.storage)."""
    if test.spec.storage is None:
        return [], []
    return ([{"name": STORAGE_VOLUME, **test.spec.storage.volume.to_wire()}],
            [{"name": STORAGE_VOLUME, "mountPath": test.spec.storage.mount_path}])


def _gpu_container(test: AcceptanceTest, name: str, command: list[str], env: list[dict[str, Any]],
                   extra_mounts: list[dict[str, Any]] = ()) -> dict[str, Any]:
    pod = test.spec.pod
    container: dict[str, Any] = {
        "name": name,
        "image": workload_image(test),
        "command": command,
        "env": env,
        "resources": _gpu_resources(test),
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": SHM_PATH}, *extra_mounts, *storage_mount(test)[1],
                         *wire_list(pod.volume_mounts)],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if needs_ipc_lock(test):
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return container


def _template(test: AcceptanceTest, role: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A pod template: spec.pod.labels on every pod, the operator's on top (their keys are reserved, so none is
    replaced); spec.pod.annotations on GPU pods only: they attach networks and devices (Multus, GKE) that the
    GPU-less MPIJob launcher neither needs nor requests (an SR-IOV network without its VF would not start it)."""
    pod = test.spec.pod
    meta: dict[str, Any] = {"labels": {**pod.labels, **test_labels(test), LABEL_ROLE: role}}
    if role == ROLE_GPU and pod.annotations:
        meta["annotations"] = dict(pod.annotations)
    return {"metadata": meta, "spec": pod_spec}


def _run_policy(test: AcceptanceTest) -> dict[str, Any]:
    """No retries (a failed run is a verdict), the run's deadline, cleanup after the TTL.

    cleanPodPolicy Running: when the job ends, pods still running (MPI workers'
    sshd, ranks waiting on a dead peer) are deleted so they release their GPUs;
    finished pods stay, with their logs, until the TTL.
    """
    return {
        "backoffLimit": 0,
        "activeDeadlineSeconds": test.spec.timeout_seconds,
        "ttlSecondsAfterFinished": test.spec.ttl_seconds_after_finished,
        "cleanPodPolicy": "Running",
    }


# --------------------------------------------------------------------------- RBAC and all children


def build_evidence(test: AcceptanceTest) -> list[dict[str, Any]]:
    """The run's evidence ConfigMaps, empty: the workload fills them (by name only), the test owns them."""
    labels = {**test_labels(test), LABEL_ROLE: "evidence"}
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(test, name, labels)}
            for name in evidence_names(test)]


def build_rbac(test: AcceptanceTest) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding; shared by all generations (the Role follows the evidence names).

    The Role allows exactly what rank 0 does: get/patch the run's evidence ConfigMaps by name; nothing
    else: no verb on AcceptanceTests (the operator writes every status field), no list, no create.
    """
    name = service_account_name(test)
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TEST: test_label_value(test)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(test, name, labels)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(test, name, labels),
            "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                       "resourceNames": evidence_names(test), "verbs": ["get", "patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(test, name, labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": test.metadata.namespace}],
        },
    ]
