"""spec.queueName through the real Kueue controller: a ClusterQueue with quota for one test (8 nvidia.com/gpu), a
LocalQueue, two tests. The second is Queued (Reason Queued, Kueue's own message) while the first runs, longer than
its timeoutSeconds, and is not timed out: its deadlines count from its admission. Once the first ends, Kueue admits
the second, whose pods run and whose report is judged. A queued test changed (a new run) or deleted leaves
no Workload of its queued run.

A cluster of its own (tests/devcluster.py with Kueue, tests/devcluster.Controllers.start_kueue): the Job backend, so
the pods come from the real Job controller once Kueue unsuspends the Job, are bound by the real scheduler to kwok
nodes and run until the test makes their processes exit; a preemption through each backend's own controller
(training-operator, mpi-operator, JobSet). The test writes only what the workload would (its report).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from acceptance_operator.building.backends import BACKENDS
from acceptance_operator.building.manifests import ROLE_GPU, ROLE_LAUNCHER
from acceptance_operator.building.queueing import JOB_UID_LABEL, QUEUE_LABEL, suspended

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, report
from tests.cluster.test_real_controllers import REAL_ENV, cluster_of, operator_in_new_namespace, run_pods, running_pods
from tests.devcluster import Controllers

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta1"
QUEUE = "gpu-queue"


@pytest.fixture(scope="module")
def kueue_cluster() -> Iterator[tuple[ApiServer, list[str], Controllers]]:
    for server, nodes, controllers in cluster_of(2):
        started = time.monotonic()
        controllers.start_kueue()
        print(f"kueue started in {time.monotonic() - started:.1f}s")
        server.request("POST", f"{KUEUE_API}/resourceflavors",
                       {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                        "metadata": {"name": "default"}})
        yield server, nodes, controllers


@pytest.fixture
def queued(kueue_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator) -> Cluster:
    """An operator in a new namespace whose LocalQueue QUEUE feeds a ClusterQueue of its own: 8 GPUs, one test."""
    return queue_for_one_test(kueue_cluster, start_operator)


@pytest.fixture
def preempting(kueue_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator) -> Cluster:
    """As `queued`, whose ClusterQueue lets a workload of a higher priority preempt a lower one."""
    return queue_for_one_test(kueue_cluster, start_operator, {"withinClusterQueue": "LowerPriority"})


def queue_for_one_test(kueue_cluster: tuple[ApiServer, list[str], Controllers], start_operator: StartOperator,
                       preemption: dict | None = None) -> Cluster:
    cluster = operator_in_new_namespace(kueue_cluster, start_operator, REAL_ENV)
    server, name = cluster.server, f"cq-{uuid.uuid4().hex[:6]}"
    quota = [{"name": "cpu", "nominalQuota": "100"}, {"name": "memory", "nominalQuota": "1Ti"},
             {"name": "nvidia.com/gpu", "nominalQuota": "8"}]
    server.request("POST", f"{KUEUE_API}/clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cluster.ns}},
                 "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                     "flavors": [{"name": "default", "resources": quota}]}],
                 **({"preemption": preemption} if preemption else {})}})
    server.request("POST", f"{KUEUE_API}/namespaces/{cluster.ns}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": QUEUE},
        "spec": {"clusterQueue": name}})
    cluster.wait(lambda: _active(server, name), f"ClusterQueue {name} to be Active", timeout=60)
    return cluster


def _active(server: ApiServer, name: str) -> bool:
    queue = server.request("GET", f"{KUEUE_API}/clusterqueues/{name}")
    return any(c["type"] == "Active" and c["status"] == "True" for c in (queue.get("status") or {}).get("conditions")
               or [])


def workloads_of(cluster: Cluster, job: dict) -> list[dict]:
    selector = f"{JOB_UID_LABEL}%3D{job['metadata']['uid']}"
    return cluster.server.request("GET", f"{KUEUE_API}/namespaces/{cluster.ns}/workloads?labelSelector={selector}"
                                  )["items"]


def wait_queued(cluster: Cluster, name: str) -> dict:
    """The test's Succeeded condition once it says Queued (Pending), with Kueue's reason for the wait."""
    def probe() -> dict | None:
        c = next((c for c in cluster.status(name).get("conditions") or [] if c["type"] == "Succeeded"), None)
        return c if c and c.get("reason") == "Queued" and "insufficient unused quota" in c.get("message", "") \
            else None

    try:
        return cluster.wait(probe, f"{name} to be Queued with Kueue's quota message", timeout=90)
    except AssertionError as e:
        raise AssertionError(f"{name}'s status: {cluster.status(name)}") from e


def finish(cluster: Cluster, controllers: Controllers, name: str, backend: str = "Job") -> None:
    """The run's workload: its report for the node its GPU pod runs on, then its processes exit 0 (an MPIJob's
    launcher too: mpirun ends, and the mpi-operator stops the workers' sshd)."""
    pods = running_pods(cluster, name, 1, role=ROLE_GPU)
    cluster.write_report(name, report(1, nodes=tuple(p["spec"]["nodeName"] for p in pods)), place_pods=False)
    assert cluster.wait_phase(name, "Succeeded", timeout=120)["summary"]["failedNodes"] == []
    launchers = running_pods(cluster, name, 1, role=ROLE_LAUNCHER) if backend == "MPIJob" else []
    controllers.exit_pods(pods + launchers, 0)


def test_second_test_waits_queued_past_its_timeout_then_runs_and_is_judged(
        queued: Cluster, kueue_cluster: tuple[ApiServer, list[str], Controllers]):
    _, _, controllers = kueue_cluster
    spec = {"backend": "Job", "nodes": 1, "queueName": QUEUE}
    queued.create_test("first", spec)
    running_pods(queued, "first", 1)  # admitted at once: the quota is free
    first_job = queued.job("Job", "first-g1")
    assert first_job["metadata"]["labels"][QUEUE_LABEL] == QUEUE and first_job["spec"]["suspend"] is False
    (workload,) = workloads_of(queued, first_job)
    assert any(c["type"] == "Admitted" and c["status"] == "True" for c in workload["status"]["conditions"])

    queued.create_test("second", {**spec, "timeoutSeconds": 60})
    waiting = wait_queued(queued, "second")
    queued_at = time.monotonic()
    assert queued.status("second")["phase"] == "Pending"
    running = queued.condition("second", "Running")
    assert (running["status"], running["reason"], running["message"]) == ("Unknown", "Queued", waiting["message"])
    assert {r["NAME"]: r["REASON"] for r in queued.kubectl_table()}["second"] == "Queued"  # the Reason column
    assert "Job second-g1 waits in" in waiting["message"] and "not admitted yet" in waiting["message"]
    second_job = queued.job("Job", "second-g1")
    assert second_job["spec"]["suspend"] is True and second_job["metadata"]["labels"][QUEUE_LABEL] == QUEUE

    # The first run holds the quota longer than the second's timeoutSeconds: the second stays Queued, not Failed.
    while time.monotonic() - queued_at < 65:
        status = queued.status("second")
        assert status["phase"] == "Pending" and queued.condition("second", "Succeeded")["reason"] == "Queued", status
        time.sleep(2)
    finish(queued, controllers, "first")  # the first run is judged, its pods exit, its Job completes

    # Kueue admits the second once the first's Job completed and gave its quota back; its run is judged.
    finish(queued, controllers, "second")
    second = queued.status("second")
    assert queued.condition("second", "Succeeded")["reason"] == "ChecksPassed" and second["phase"] == "Succeeded"
    (workload,) = workloads_of(queued, queued.job("Job", "second-g1"))
    assert any(c["type"] == "Admitted" and c["status"] == "True" for c in workload["status"]["conditions"])


def test_a_queued_test_changed_or_deleted_leaves_no_workload(queued: Cluster,
                                                             kueue_cluster: tuple[ApiServer, list[str], Controllers]):
    spec = {"backend": "Job", "nodes": 1, "queueName": QUEUE}
    queued.create_test("holder", spec)
    running_pods(queued, "holder", 1)
    queued.create_test("waiter", spec)
    wait_queued(queued, "waiter")
    first = queued.job("Job", "waiter-g1")
    assert len(workloads_of(queued, first)) == 1
    # A new generation runs the test again: the queued run's Job goes, and its Workload with it; the new run queues.
    queued.patch_spec("waiter", {"timeoutSeconds": 1200})
    queued.wait(lambda: queued.job("Job", "waiter-g1") is None and not workloads_of(queued, first),
                "the first run's Job and its Workload to be deleted", timeout=60)
    second = queued.wait_job("Job", "waiter-g2")
    queued.wait(lambda: len(workloads_of(queued, second)) == 1, "the new run's Workload", timeout=60)
    queued.delete_test("waiter")
    queued.wait(lambda: queued.job("Job", "waiter-g2") is None and not workloads_of(queued, second),
                "the queued test's Job and its Workload to be deleted", timeout=60)


def priority_class(server: ApiServer, name: str, value: int) -> str:
    server.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                   {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                    "value": value}, expect=(201, 409))
    return name


# The controller each backend needs beside Kubernetes' own (tests/devcluster.Controllers), started once a module.
BACKEND_CONTROLLERS = {"Job": None, "PyTorchJob": "start_training_operator", "MPIJob": "start_mpi_operator",
                       "JobSet": "start_jobset"}


@pytest.fixture(scope="module")
def start_backend(kueue_cluster: tuple[ApiServer, list[str], Controllers]) -> Callable[[str], None]:
    _, _, controllers = kueue_cluster
    started: set[str] = set()

    def start(backend: str) -> None:
        method = BACKEND_CONTROLLERS[backend]
        if method and method not in started:
            getattr(controllers, method)()
            started.add(method)

    return start


@pytest.mark.parametrize("backend", list(BACKEND_CONTROLLERS))
def test_a_run_kueue_preempts_is_queued_again_blames_no_node_and_is_judged_once_readmitted(
        preempting: Cluster, kueue_cluster: tuple[ApiServer, list[str], Controllers],
        start_backend: Callable[[str], None], backend: str):
    """Kueue takes the running test's admission back for a test of a higher priority (placement.priorityClassName,
    which Kueue reads from the pod template): the job is suspended and its pods deleted, by each backend's own
    controller. That is the queue's doing, not the node's: the run is Queued again (Kueue's preemption message),
    never Failed, names no node, and once the other test is done and the quota free again it is admitted anew,
    runs and is judged."""
    start_backend(backend)
    server, _, controllers = kueue_cluster
    low, high = priority_class(server, "acceptance-low", 100), priority_class(server, "acceptance-high", 1000)
    spec = {"backend": backend, "nodes": 1, "queueName": QUEUE}
    preempting.create_test("routine", {**spec, "placement": {"priorityClassName": low}})
    first_pods = running_pods(preempting, "routine", 1, role=ROLE_GPU)
    preempting.wait_phase("routine", "Running", timeout=60)

    preempting.create_test("urgent", {**spec, "placement": {"priorityClassName": high}})
    running_pods(preempting, "urgent", 1, role=ROLE_GPU)  # admitted once the routine run gave its quota back

    def queued_again() -> dict | None:
        c = next((c for c in preempting.status("routine").get("conditions") or [] if c["type"] == "Succeeded"), None)
        return c if c and c.get("reason") == "Queued" else None

    try:
        preempting.wait(queued_again, "the preempted run to be Queued again", timeout=90)
    except AssertionError as e:
        raise AssertionError(f"routine's status: {preempting.status('routine')}") from e
    gone = {p["metadata"]["name"] for p in first_pods}
    preempting.wait(lambda: not gone & {p["metadata"]["name"] for p in run_pods(preempting, "routine")},
                    "the preempted run's pods to be deleted", timeout=60)
    status = preempting.status("routine")
    assert status["phase"] == "Pending" and not (status.get("summary") or {}).get("failedNodes"), status
    # Two ways out of a preemption, both Kueue's doing: the Job stays suspended until Kueue admits it again, or its
    # controller failed it on its stopped pods' exit codes and the run goes on as a new attempt (event Preempted).
    preempted = [m for _, r, m in preempting.events("routine") if r == "Preempted"]
    print(f"the preempted {backend} {'failed: a new attempt' if preempted else 'stayed suspended'}")
    assert suspended(preempting.job(backend, "routine-g1"), BACKENDS[backend].suspend)  # left as Kueue stopped it
    if preempted:
        assert status["run"] == {"id": "g1-r2", "generation": 1, "attempt": 2, "trigger": "preempted"}, status["run"]
        assert f"{backend} routine-g1 was preempted by Kueue" in preempted[0], preempted
        assert "not a verdict on any node" in preempted[0], preempted
    else:
        assert "waits in" in preempting.condition("routine", "Succeeded")["message"]
    assert not [r for _, r, _ in preempting.events("routine") if "Fail" in r], preempting.events("routine")

    finish(preempting, controllers, "urgent", backend)
    finish(preempting, controllers, "routine", backend)  # admitted anew: new pods, its report judged
    status = preempting.status("routine")
    assert status["phase"] == "Succeeded" and preempting.condition("routine", "Succeeded")["reason"] == "ChecksPassed"
    assert [h["result"] for h in status.get("history") or []] == ["Passed"]  # one run, preempted once, judged once
