"""The manifest builders: names, every backend, every fabric, placement, RBAC and the workload's env."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from acceptance_operator.building import manifests
from acceptance_operator.building.backends import build_children, build_job
from acceptance_operator.building.job_builders import build_indexed_job, build_jobset, build_mpijob, build_pytorchjob
from acceptance_operator.building.manifests import (
    build_affinity,
    build_evidence,
    build_network_env,
    build_rbac,
    build_workload_config,
    evidence_names,
    job_name,
    service_account_name,
)
from acceptance_operator.render import render
from acceptance_operator.resource import api
from acceptance_operator.resource.api import AcceptanceTest
from acceptance_operator.resource.spec_input import parse_test
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
UID = "6b3b1c4e-2f7a-4a8e-9d55-0c6f1e2d3a4b"


def make(spec: dict | None = None, *, name: str = "t", namespace: str = "gpu", uid: str | None = UID,
         generation: int | None = 3) -> AcceptanceTest:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    if generation:
        meta["generation"] = generation
    return AcceptanceTest.model_validate({"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": meta,
                                          "spec": spec or {}})


def templates(job: dict) -> list[dict]:
    """Every pod template of the job."""
    if job["kind"] == "Job":
        return [job["spec"]["template"]]
    if job["kind"] == "JobSet":
        return [r["template"]["spec"]["template"] for r in job["spec"]["replicatedJobs"]]
    replicas = job["spec"].get("pytorchReplicaSpecs") or job["spec"]["mpiReplicaSpecs"]
    return [r["template"] for r in replicas.values()]


def gpu_pod_specs(job: dict) -> list[dict]:
    """The pod specs that hold GPUs: all but the MPIJob's launcher."""
    return [t["spec"] for t in templates(job) if t["metadata"]["labels"]["gpu-acceptance.io/role"] == "gpu"]


def env_of(container: dict) -> dict[str, Any]:
    """name -> value (or valueFrom), the last one winning as in Kubernetes."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def main_container(pod_spec: dict) -> dict:
    (container,) = pod_spec["containers"]
    return container


BACKENDS = ["PyTorchJob", "MPIJob", "Job", "JobSet"]


# --------------------------------------------------------------------------- names


def torchrun_args(command: list[str], env: dict[str, str]):
    """torchrun's own parser on a built command, with the PET_* environment the pod would have."""
    from torch.distributed import run

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return run.get_args_parser().parse_args(command[command.index("torchrun") + 1:])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_job_name_is_per_generation():
    assert job_name(make(generation=3)) == "t-g3"
    assert job_name(make(generation=None)) == "t-g1"
    assert job_name(make(name="standard", generation=12)) == "standard-g12"


def test_long_names_are_shortened_and_stay_unique():
    a, b = "a" * 60 + "-one", "a" * 60 + "-two"
    names = {job_name(make(name=a)), job_name(make(name=b))}
    assert len(names) == 2
    for n in names:
        assert len(n) <= 50 and n.endswith("-g3") and n.startswith("a" * 30)
    assert job_name(make(name=a)) == job_name(make(name=a))  # stable across calls (idempotent creates)
    sas = {service_account_name(make(name=a)), service_account_name(make(name=b))}
    assert len(sas) == 2 and all(len(n) <= 50 and n.endswith("-workload") for n in sas)
    assert service_account_name(make(name="t")) == "t-workload"


def test_job_name_is_a_dns_label_even_for_dotted_or_digit_names():
    for name in ("v1.2.run", "8xh100"):
        n = job_name(make(name=name))
        assert n[0].isalpha() and "." not in n and len(n) <= 50, n
    assert job_name(make(name="v1.2.run")) != job_name(make(name="v1-2-run"))


def test_long_test_name_fits_a_label_value():
    test = make(name="x" * 70)
    labels = build_job(test)["metadata"]["labels"]
    assert len(labels["gpu-acceptance.io/test"]) <= 63
    assert build_rbac(test)[1]["rules"][0]["resourceNames"] == evidence_names(test)  # the Role names the real objects
    assert all(name.startswith("x" * 32) for name in evidence_names(test))


# --------------------------------------------------------------------------- both backends, every GPU pod


@pytest.mark.parametrize("backend", BACKENDS)
def test_job_and_pod_labels(backend: str):
    job = build_job(make({"backend": backend}, generation=7))
    assert job["metadata"]["labels"]["gpu-acceptance.io/test"] == "t"
    assert job["metadata"]["labels"]["gpu-acceptance.io/generation"] == "7"
    assert job["metadata"]["name"] == "t-g7" and job["metadata"]["namespace"] == "gpu"
    for template in templates(job):
        labels = template["metadata"]["labels"]
        assert labels["gpu-acceptance.io/test"] == "t" and labels["gpu-acceptance.io/generation"] == "7"


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_pods_request_and_limit_whole_gpus_and_resources(backend: str):
    job = build_job(make({"backend": backend, "gpusPerNode": 4,
                          "resources": {"cpu": 32, "memory": "256Gi", "extra": {"rdma/ib": 1}}}))
    for spec in gpu_pod_specs(job):
        res = main_container(spec)["resources"]
        assert res["requests"] == res["limits"] == {"nvidia.com/gpu": 4, "cpu": 32, "memory": "256Gi",
                                                     "rdma/ib": 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_pods_get_shm_ulimit_init_and_one_privileged_container(backend: str):
    job = build_job(make({"backend": backend, "pod": {"shmSize": "16Gi"}}), init_image="registry.local/op:1")
    for spec in gpu_pod_specs(job):
        shm = [v for v in spec["volumes"] if v["name"] == manifests.SHM_VOLUME]
        assert shm == [{"name": manifests.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
        container = main_container(spec)
        assert {"name": manifests.SHM_VOLUME, "mountPath": "/dev/shm"} in container["volumeMounts"]
        (init,) = spec["initContainers"]
        assert init["image"] == "registry.local/op:1"  # the operator's setting: a spec cannot name it
        # Root: the operator image's own user could not raise a hard limit, privileged or not.
        assert init["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsNonRoot": False}
        assert "ulimit -l unlimited" in init["command"][-1] and "ulimit -n 1048576" in init["command"][-1]
        # Only the init container is privileged.
        assert "privileged" not in container.get("securityContext", {})
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert container["terminationMessagePath"] == "/dev/termination-log"


@pytest.mark.parametrize("backend", BACKENDS)
def test_ulimit_init_can_be_turned_off(backend: str):
    for spec in gpu_pod_specs(build_job(make({"backend": backend, "pod": {"ulimitInit": False}}))):
        assert "initContainers" not in spec


def test_ulimit_init_script_runs_and_reports_the_limits():
    """The init container's script is real shell: it runs here and says what the workload will start with."""
    pod = gpu_pod_specs(build_job(make()))[0]
    cmd = pod["initContainers"][0]["command"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert "runtime defaults (what the workload container starts with): memlock soft=" in proc.stdout
    assert "nofile soft=" in proc.stdout
    assert "the workload preflight checks the limits it actually has" in proc.stdout


@pytest.mark.parametrize(("fabric", "nodes", "ipc_lock"), [
    ("infiniband", 2, True), ("roce", 2, True), ("ethernet", 2, False), ("infiniband", 1, False)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_container_gets_ipc_lock_only_for_rdma(backend: str, fabric: str, nodes: int, ipc_lock: bool):
    for spec in gpu_pod_specs(build_job(make({"backend": backend, "nodes": nodes, "network": {"fabric": fabric}}))):
        security = main_container(spec).get("securityContext")
        if ipc_lock:
            assert security == {"capabilities": {"add": ["IPC_LOCK"]}}
        else:
            assert security is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_anti_affinity_keeps_one_gpu_pod_per_node(backend: str):
    for spec in gpu_pod_specs(build_job(make({"backend": backend}))):
        (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        selector = term["labelSelector"]["matchLabels"]
        assert selector["gpu-acceptance.io/test"] == "t"
        # The selector matches the GPU pods' own labels (else it would not keep them apart) ...
        assert selector.items() <= gpu_pod_template_labels(backend).items()


def gpu_pod_template_labels(backend: str) -> dict[str, str]:
    job = build_job(make({"backend": backend}))
    if backend == "PyTorchJob":
        return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["labels"]
    if backend == "MPIJob":
        return job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    return templates(job)[0]["metadata"]["labels"]


def test_mpi_launcher_is_outside_the_anti_affinity():
    """... and not the launcher's: required anti-affinity is symmetric, a matching launcher would block a node."""
    job = build_mpijob(make({"backend": "MPIJob"}))
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    (term,) = worker["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert not term["labelSelector"]["matchLabels"].items() <= launcher["metadata"]["labels"].items()
    assert "affinity" not in launcher["spec"]


def test_user_affinity_is_merged_not_replaced():
    node_affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}]}}
    own_anti = {"labelSelector": {"matchLabels": {"app": "inference"}}, "topologyKey": "kubernetes.io/hostname"}
    preferred = [{"weight": 10, "podAffinityTerm": own_anti}]
    test = make({"placement": {"affinity": {
        "nodeAffinity": node_affinity,
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [own_anti],
                            "preferredDuringSchedulingIgnoredDuringExecution": preferred},
    }}})
    affinity = build_affinity(test)
    assert affinity["nodeAffinity"] == node_affinity
    required = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required[0] == own_anti and len(required) == 2
    assert required[1]["labelSelector"]["matchLabels"]["gpu-acceptance.io/test"] == "t"
    assert affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    # The spec itself is not modified (the builder is pure: a second build gives the same result).
    assert len(test.spec.placement.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution) == 1
    assert build_affinity(test) == affinity


@pytest.mark.parametrize("backend", BACKENDS)
def test_placement_and_pod_options_reach_every_gpu_pod(backend: str):
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    volume = {"name": "datasets", "persistentVolumeClaim": {"claimName": "data"}}
    mount = {"name": "datasets", "mountPath": "/data", "readOnly": True}
    job = build_job(make({
        "backend": backend,
        "placement": {"nodeSelector": {"pool": "h100"}, "tolerations": [toleration],
                      "priorityClassName": "acceptance", "schedulerName": "volcano"},
        "pod": {"hostNetwork": True, "imagePullSecrets": ["regcred"], "volumes": [volume], "volumeMounts": [mount],
                "serviceAccountName": "custom-sa"},
        "image": "registry.local/workload:dev",
    }))
    for spec in gpu_pod_specs(job):
        assert spec["nodeSelector"] == {"pool": "h100"}
        assert spec["tolerations"] == [toleration]
        assert spec["priorityClassName"] == "acceptance" and spec["schedulerName"] == "volcano"
        assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert volume in spec["volumes"]
        assert spec["serviceAccountName"] == "custom-sa" and spec["automountServiceAccountToken"] is True
        container = main_container(spec)
        assert mount in container["volumeMounts"] and container["image"] == "registry.local/workload:dev"


@pytest.mark.parametrize("backend", BACKENDS)
def test_defaults_leave_optional_pod_fields_out(backend: str):
    for spec in gpu_pod_specs(build_job(make({"backend": backend}))):
        for absent in ("nodeSelector", "tolerations", "priorityClassName", "schedulerName", "hostNetwork",
                       "dnsPolicy", "imagePullSecrets"):
            assert absent not in spec, absent
        assert spec["serviceAccountName"] == "t-workload"
        assert main_container(spec)["image"] == api.DEFAULT_IMAGE
        assert "cpu" not in main_container(spec)["resources"]["limits"]


# --------------------------------------------------------------------------- env and network


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_env_carries_config_identity_and_nccl_debug(backend: str):
    for spec in gpu_pod_specs(build_job(make({"backend": backend, "nodes": 2}))):
        env = env_of(main_container(spec))
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
        assert env["NODE_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}
        assert env["POD_NAME"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["POD_NAMESPACE"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        config = WorkloadConfig.model_validate_json(env[CONFIG_ENV])
        assert config.test is not None
        assert (config.test.name, config.test.namespace, config.test.uid, config.test.generation) == (
            "t", "gpu", UID, 3)


def test_workload_config_resolves_thresholds_from_the_profile_and_keeps_overrides():
    test = make({"nodes": 2, "gpusPerNode": 4, "profile": "a100-sxm", "timeoutSeconds": 900,
                 "network": {"fabric": "roce", "gpuDirectRDMA": False},
                 "checks": {"nccl": {"thresholds": {"allReduceBusbwGBps": 123}}}})
    config = build_workload_config(test)
    assert (config.nodes, config.gpus_per_node, config.profile, config.timeout_seconds) == (2, 4, "a100-sxm", 900)
    assert (config.fabric, config.gpu_direct_rdma) == ("roce", False)
    nccl = config.checks.nccl.thresholds
    assert nccl.all_reduce_busbw_gbps == 123  # the spec's override
    assert nccl.all_gather_busbw_gbps is None  # profile busbw floors describe 8 GPUs a node, not 4
    eight = build_workload_config(make({"nodes": 2, "profile": "a100-sxm"})).checks.nccl.thresholds
    assert eight.all_gather_busbw_gbps == 153  # a100-sxm multi-node default (170 x 0.9)
    assert config.checks.preflight.thresholds.gpu_model == "A100"
    assert config.required_transport() == "IB"  # roce without GPUDirect RDMA
    # What travels in the env is exactly this config.
    env = env_of(main_container(gpu_pod_specs(build_job(test))[0]))
    assert WorkloadConfig.model_validate_json(env[CONFIG_ENV]) == config


def test_generation_unknown_is_one_in_the_config_and_labels():
    test = make(generation=None, uid=None)
    assert build_workload_config(test).test.generation == 1
    assert build_job(test)["metadata"]["labels"]["gpu-acceptance.io/generation"] == "1"


HCAS = [f"mlx5_{i}" for i in range(8)]


def test_infiniband_env():
    env = build_network_env(api.Network(fabric="infiniband", hcas=HCAS, socket_interface="eth0"))
    assert env == {
        "NCCL_IB_HCA": ",".join(HCAS),
        "UCX_NET_DEVICES": ",".join(f"{h}:1" for h in HCAS),
        "NCCL_NET_GDR_LEVEL": "PHB",
        "NCCL_SOCKET_IFNAME": "eth0",
    }


def test_infiniband_without_gdr_and_without_hcas():
    assert build_network_env(api.Network(fabric="infiniband", gpu_direct_rdma=False)) == {
        "NCCL_NET_GDR_LEVEL": "LOC"
    }


def test_roce_env_sets_the_gid_index():
    env = build_network_env(api.Network(fabric="roce", hcas=["mlx5_0", "mlx5_1"]))
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1" and env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    assert env["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert build_network_env(api.Network(fabric="roce", gid_index=5))["NCCL_IB_GID_INDEX"] == "5"
    assert build_network_env(api.Network(fabric="roce", gid_index=0))["NCCL_IB_GID_INDEX"] == "0"


def test_ethernet_env_disables_ib():
    env = build_network_env(api.Network(fabric="ethernet", socket_interface="ens5", hcas=["mlx5_0"]))
    assert env == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "ens5"}


def test_network_env_then_pod_env_override():
    test = make({"network": {"hcas": ["mlx5_0"], "env": {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_QPS_PER_CONNECTION": "4",
                                                       "NCCL_DEBUG_SUBSYS": "ALL"}},
                 "pod": {"env": {"NCCL_IB_QPS_PER_CONNECTION": "2", "OMP_NUM_THREADS": "4"}}})
    env = env_of(main_container(gpu_pod_specs(build_job(test))[0]))
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1"
    assert env["NCCL_IB_QPS_PER_CONNECTION"] == "2"
    assert env["OMP_NUM_THREADS"] == "4"
    assert env["NCCL_DEBUG_SUBSYS"] == "ALL"
    names = [e["name"] for e in main_container(gpu_pod_specs(build_job(test))[0])["env"]]
    assert len(names) == len(set(names))  # one entry per variable, no shadowed duplicates


# --------------------------------------------------------------------------- PyTorchJob


def test_pytorchjob_one_node_is_a_master_alone():
    job = build_pytorchjob(make({"nodes": 1}))
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1


def test_pytorchjob_master_and_workers():
    job = build_pytorchjob(make({"nodes": 4, "gpusPerNode": 8, "timeoutSeconds": 1800,
                                 "ttlSecondsAfterFinished": 600}))
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    assert all(r["restartPolicy"] == "Never" for r in replicas.values())
    assert spec["nprocPerNode"] == "8"
    assert spec["runPolicy"] == {"backoffLimit": 0, "activeDeadlineSeconds": 1800, "ttlSecondsAfterFinished": 600,
                                 "cleanPodPolicy": "Running"}
    for replica in replicas.values():
        container = main_container(replica["template"]["spec"])
        assert container["name"] == "pytorch"
        assert container["command"] == ["python", "-m", "acceptance_workload.guard", "--launcher",
                                        "torchrun", "--rdzv-conf=timeout=1800", "--max-restarts=0",
                                        "-m", "acceptance_workload.guard"]
        assert {"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"} in container["ports"]
    # Master and Worker pods are built alike but are separate objects (no shared, mutable state).
    master, worker = (r["template"] for r in replicas.values())
    assert master == worker and master is not worker
    assert master["spec"]["containers"][0] is not worker["spec"]["containers"][0]


def test_torchrun_accepts_the_command_line():
    """torchrun's own parser takes the flags; nnodes/nproc/rank/master come from the training-operator's PET_* env."""
    pytest.importorskip("torch.distributed.run")
    command = build_pytorchjob(make({"nodes": 2}))["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"][0]["command"]
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "t-g3-master-0",
           "PET_MASTER_PORT": "23456"}
    args = torchrun_args(command, env)
    assert args.module and args.training_script == "acceptance_workload.guard"
    assert args.rdzv_conf == "timeout=3600" and args.max_restarts == 0
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "8", 1)
    assert (args.master_addr, args.master_port) == ("t-g3-master-0", 23456)


# --------------------------------------------------------------------------- MPIJob


def mpi_parts(test: AcceptanceTest) -> tuple[dict, dict, dict]:
    job = build_mpijob(test)
    specs = job["spec"]["mpiReplicaSpecs"]
    return job, specs["Launcher"], specs["Worker"]


def test_mpijob_shape():
    job, launcher, worker = mpi_parts(make({"backend": "MPIJob", "nodes": 3, "gpusPerNode": 8,
                                            "timeoutSeconds": 600}))
    assert job["apiVersion"] == "kubeflow.org/v2beta1" and job["kind"] == "MPIJob"
    spec = job["spec"]
    assert spec["slotsPerWorker"] == 8
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["sshAuthMountPath"] == "/root/.ssh" and spec["mpiImplementation"] == "OpenMPI"
    assert spec["runPolicy"]["backoffLimit"] == 0 and spec["runPolicy"]["activeDeadlineSeconds"] == 600
    assert spec["runPolicy"]["ttlSecondsAfterFinished"] == 86400
    assert (launcher["replicas"], worker["replicas"]) == (1, 3)
    assert launcher["restartPolicy"] == worker["restartPolicy"] == "Never"


def test_mpi_launcher_has_no_gpus_and_a_tiny_request():
    _, launcher, _ = mpi_parts(make({"backend": "MPIJob", "resources": {"cpu": 64, "extra": {"rdma/ib": 1}}}))
    pod = launcher["template"]["spec"]
    container = main_container(pod)
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}
    assert "initContainers" not in pod and "volumes" not in pod and "securityContext" not in container
    assert pod["automountServiceAccountToken"] is False  # it never calls the API


def test_mpirun_command_covers_every_slot_and_exports_the_env():
    test = make({"backend": "MPIJob", "nodes": 2, "gpusPerNode": 8, "network": {"hcas": ["mlx5_0"]},
                 "pod": {"env": {"OMP_NUM_THREADS": "4"}}}, namespace="lab")
    _, launcher, _ = mpi_parts(test)
    container = main_container(launcher["template"]["spec"])
    cmd = container["command"]
    assert cmd[0] == "mpirun" and "--allow-run-as-root" in cmd
    assert cmd[cmd.index("-np") + 1] == "16"
    assert cmd[cmd.index("--map-by") + 1] == "ppr:8:node"
    assert cmd[-3:-1] == ["sh", "-c"] and cmd[-1].endswith("exec python -m acceptance_workload.guard")
    exported = {cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"}
    env = env_of(container)
    assert env["MASTER_ADDR"] == "t-g3-worker-0.t-g3.lab.svc" and env["MASTER_PORT"] == "29500"
    # Every plain variable of the launcher reaches the ranks, plus what in-cluster config and the image need.
    assert set(env) <= exported
    assert {"GPU_ACCEPTANCE_CONFIG", "NCCL_IB_HCA", "NCCL_DEBUG", "OMP_NUM_THREADS", "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT", "PATH", "LD_LIBRARY_PATH"} <= exported
    # Pod-specific values come from each worker, never from the launcher.
    assert not {"NODE_NAME", "POD_NAME"} & exported


def test_mpi_workers_run_sshd_and_publish_their_pod_identity(tmp_path: Path):
    """The worker's start script and each rank's wrapper, run for real with the file in a temp folder."""
    _, launcher, worker = mpi_parts(make({"backend": "MPIJob"}))
    worker_cmd = main_container(worker["template"]["spec"])["command"]
    rank_cmd = main_container(launcher["template"]["spec"])["command"][-3:]
    assert worker_cmd[:2] == ["sh", "-c"] and worker_cmd[-1].endswith("exec /usr/sbin/sshd -De")
    env_file = str(tmp_path / "pod.env")
    start = worker_cmd[-1].replace(manifests.POD_ENV_FILE, env_file).replace("exec /usr/sbin/sshd -De", "true")
    pod_env = {"PATH": os.environ["PATH"], "NODE_NAME": "gpu-node-7", "POD_NAME": "t-g3-worker-1",
               "POD_NAMESPACE": "gpu"}
    subprocess.run(["sh", "-c", start], env=pod_env, check=True, timeout=10)
    rank = rank_cmd[-1].replace(manifests.POD_ENV_FILE, env_file).replace("python -m acceptance_workload.guard", "env")
    # A rank started by sshd sees none of the pod's variables until it sources the file.
    out = subprocess.run(["sh", "-c", rank], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True,
                         check=True, timeout=10).stdout.splitlines()
    assert {"NODE_NAME=gpu-node-7", "POD_NAME=t-g3-worker-1", "POD_NAMESPACE=gpu"} <= set(out)


def test_mpi_worker_pod_has_the_run_volume():
    _, _, worker = mpi_parts(make({"backend": "MPIJob"}))
    pod = worker["template"]["spec"]
    assert {"name": manifests.RUN_VOLUME, "emptyDir": {}} in pod["volumes"]
    assert {"name": manifests.RUN_VOLUME, "mountPath": manifests.RUN_DIR} in main_container(pod)["volumeMounts"]


def test_mpi_host_network_moves_sshd_off_the_nodes_port_22():
    _, launcher, worker = mpi_parts(make({"backend": "MPIJob", "pod": {"hostNetwork": True}}))
    assert main_container(worker["template"]["spec"])["command"][-1].endswith("/usr/sbin/sshd -De -p 2222")
    cmd = main_container(launcher["template"]["spec"])["command"]
    i = cmd.index("plm_rsh_args")
    assert cmd[i - 1] == "--mca" and cmd[i + 1].startswith("-p 2222 ")
    assert "hostNetwork" not in launcher["template"]["spec"]


def test_mpi_launcher_follows_tolerations_and_scheduler():
    _, launcher, _ = mpi_parts(make({"backend": "MPIJob", "placement": {
        "tolerations": [{"operator": "Exists"}], "schedulerName": "volcano", "priorityClassName": "p"},
        "pod": {"imagePullSecrets": ["regcred"]}}))
    pod = launcher["template"]["spec"]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert (pod["schedulerName"], pod["priorityClassName"]) == ("volcano", "p")
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


# --------------------------------------------------------------------------- RBAC, owners, children


def test_rbac_allows_only_the_runs_evidence_by_name_and_nothing_on_acceptancetests():
    sa, role, binding = build_rbac(make(name="standard", namespace="lab"))
    assert (sa["kind"], role["kind"], binding["kind"]) == ("ServiceAccount", "Role", "RoleBinding")
    assert sa["metadata"]["name"] == role["metadata"]["name"] == binding["metadata"]["name"] == "standard-workload"
    assert {o["metadata"]["namespace"] for o in (sa, role, binding)} == {"lab"}
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["standard-evidence-job", "standard-evidence-0"],
                              "verbs": ["get", "patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "standard-workload"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "standard-workload", "namespace": "lab"}]


def test_evidence_is_one_configmap_for_the_job_and_one_per_eight_nodes():
    test = make({"nodes": 1024}, name="big")
    names = evidence_names(test)
    assert names[:2] == ["big-evidence-job", "big-evidence-0"] and len(names) == 1 + 128
    cms = build_evidence(test)
    assert [c["metadata"]["name"] for c in cms] == names and all("data" not in c for c in cms)
    assert cms[0]["metadata"]["labels"]["gpu-acceptance.io/role"] == "evidence"
    assert build_workload_config(test).test.evidence == names
    role = build_rbac(test)[1]
    assert role["rules"][0]["resourceNames"] == names


def test_rbac_is_shared_by_generations():
    assert build_rbac(make(generation=1)) == build_rbac(make(generation=2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_children_are_rbac_then_the_job_all_owned_by_the_test(backend: str):
    children = build_children(make({"backend": backend}))
    beside = ["Service"] if backend == "Job" else []  # the Indexed Job's headless Service, before the Job
    assert [c["kind"] for c in children] == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "ConfigMap",
                                             *beside, backend]
    for child in children:
        assert child["metadata"]["ownerReferences"] == [{
            "apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest", "name": "t", "uid": UID,
            "controller": True}]


def test_without_a_uid_there_are_no_owner_references():
    for child in build_children(make(uid=None)):
        assert "ownerReferences" not in child["metadata"]


@pytest.mark.parametrize(("backend", "api_version"), [
    ("PyTorchJob", "kubeflow.org/v1"), ("MPIJob", "kubeflow.org/v2beta1"), ("Job", "batch/v1"),
    ("JobSet", "jobset.x-k8s.io/v1alpha2")])
def test_build_job_dispatches_on_backend(backend: str, api_version: str):
    job = build_job(make({"backend": backend}))
    assert (job["apiVersion"], job["kind"]) == (api_version, backend)


def test_builders_do_not_change_the_test():
    test = make({"backend": "MPIJob", "placement": {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": []}}}, "pod": {"volumes": [{"name": "v", "emptyDir": {}}]}})
    before = test.model_dump()
    first = build_children(test)
    assert test.model_dump() == before
    assert build_children(test) == first


# --------------------------------------------------------------------------- examples and YAML


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_render(example: Path):
    test = parse_test(example.read_text())
    docs = list(yaml.safe_load_all(render(test)))
    assert [d["kind"] for d in docs][:3] == ["ServiceAccount", "Role", "RoleBinding"]
    assert {d["kind"] for d in docs[3:-1]} <= {"ConfigMap", "Service"}
    assert docs[-1]["kind"] == test.spec.backend
    assert docs == json.loads(json.dumps(build_children(test)))


def test_examples_cover_what_the_docs_promise():
    by_name = {p.stem: parse_test(p.read_text()) for p in EXAMPLES}
    assert set(by_name) >= {"quick", "standard", "mpijob", "roce", "job", "jobset"}
    assert by_name["quick"].spec.nodes == 1
    standard = by_name["standard"].spec
    assert (standard.nodes, standard.gpus_per_node, standard.backend, standard.profile) == (
        2, 8, "PyTorchJob", "h100-sxm")
    assert standard.network.fabric == "infiniband" and standard.network.hcas == [f"mlx5_{i}" for i in range(8)]
    assert by_name["mpijob"].spec.backend == "MPIJob"
    assert (by_name["job"].spec.backend, by_name["jobset"].spec.backend) == ("Job", "JobSet")
    assert by_name["roce"].spec.network.fabric == "roce"
    assert by_name["cross-check"].spec.checks.nccl.cross_check and by_name["cross-check"].spec.nodes == 1


def test_rendered_yaml_has_no_anchors_or_aliases():
    text = render(make({"nodes": 3}))
    assert "&id" not in text and "*id" not in text


# --------------------------------------------------------------------------- Job (Indexed) and JobSet


def test_indexed_job_shape():
    service, job = build_indexed_job(make({"backend": "Job", "nodes": 3, "timeoutSeconds": 600,
                                           "ttlSecondsAfterFinished": 120}))
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (0, 600, 120)
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["subdomain"] == service["metadata"]["name"] == "t-g3"
    # The first failure ends the Job, and its condition says why (exit code or lost node).
    rules = spec["podFailurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["FailJob", "FailJob"]
    assert rules[0]["onExitCodes"] == {"containerName": "workload", "operator": "NotIn", "values": [0]}
    assert rules[0]["onExitCodes"]["containerName"] == main_container(pod)["name"]
    assert rules[1]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]


def test_indexed_job_service_is_headless_and_selects_exactly_the_runs_gpu_pods():
    service, job = build_indexed_job(make({"backend": "Job", "nodes": 2}))
    assert service["kind"] == "Service" and service["metadata"]["name"] == job["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    selector = service["spec"]["selector"]
    assert selector == {"gpu-acceptance.io/test": "t", "gpu-acceptance.io/generation": "3",
                        "gpu-acceptance.io/role": "gpu"}
    assert selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert service["metadata"]["ownerReferences"][0]["uid"] == UID  # goes with the test


@pytest.mark.parametrize(("backend", "master"), [("Job", "t-g3-0.t-g3.gpu.svc"),
                                                 ("JobSet", "t-g3-node-0-0.t-g3.gpu.svc")])
def test_static_rendezvous_env_points_at_index_zero(backend: str, master: str):
    env = env_of(main_container(gpu_pod_specs(build_job(make({"backend": backend, "nodes": 4,
                                                               "gpusPerNode": 4})))[0]))
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == (
        "4", "4", master, "29500")
    assert env["PET_NODE_RANK"] == {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


def test_jobset_shape():
    (jobset,) = build_jobset(make({"backend": "JobSet", "nodes": 3, "timeoutSeconds": 600,
                                   "ttlSecondsAfterFinished": 120}))
    spec = jobset["spec"]
    assert spec["failurePolicy"] == {"maxRestarts": 0} and spec["ttlSecondsAfterFinished"] == 120
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    (replicated,) = spec["replicatedJobs"]
    assert (replicated["name"], replicated["replicas"]) == ("node", 1)
    job = replicated["template"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"], job["backoffLimit"],
            job["activeDeadlineSeconds"]) == ("Indexed", 3, 3, 0, 600)
    # The JobSet's Job carries no test label: the operator's Job watch must not take it for a run.
    assert "metadata" not in replicated["template"]


@pytest.mark.parametrize("backend", ["Job", "JobSet"])
def test_torchrun_takes_the_static_rendezvous_from_the_pod_env(backend: str):
    """torchrun's own parser, fed the container's PET_* env (the node rank as the Job controller fills it in)."""
    pytest.importorskip("torch.distributed.run")
    container = main_container(gpu_pod_specs(build_job(make({"backend": backend, "nodes": 2})))[0])
    env = {k: v for k, v in env_of(container).items() if k.startswith("PET_") and isinstance(v, str)}
    env["PET_NODE_RANK"] = "1"
    args = torchrun_args(container["command"], env)
    assert (args.nnodes, args.nproc_per_node, args.node_rank, args.master_port) == ("2", "8", 1, 29500)
    assert args.master_addr.startswith("t-g3-") and args.rdzv_backend == "static"
