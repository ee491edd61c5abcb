"""Runs through the real parts: the operator's job -> the backend controller's pods -> the real scheduler's binding
to fake GPU nodes -> pod phases from kwok. The test writes only what the workload would write (its report).

A cluster of its own (tests/devcluster.py): the test API server with kube-controller-manager, kube-scheduler and
kwok running `DEV_NODES` (default 4) fake nodes of 8 nvidia.com/gpu each; the backends' controllers (JobSet,
training-operator, mpi-operator) start once per module, when a test first needs them. kwok keeps a pod Running
until the test makes its process exit (Controllers.exit_pods, where the workload would exit); faults come from
outside: a node's kubelet stops reporting (Controllers.stop_kubelet), a pod is deleted, a controller is stopped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from acceptance_operator.building.manifests import LABEL_ROLE

from tests.apiserver import ApiServer, backend_crd_paths
from tests.cluster.conftest import AT_CRD, StartOperator
from tests.cluster.operator_harness import Cluster, report
from tests.devcluster import GPUS_PER_NODE, JOBSET, TRAINING_OPERATOR, Controllers, dev_nodes

# Kubernetes' Job controller completes the pods kwok runs at once; the report may come a little later. A node is
# lost 5 s after the node lifecycle controller marked it not Ready (itself NODE_MONITOR_GRACE_SECONDS after the
# kubelet's last post): the tests that stop a kubelet wait that long.
REAL_ENV = {"GPU_ACCEPTANCE_REPORT_GRACE_SECONDS": "60", "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "3",
            "GPU_ACCEPTANCE_NODE_LOST_GRACE_SECONDS": "5"}


def cluster_of(nodes: int) -> Iterator[tuple[ApiServer, list[str], Controllers]]:
    """A dev cluster of its own with `nodes` fake GPU nodes (for a module-scoped fixture)."""
    server = ApiServer()
    server.start()
    controllers = Controllers(server)
    try:
        server.install_crds([*backend_crd_paths(), AT_CRD])
        controllers.start()
        yield server, controllers.add_gpu_nodes(nodes), controllers
    finally:
        controllers.stop()
        server.stop()


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[tuple[ApiServer, list[str], Controllers]]:
    yield from cluster_of(dev_nodes())


def operator_in_new_namespace(real_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator,
                              env: dict[str, str], labels: dict[str, str] | None = None) -> Cluster:
    server, _, _ = real_cluster
    namespace = server.create_namespace(f"real-{uuid.uuid4().hex[:6]}", labels=labels)
    proc = start_operator(server.kubeconfig, [namespace], env)
    return Cluster(server, namespace, proc.log_tail)


@pytest.fixture
def real(real_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator) -> Cluster:
    return operator_in_new_namespace(real_cluster, start_operator, REAL_ENV)


@pytest.fixture
def real_quick(real_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator) -> Cluster:
    """An operator that waits only briefly for a report after a job failed (no workload writes one here)."""
    return operator_in_new_namespace(real_cluster, start_operator,
                                     {**REAL_ENV, "GPU_ACCEPTANCE_REPORT_GRACE_SECONDS": "3"})


def run_pods(cluster: Cluster, name: str) -> list[dict]:
    selector = f"gpu-acceptance.io/test%3D{name},gpu-acceptance.io/generation%3D1"
    return cluster.server.request("GET", f"/api/v1/namespaces/{cluster.ns}/pods?labelSelector={selector}")["items"]


def running_pods(cluster: Cluster, name: str, count: int, role: str | None = None) -> list[dict]:
    """The run's `count` pods (of `role`: gpu, launcher) once each is bound to a node and Running (kwok keeps them
    so until they exit)."""
    def placed() -> list[dict] | None:
        pods = [p for p in run_pods(cluster, name) if role is None or p["metadata"]["labels"].get(LABEL_ROLE) == role]
        bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")
                 and (p.get("status") or {}).get("phase") == "Running"]
        return pods if len(pods) == count and len(bound) == count else None

    return cluster.wait(placed, f"the {count} pods of {name}, bound by the scheduler and run by kwok", timeout=120)


def test_job_runs_one_pod_per_fake_gpu_node(real: Cluster, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, controllers = real_cluster
    real.create_test("accept", {"backend": "Job", "nodes": 2})
    pods = running_pods(real, "accept", 2)
    real.wait_phase("accept", "Running", timeout=60)  # the pods run until their processes exit
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert len(set(nodes)) == 2 and set(nodes) <= set(gpu_nodes)  # one per node, on the fake GPU nodes
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Job", "accept-g1")  # made by the real Job controller
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(GPUS_PER_NODE)
    real.write_report("accept", report(1, nodes=tuple(nodes)), place_pods=False)
    status = real.wait_phase("accept", "Succeeded", timeout=120)
    assert status["summary"]["failedNodes"] == []
    controllers.exit_pods(pods, 0)  # then the workload exits, and kwok reports the containers Completed
    # The Job controller completes the Job once its pods have succeeded.
    real.wait(lambda: any(c["type"] == "Complete" and c["status"] == "True"
                          for c in (real.job("Job", "accept-g1") or {}).get("status", {}).get("conditions", [])),
              "the Job controller to mark accept-g1 Complete", timeout=120)


@pytest.mark.parametrize("backend", ["Job", "JobSet", pytest.param("PyTorchJob", marks=pytest.mark.slow)])
def test_pod_labels_annotations_and_runtime_class_reach_the_real_pods(
        real: Cluster, real_cluster: tuple[ApiServer, list[str], Controllers], backend: str,
        request: pytest.FixtureRequest):
    """spec.pod's metadata and runtime class on the pods the backend's real controllers make (the RuntimeClass
    admission plugin refuses a pod naming a missing class: the administrator's object, made here)."""
    server, _, controllers = real_cluster
    controller = {"JobSet": "jobset_controller", "PyTorchJob": "training_operator"}.get(backend)
    if controller:
        controllers = request.getfixturevalue(controller)
    server.kubectl("apply", "-f", "-", input='{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", '
                   '"metadata": {"name": "nvidia"}, "handler": "nvidia"}')
    annotations = {"k8s.v1.cni.cncf.io/networks": "ipoib-network", "networking.gke.io/default-interface": "eth0"}
    name = f"meta-{backend.lower()}"
    real.create_test(name, {"backend": backend, "nodes": 2, "pod": {
        "labels": {"team": "gpu-platform"}, "annotations": annotations, "runtimeClassName": "nvidia"}})
    pods = running_pods(real, name, 2)
    for pod in pods:
        assert pod["metadata"]["labels"]["team"] == "gpu-platform"
        assert pod["metadata"]["labels"]["gpu-acceptance.io/test"] == name
        assert annotations.items() <= pod["metadata"]["annotations"].items()
        assert pod["spec"]["runtimeClassName"] == "nvidia"
    nodes = tuple(sorted(p["spec"]["nodeName"] for p in pods))
    real.write_report(name, report(1, nodes=nodes), place_pods=False)
    real.wait_phase(name, "Succeeded", timeout=120)
    controllers.exit_pods(pods, 0)


def test_unschedulable_quotes_the_real_scheduler(real: Cluster,
                                                 real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, _ = real_cluster
    real.create_test("greedy", {"backend": "Job", "nodes": 1, "gpusPerNode": 16})
    status = real.wait_phase("greedy", "Failed", timeout=120)
    succeeded = real.condition("greedy", "Succeeded")
    assert succeeded["reason"] == "Unschedulable"
    # The scheduler's own words, then what to do.
    assert f"0/{len(gpu_nodes)} nodes are available: {len(gpu_nodes)} Insufficient nvidia.com/gpu" in \
        succeeded["message"]
    assert "no node has 16 free nvidia.com/gpu" in succeeded["message"]
    assert status["summary"]["result"] == "Failed"
    real.wait(lambda: real.job("Job", "greedy-g1") is None, "the unschedulable Job to be deleted")


def test_a_node_going_not_ready_mid_run_is_named(real: Cluster, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, _, controllers = real_cluster
    real.create_test("lost", {"backend": "Job", "nodes": 2})
    pods = running_pods(real, "lost", 2)
    victim = sorted(p["spec"]["nodeName"] for p in pods)[1]
    controllers.stop_kubelet(victim)
    try:
        # Its kubelet (kwok) stops reporting; the real node lifecycle controller marks it Unknown, taints it and
        # marks its pods not Ready; the operator names it.
        status = real.wait_phase("lost", "Failed", timeout=120)
        succeeded = real.condition("lost", "Succeeded")
        assert succeeded["reason"] == "NodeNotReady"
        assert f"node {victim} is not Ready (Ready=Unknown, NodeStatusUnknown: Kubelet stopped posting node " \
            "status.) while pod lost-g1-" in succeeded["message"]
        assert status["summary"]["failedNodes"] == [victim]  # only the lost node, not its healthy peer
        real.wait(lambda: real.job("Job", "lost-g1") is None, "the run's Job to be deleted (its GPUs freed)")
    finally:
        controllers.start_kubelet(victim)


def test_a_pod_deleted_mid_run_fails_the_run(real_quick: Cluster):
    real = real_quick
    real.create_test("evicted", {"backend": "Job", "nodes": 2})
    pods = running_pods(real, "evicted", 2)
    victim = sorted(pods, key=lambda p: p["metadata"]["name"])[1]["metadata"]["name"]
    real.server.request("DELETE", f"/api/v1/namespaces/{real.ns}/pods/{victim}")
    # The kubelet (kwok) stops the container (SIGTERM, 143); the Job's pod failure policy fails the Job.
    status = real.wait_phase("evicted", "Failed", timeout=180)
    succeeded = real.condition("evicted", "Succeeded")
    assert succeeded["reason"] == "JobFailed", succeeded
    assert "Job evicted-g1 failed" in succeeded["message"], succeeded["message"]
    # The pod is gone by now; the operator kept its last state, so the verdict names it and its node.
    victim_node = next(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] == victim)
    assert f"pod {victim} on node {victim_node}" in succeeded["message"], succeeded["message"]
    assert "code 143" in succeeded["message"], succeeded["message"]
    assert status["summary"]["result"] == "Failed"


@pytest.fixture(scope="module")
def jobset_controller(real_cluster: tuple[ApiServer, list[str], Controllers]) -> Controllers:
    """The real JobSet controller (sigs.k8s.io/jobset at the pinned CRD's version, `make tools` builds it) with its
    webhooks, in the module's cluster."""
    _, _, controllers = real_cluster
    return controllers.start_jobset()


def jobset_run(cluster: Cluster, name: str) -> tuple[list[dict], tuple[str, ...]]:
    """A two-node JobSet run up to Running: the JobSet controller's Job, the Job controller's pods on two nodes."""
    cluster.create_test(name, {"backend": "JobSet", "nodes": 2})
    pods = running_pods(cluster, name, 2)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "Job" and owner["name"].startswith(f"{name}-g1-")  # the JobSet controller's Job
        assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == f"{name}-g1"
    nodes = tuple(sorted(p["spec"]["nodeName"] for p in pods))
    assert len(set(nodes)) == 2
    cluster.wait_phase(name, "Running", timeout=60)
    return pods, nodes


def jobset_condition(cluster: Cluster, name: str, type_: str) -> bool:
    jobset = cluster.job("JobSet", name) or {}
    return any(c["type"] == type_ and c["status"] == "True" for c in jobset.get("status", {}).get("conditions", []))


def test_jobset_passes_through_the_real_jobset_controller(real: Cluster, jobset_controller: Controllers):
    pods, nodes = jobset_run(real, "set")
    real.write_report("set", report(1, nodes=nodes), place_pods=False)
    jobset_controller.exit_pods(pods, 0)
    real.wait(lambda: jobset_condition(real, "set-g1", "Completed"), "the JobSet controller to complete set-g1",
              timeout=120)
    status = real.wait_phase("set", "Succeeded", timeout=120)
    assert status["summary"]["result"] == "Passed" and status["summary"]["failedNodes"] == []
    assert real.condition("set", "Succeeded")["reason"] == "ChecksPassed"


def test_jobset_fails_through_the_real_jobset_controller(real: Cluster, jobset_controller: Controllers):
    pods, nodes = jobset_run(real, "badset")
    real.write_report("badset", report(1, nodes=nodes, failed_node=nodes[1]), place_pods=False)
    jobset_controller.exit_pods(pods, 1)  # the workload exits 1 when a check failed
    real.wait(lambda: jobset_condition(real, "badset-g1", "Failed"), "the JobSet controller to fail badset-g1",
              timeout=120)
    status = real.wait_phase("badset", "Failed", timeout=120)
    assert status["summary"]["failedNodes"] == [nodes[1]]
    succeeded = real.condition("badset", "Succeeded")
    assert succeeded["reason"] == "ChecksFailed"
    assert f"preflight/gpu_count on {nodes[1]}: 7 < 8 GPUs" in succeeded["message"]


# --------------------------------------------------------------------------- Kubeflow: PyTorchJob and MPIJob


@pytest.fixture(scope="module")
def training_operator(real_cluster: tuple[ApiServer, list[str], Controllers]) -> Controllers:
    """The real Kubeflow training-operator v1 (PyTorchJob only), in the module's cluster."""
    _, _, controllers = real_cluster
    return controllers.start_training_operator()


@pytest.fixture(scope="module")
def mpi_operator(real_cluster: tuple[ApiServer, list[str], Controllers]) -> Controllers:
    """The real Kubeflow mpi-operator (v2beta1), in the module's cluster."""
    _, _, controllers = real_cluster
    return controllers.start_mpi_operator()


def kubeflow_condition(cluster: Cluster, kind: str, name: str, type_: str) -> bool:
    job = cluster.job(kind, name) or {}
    return any(c["type"] == type_ and c["status"] == "True" for c in job.get("status", {}).get("conditions", []))


def pytorchjob_run(cluster: Cluster, name: str, gpu_nodes: list[str]) -> tuple[list[dict], dict[str, str]]:
    """A two-node PyTorchJob run up to Running: the training-operator's master and worker pods, one per node.
    Returns the pods and the node of each replica (master, worker)."""
    cluster.create_test(name, {"backend": "PyTorchJob", "nodes": 2})
    pods = running_pods(cluster, name, 2)
    where = {}
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("PyTorchJob", f"{name}-g1")  # made by the training-operator
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(GPUS_PER_NODE)
        where[pod["metadata"]["labels"]["training.kubeflow.org/replica-type"]] = pod["spec"]["nodeName"]
    assert sorted(where) == ["master", "worker"]
    assert len(set(where.values())) == 2 and set(where.values()) <= set(gpu_nodes)  # one per fake GPU node
    cluster.wait_phase(name, "Running", timeout=60)
    return pods, where


@pytest.mark.slow
def test_pytorchjob_passes_through_the_real_training_operator(
        real: Cluster, training_operator: Controllers, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, _ = real_cluster
    pods, where = pytorchjob_run(real, "torch", gpu_nodes)
    # The training-operator's own contract with the pods: rendezvous on the master's Service.
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["PET_MASTER_ADDR"] == "torch-g1-master-0" and env["PET_NNODES"] == "2"
    real.write_report("torch", report(1, nodes=tuple(sorted(where.values()))), place_pods=False)
    training_operator.exit_pods(pods, 0)
    real.wait(lambda: kubeflow_condition(real, "PyTorchJob", "torch-g1", "Succeeded"),
              "the training-operator to mark torch-g1 Succeeded", timeout=120)
    status = real.wait_phase("torch", "Succeeded", timeout=120)
    assert status["summary"]["result"] == "Passed" and status["summary"]["failedNodes"] == []
    assert real.condition("torch", "Succeeded")["reason"] == "ChecksPassed"


@pytest.mark.slow
def test_pytorchjob_node_going_not_ready_is_named(
        real: Cluster, training_operator: Controllers, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, controllers = real_cluster
    _, where = pytorchjob_run(real, "torchlost", gpu_nodes)
    victim = where["worker"]
    controllers.stop_kubelet(victim)
    try:
        status = real.wait_phase("torchlost", "Failed", timeout=120)
        succeeded = real.condition("torchlost", "Succeeded")
        assert succeeded["reason"] == "NodeNotReady"
        assert f"node {victim} is not Ready (Ready=Unknown" in succeeded["message"]
        assert "while pod torchlost-g1-worker-0 ran on it" in succeeded["message"], succeeded["message"]
        assert status["summary"]["failedNodes"] == [victim]  # not the master's healthy node
        real.wait(lambda: real.job("PyTorchJob", "torchlost-g1") is None, "the PyTorchJob to be deleted")
    finally:
        controllers.start_kubelet(victim)


@pytest.mark.slow
def test_pytorchjob_unschedulable_quotes_the_real_scheduler(
        real: Cluster, training_operator: Controllers, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, _ = real_cluster
    real.create_test("torchgreedy", {"backend": "PyTorchJob", "nodes": 1, "gpusPerNode": 16})
    real.wait_phase("torchgreedy", "Failed", timeout=120)
    succeeded = real.condition("torchgreedy", "Succeeded")
    assert succeeded["reason"] == "Unschedulable"
    assert "pod torchgreedy-g1-master-0 has been Pending" in succeeded["message"], succeeded["message"]
    assert f"0/{len(gpu_nodes)} nodes are available: {len(gpu_nodes)} Insufficient nvidia.com/gpu" in \
        succeeded["message"]
    real.wait(lambda: real.job("PyTorchJob", "torchgreedy-g1") is None, "the unschedulable PyTorchJob to be deleted")


def mpijob_run(cluster: Cluster, name: str, gpu_nodes: list[str]) -> tuple[list[dict], dict]:
    """A two-node MPIJob run up to Running: the mpi-operator's workers, one per GPU node, then (once they are
    Ready: launcherCreationPolicy WaitForWorkersReady) its launcher Job's pod, which asks for no GPU."""
    cluster.create_test(name, {"backend": "MPIJob", "nodes": 2})
    workers = running_pods(cluster, name, 2, role="gpu")
    for pod in workers:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("MPIJob", f"{name}-g1")  # made by the mpi-operator
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(GPUS_PER_NODE)
    nodes = {p["spec"]["nodeName"] for p in workers}
    assert len(nodes) == 2 and nodes <= set(gpu_nodes)
    (launcher,) = running_pods(cluster, name, 1, role="launcher")
    (owner,) = launcher["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Job", f"{name}-g1-launcher")  # the launcher Job's pod
    assert "nvidia.com/gpu" not in str(launcher["spec"]["containers"][0].get("resources"))
    cluster.wait_phase(name, "Running", timeout=60)
    return sorted(workers, key=lambda p: p["metadata"]["name"]), launcher


@pytest.mark.slow
def test_mpijob_passes_through_the_real_mpi_operator(
        real: Cluster, mpi_operator: Controllers, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, _ = real_cluster
    workers, launcher = mpijob_run(real, "mpi", gpu_nodes)
    nodes = tuple(sorted(p["spec"]["nodeName"] for p in workers))
    real.write_report("mpi", report(1, nodes=nodes), place_pods=False)
    mpi_operator.exit_pods([launcher], 0)  # mpirun ends; the workers' sshd runs until the mpi-operator stops it
    real.wait(lambda: kubeflow_condition(real, "MPIJob", "mpi-g1", "Succeeded"),
              "the mpi-operator to mark mpi-g1 Succeeded", timeout=120)
    status = real.wait_phase("mpi", "Succeeded", timeout=120)
    assert status["summary"]["result"] == "Passed" and status["summary"]["failedNodes"] == []
    assert real.condition("mpi", "Succeeded")["reason"] == "ChecksPassed"


@pytest.mark.slow
def test_mpijob_worker_failing_is_named_not_the_launcher(
        real_quick: Cluster, mpi_operator: Controllers, real_cluster: tuple[ApiServer, list[str], Controllers]):
    _, gpu_nodes, _ = real_cluster
    real = real_quick
    workers, launcher = mpijob_run(real, "mpibad", gpu_nodes)
    victim = workers[1]
    mpi_operator.exit_pods([victim], 1)  # a rank's process dies on that node ...
    real.wait(lambda: real.server.request("GET", f"/api/v1/namespaces/{real.ns}/pods/{victim['metadata']['name']}")
              ["status"]["phase"] == "Failed", "the worker pod to fail")
    time.sleep(1.1)  # container end times have whole seconds: the rank's death comes strictly first
    mpi_operator.exit_pods([launcher], 1)  # ... so mpirun exits with an error (then the other worker is stopped)
    real.wait(lambda: kubeflow_condition(real, "MPIJob", "mpibad-g1", "Failed"),
              "the mpi-operator to fail mpibad-g1", timeout=120)
    status = real.wait_phase("mpibad", "Failed", timeout=120)
    succeeded = real.condition("mpibad", "Succeeded")
    assert succeeded["reason"] == "JobFailed", succeeded
    # The rank that died, not mpirun, which failed because of it.
    assert f"MPIJob mpibad-g1 failed: pod {victim['metadata']['name']} on node {victim['spec']['nodeName']}: " \
        "container worker exited with code 1" in succeeded["message"], succeeded["message"]
    # Blamed: the failed worker's node only; the launcher's node (no GPU under test) and the healthy worker's are not.
    assert status["summary"]["failedNodes"] == [victim["spec"]["nodeName"]], (status["summary"], succeeded)


# --------------------------------------------------------------------------- a backend's controller not running


@pytest.mark.slow
def test_a_stopped_training_operator_is_named(real: Cluster, training_operator: Controllers):
    """The PyTorchJob is created (no webhook stands in the way) but gets no status and no pods: after the grace the
    test fails saying which controller does not run, instead of staying Pending until its timeout."""
    training_operator.stop_one(TRAINING_OPERATOR)
    try:
        real.create_test("orphan", {"backend": "PyTorchJob", "nodes": 1})
        status = real.wait_phase("orphan", "Failed", timeout=60)
        succeeded = real.condition("orphan", "Succeeded")
        assert succeeded["reason"] == "BackendNotRunning", succeeded
        assert succeeded["message"].startswith("PyTorchJob orphan-g1 has no status and no pods "), succeeded["message"]
        assert f"the Kubeflow training-operator is not running, or does not watch namespace {real.ns}" in \
            succeeded["message"]
        assert status["summary"]["result"] == "Failed"
        real.wait(lambda: real.job("PyTorchJob", "orphan-g1") is None, "the orphaned PyTorchJob to be deleted")
    finally:
        training_operator.start_training_operator()


@pytest.mark.slow
def test_a_stopped_jobset_controller_is_named(jobset_controller: Controllers,
                                              real_cluster: tuple[ApiServer, list[str], Controllers],
                                              start_operator: StartOperator):
    """Its admission webhooks (failurePolicy Fail) do not answer, so the API server refuses the JobSet: the test is
    Pending with the API server's words while the operator retries, then Failed, both as BackendNotRunning."""
    real = operator_in_new_namespace(real_cluster, start_operator,
                                     {**REAL_ENV, "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "8"})
    jobset_controller.stop_one(JOBSET)
    try:
        real.create_test("noset", {"backend": "JobSet", "nodes": 1})
        real.wait_phase("noset", "Pending", timeout=30)
        created = real.condition("noset", "JobCreated")
        assert (created["status"], created["reason"]) == ("False", "BackendNotRunning"), created
        assert created["message"].startswith('the API server refused JobSet noset-g1: Internal error occurred: failed '
                                             'calling webhook "mjobset.kb.io"'), created["message"]
        assert "the JobSet controller serves that admission webhook and is not running" in created["message"]
        assert "retrying for up to 8s" in created["message"]
        real.wait_phase("noset", "Failed", timeout=60)
        succeeded = real.condition("noset", "Succeeded")
        assert succeeded["reason"] == "BackendNotRunning", succeeded
        assert "refused for " in succeeded["message"] and "mjobset.kb.io" in succeeded["message"]
        assert real.job("JobSet", "noset-g1") is None
    finally:
        jobset_controller.start_jobset()


# --------------------------------------------------------------------------- a node lost before scheduling; deadlines


@pytest.mark.slow
def test_a_not_ready_node_leaves_a_pod_unschedulable(real: Cluster, training_operator: Controllers,
                                                     real_cluster: tuple[ApiServer, list[str], Controllers]):
    """A node that stopped reporting before the run is tainted by the node lifecycle controller: the run's last pod
    cannot be placed, and the scheduler's words say why; the hint says the node is down (not: tolerate it)."""
    _, gpu_nodes, controllers = real_cluster
    victim = gpu_nodes[-1]
    controllers.stop_kubelet(victim)
    try:
        real.wait(lambda: any(t["key"] == "node.kubernetes.io/unreachable" and t["effect"] == "NoSchedule" for t in
                              real.server.request("GET", f"/api/v1/nodes/{victim}")["spec"].get("taints") or []),
                  f"the node lifecycle controller to taint {victim} unreachable", timeout=60)
        real.create_test("short", {"backend": "PyTorchJob", "nodes": len(gpu_nodes)})
        status = real.wait_phase("short", "Failed", timeout=120)
        succeeded = real.condition("short", "Succeeded")
        assert succeeded["reason"] == "Unschedulable", succeeded
        assert "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }" in succeeded["message"], \
            succeeded["message"]
        assert "1 node(s) are not Ready (their kubelet stopped reporting, or the node is down)" in succeeded["message"]
        assert "spec.placement.tolerations" not in succeeded["message"]
        # The other pods ran on the healthy nodes; none on the lost one.
        assert victim not in {p["spec"].get("nodeName") for p in run_pods(real, "short")}
        assert status["summary"]["result"] == "Failed"
        real.wait(lambda: real.job("PyTorchJob", "short-g1") is None, "the PyTorchJob to be deleted")
    finally:
        controllers.start_kubelet(victim)


@pytest.mark.slow
def test_a_jobset_ended_by_its_own_deadline_is_a_timeout(jobset_controller: Controllers,
                                                         real_cluster: tuple[ApiServer, list[str], Controllers],
                                                         start_operator: StartOperator):
    """The operator is away when spec.timeoutSeconds passes, so the JobSet's Job hits its activeDeadlineSeconds and
    the JobSet controller fails the set in its own words (its Job failed): back, the operator calls it a Timeout
    and blames no node for the pods the deadline stopped."""
    server, _, _ = real_cluster
    namespace = server.create_namespace(f"real-{uuid.uuid4().hex[:6]}")
    proc = start_operator(server.kubeconfig, [namespace], {**REAL_ENV, "GPU_ACCEPTANCE_REPORT_GRACE_SECONDS": "3"})
    real = Cluster(server, namespace, proc.log_tail)
    real.create_test("late", {"backend": "JobSet", "nodes": 2, "timeoutSeconds": 60})
    running_pods(real, "late", 2)
    real.wait_phase("late", "Running", timeout=60)
    proc.stop()
    real.wait(lambda: jobset_condition(real, "late-g1", "Failed"), "the JobSet controller to fail late-g1 at its "
              "deadline", timeout=120)
    proc.start()
    status = real.wait_phase("late", "Failed", timeout=60)
    succeeded = real.condition("late", "Succeeded")
    assert succeeded["reason"] == "Timeout", succeeded
    assert succeeded["message"].startswith("JobSet late-g1 was stopped at spec.timeoutSeconds=60: jobset failed"), \
        succeeded["message"]
    assert status["summary"]["failedNodes"] == []
