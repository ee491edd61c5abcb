"""A cpu-smoke TrainJob reaches SmokePassed on the real node under the real Kubeflow Trainer v2.3 controller manager
(started on this node's control plane for this module with its webhooks, tests/devcluster.Controllers.start_trainer,
on the JobSet v0.12 it is built against, which replaces the node's JobSet CRD and controller from then on): the
chart's operator (its image, from the node's registry; its ClusterRole lists TrainJobs and TrainingRuntimes)
creates the run's TrainingRuntime and TrainJob, the Trainer's torch plugin sets torchrun's rendezvous, the real
kubelet runs the workload image, and rank 0 delivers the report. A second test with no spec.backend on this node
(which serves the training-operator) still runs as a PyTorchJob.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.operator_harness import wait_for
from tests.devcluster import Controllers
from tests.e2e.test_real_node import (
    RUN_TIMEOUT,
    apply,
    assert_smoke_passed,
    container_exited,
    exit_code,
    get_json,
    smoke_test,
    the_gpu_pod,
)
from tests.realnode import RealNode, chart_version

pytestmark = pytest.mark.timeout(600, func_only=True)


@pytest.fixture(scope="module")
def trainer_node(operator_release: RealNode) -> RealNode:
    assert operator_release.server is not None
    started = time.monotonic()
    Controllers(operator_release.server, detached=True).start_trainer()
    print(f"the Trainer controller manager started in {time.monotonic() - started:.1f}s")
    return operator_release


def test_cpu_smoke_trainjob_passes_under_the_real_trainer(trainer_node: RealNode, test_namespace: str):
    node, namespace, name = trainer_node, test_namespace, "smoke-trainjob"
    apply(node, namespace, smoke_test(name, "TrainJob"))
    trainjob = wait_for(lambda: node.kubectl("get", "trainjobs.trainer.kubeflow.org", f"{name}-g1", "-n", namespace,
                                             check=False).returncode == 0
                        and get_json(node, "trainjobs.trainer.kubeflow.org", f"{name}-g1", "-n", namespace),
                        "the test's TrainJob", 60)
    assert trainjob["spec"]["runtimeRef"] == {"name": f"{name}-g1", "apiGroup": "trainer.kubeflow.org",
                                              "kind": "TrainingRuntime"}
    assert_smoke_passed(node, namespace, name)
    status = get_json(node, "acceptancetests.gpu-acceptance.io", name, "-n", namespace)["status"]
    assert status["backend"] == "TrainJob" and status["profile"] == "cpu-smoke"
    pod = the_gpu_pod(node, namespace, name)
    pod = container_exited(node, namespace, pod["metadata"]["name"], "node")
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    assert container["image"] == node.registry.image("workload", chart_version())
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("1", "2")  # set by the Trainer's torch plugin
    assert exit_code(pod, "node") == 0
    wait_for(lambda: any(c["type"] == "Complete" and c["status"] == "True" for c in get_json(
        node, "trainjobs.trainer.kubeflow.org", f"{name}-g1", "-n", namespace)["status"].get("conditions", [])),
        "the Trainer to complete the TrainJob", RUN_TIMEOUT)


def test_no_backend_keeps_pytorchjob_where_the_training_operator_serves(trainer_node: RealNode,
                                                                        test_namespace: str):
    node, namespace, name = trainer_node, test_namespace, "smoke-default"
    test = smoke_test(name, "PyTorchJob")
    del test["spec"]["backend"]
    apply(node, namespace, test)
    assert_smoke_passed(node, namespace, name)
    status = get_json(node, "acceptancetests.gpu-acceptance.io", name, "-n", namespace)["status"]
    assert status["backend"] == "PyTorchJob"
