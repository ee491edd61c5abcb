"""A cpu-smoke test with spec.queueName reaches SmokePassed on the real node through Kueue: Kueue (started on this
node's control plane for this module only, tests/devcluster.Controllers.start_kueue) admits its Job from a
ClusterQueue with CPU quota, the real kubelet runs the built workload image, and rank 0 delivers the report.

The operator runs on the host from this checkout (tests/cluster/operator_harness.OperatorProcess), not from the
chart's image: the image is built from another tree and the test is about this tree's operator; the workload pods
are the built image's, as everywhere in tests/e2e.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from acceptance_operator.queueing import QUEUE_LABEL

from tests.cluster.operator_harness import OperatorProcess, wait_for
from tests.devcluster import Controllers
from tests.e2e.test_real_node import RUN_TIMEOUT, apply, finished, get_json, smoke_test, succeeded_reason
from tests.realnode import RealNode

pytestmark = pytest.mark.timeout(600)
NAMESPACE = "e2e-kueue"
QUEUE = "smoke-queue"


@pytest.fixture(scope="module")
def kueue_node(real_node: RealNode) -> RealNode:
    assert real_node.server is not None
    started = time.monotonic()
    Controllers(real_node.server, detached=True).start_kueue()
    print(f"kueue started in {time.monotonic() - started:.1f}s")
    return real_node


@pytest.fixture
def operator(kueue_node: RealNode, tmp_path: Path) -> Iterator[OperatorProcess]:
    kueue_node.kubectl("create", "namespace", NAMESPACE)
    proc = OperatorProcess(kueue_node.kubeconfig, tmp_path, [NAMESPACE],
                           {"GPU_ACCEPTANCE_ALLOW_HOST_NETWORK": "true", "GPU_ACCEPTANCE_REPORT_GRACE_SECONDS": "5"})
    proc.log_dir.mkdir(exist_ok=True)
    yield proc.start()
    proc.stop()
    print(proc.log_tail(80))


def kueue_objects() -> list[dict]:
    quota = [{"name": "cpu", "nominalQuota": "16"}, {"name": "memory", "nominalQuota": "64Gi"}]
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "smoke"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "default", "resources": quota}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": QUEUE, "namespace": NAMESPACE}, "spec": {"clusterQueue": "smoke"}},
    ]


def test_cpu_smoke_with_a_queue_name_passes_through_kueue(kueue_node: RealNode, operator: OperatorProcess):
    node = kueue_node
    for obj in kueue_objects():
        apply(node, NAMESPACE, obj)
    test = smoke_test("smoke-queued", "Job")
    test["spec"]["queueName"] = QUEUE
    apply(node, NAMESPACE, test)
    job = wait_for(lambda: node.kubectl("get", "job", "smoke-queued-g1", "-n", NAMESPACE, check=False).returncode
                   == 0 and get_json(node, "job", "smoke-queued-g1", "-n", NAMESPACE), "the test's Job", 60)
    assert job["metadata"]["labels"][QUEUE_LABEL] == QUEUE
    obj = finished(node, NAMESPACE, "smoke-queued", RUN_TIMEOUT)
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Succeeded", "SmokePassed"), f"{message}\n{operator.log_tail()}"
    # Kueue admitted it: its Workload (labelled with the Job's uid) says so.
    uid = get_json(node, "job", "smoke-queued-g1", "-n", NAMESPACE)["metadata"]["uid"]
    (workload,) = get_json(node, "workloads.kueue.x-k8s.io", "-n", NAMESPACE, "-l",
                           f"kueue.x-k8s.io/job-uid={uid}")["items"]
    assert any(c["type"] == "Admitted" and c["status"] == "True" for c in workload["status"]["conditions"])
