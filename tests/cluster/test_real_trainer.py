"""TrainJob through the real Kubeflow Trainer v2.3 controller manager (webhooks included) on the real JobSet
controller: the operator's TrainingRuntime and TrainJob -> the Trainer's JobSet -> the JobSet controller's Job -> the
Job controller's pods -> the real scheduler's binding to fake GPU nodes -> pod phases from kwok. The test writes only
what the workload would write (its report); faults come from outside (a pod's process exits, a pod is deleted, the
Trainer is stopped), as in test_real_controllers.py.

A dev cluster of its own (tests/devcluster.py): the Trainer's CRDs and webhooks are cluster-wide.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.apiserver import ApiServer
from tests.cluster.conftest import StartOperator
from tests.cluster.operator_harness import Cluster, report
from tests.cluster.test_real_controllers import REAL_ENV, cluster_of, operator_in_new_namespace, running_pods
from tests.devcluster import GPUS_PER_NODE, TRAINER, Controllers, dev_nodes

Real = tuple[ApiServer, list[str], Controllers]


@pytest.fixture(scope="module")
def trainer_cluster() -> Iterator[Real]:
    """A dev cluster with the Trainer's controller manager and the JobSet controller it is built against running."""
    for server, nodes, controllers in cluster_of(dev_nodes()):
        controllers.start_trainer()
        yield server, nodes, controllers


@pytest.fixture
def real(trainer_cluster: Real, start_operator: StartOperator) -> Cluster:
    return operator_in_new_namespace(trainer_cluster, start_operator, REAL_ENV)


def trainjob_condition(cluster: Cluster, name: str, type_: str) -> bool:
    job = cluster.job("TrainJob", name) or {}
    return any(c["type"] == type_ and c["status"] == "True" for c in job.get("status", {}).get("conditions", []))


def trainjob_run(cluster: Cluster, name: str, gpu_nodes: list[str]) -> tuple[list[dict], tuple[str, ...]]:
    """A two-node TrainJob run up to Running: the Trainer's JobSet, its Job's pods on two nodes, the rendezvous the
    torch plugin set."""
    cluster.create_test(name, {"backend": "TrainJob", "nodes": 2})
    pods = running_pods(cluster, name, 2)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "Job" and owner["name"].startswith(f"{name}-g1-node-")  # the JobSet's Job
        assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == f"{name}-g1"  # the Trainer's JobSet
        (container,) = pod["spec"]["containers"]
        assert container["name"] == "node"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(GPUS_PER_NODE)
        env = {e["name"]: e.get("value") for e in container["env"]}
        # The Trainer's torch plugin's contract with the pods: torchrun's PET_* variables.
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("2", str(GPUS_PER_NODE))
        assert env["PET_MASTER_ADDR"] == f"{name}-g1-node-0-0.{name}-g1", env
    nodes = tuple(sorted(p["spec"]["nodeName"] for p in pods))
    assert len(set(nodes)) == 2 and set(nodes) <= set(gpu_nodes)
    cluster.wait_phase(name, "Running", timeout=60)
    return pods, nodes


def test_trainjob_passes_through_the_real_trainer(real: Cluster, trainer_cluster: Real):
    _, gpu_nodes, controllers = trainer_cluster
    pods, nodes = trainjob_run(real, "train", gpu_nodes)
    assert real.status("train")["backend"] == "TrainJob"
    real.write_report("train", report(1, nodes=nodes), place_pods=False)
    controllers.exit_pods(pods, 0)
    real.wait(lambda: trainjob_condition(real, "train-g1", "Complete"), "the Trainer to complete train-g1",
              timeout=120)
    status = real.wait_phase("train", "Succeeded", timeout=120)
    assert status["summary"]["result"] == "Passed" and status["summary"]["failedNodes"] == []
    assert real.condition("train", "Succeeded")["reason"] == "ChecksPassed"


def test_trainjob_fails_through_the_real_trainer(real: Cluster, trainer_cluster: Real):
    _, gpu_nodes, controllers = trainer_cluster
    pods, nodes = trainjob_run(real, "badtrain", gpu_nodes)
    real.write_report("badtrain", report(1, nodes=nodes, failed_node=nodes[1]), place_pods=False)
    controllers.exit_pods(pods, 1)  # the workload exits 1 when a check failed
    real.wait(lambda: trainjob_condition(real, "badtrain-g1", "Failed"), "the Trainer to fail badtrain-g1",
              timeout=120)
    status = real.wait_phase("badtrain", "Failed", timeout=120)
    assert status["summary"]["failedNodes"] == [nodes[1]]
    succeeded = real.condition("badtrain", "Succeeded")
    assert succeeded["reason"] == "ChecksFailed"
    assert f"preflight/gpu_count on {nodes[1]}: 7 < 8 GPUs" in succeeded["message"]


def test_a_pod_that_cannot_start_quotes_the_real_scheduler(real: Cluster, trainer_cluster: Real):
    _, gpu_nodes, _ = trainer_cluster
    real.create_test("greedy", {"backend": "TrainJob", "nodes": 1, "gpusPerNode": 16})
    real.wait_phase("greedy", "Failed", timeout=120)
    succeeded = real.condition("greedy", "Succeeded")
    assert succeeded["reason"] == "Unschedulable", succeeded
    assert f"0/{len(gpu_nodes)} nodes are available: {len(gpu_nodes)} Insufficient nvidia.com/gpu" in \
        succeeded["message"]
    real.wait(lambda: real.job("TrainJob", "greedy-g1") is None, "the unschedulable TrainJob to be deleted")
    assert real.job("TrainingRuntime", "greedy-g1") is None  # its runtime goes with it


def test_a_stopped_trainer_is_named(trainer_cluster: Real, start_operator: StartOperator):
    """Its admission webhooks (failurePolicy Fail) do not answer, so the API server refuses the run's
    TrainingRuntime: Pending with the API server's words while the operator retries, then Failed, both
    BackendNotRunning."""
    _, _, controllers = trainer_cluster
    real = operator_in_new_namespace(trainer_cluster, start_operator,
                                     {**REAL_ENV, "GPU_ACCEPTANCE_UNSCHEDULABLE_GRACE_SECONDS": "8"})
    controllers.stop_one(TRAINER)
    try:
        real.create_test("notrainer", {"backend": "TrainJob", "nodes": 1})
        real.wait_phase("notrainer", "Pending", timeout=30)
        created = real.condition("notrainer", "JobCreated")
        assert (created["status"], created["reason"]) == ("False", "BackendNotRunning"), created
        assert "failed calling webhook" in created["message"], created["message"]
        assert "the Kubeflow Trainer controller manager serves that admission webhook and is not running" in \
            created["message"]
        real.wait_phase("notrainer", "Failed", timeout=60)
        assert real.condition("notrainer", "Succeeded")["reason"] == "BackendNotRunning"
        assert real.job("TrainJob", "notrainer-g1") is None
    finally:
        controllers.start_trainer()
