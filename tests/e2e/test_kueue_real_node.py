"""A cpu-smoke test with spec.queueName reaches SmokePassed on the real node through Kueue: Kueue (started on this
node's control plane for this module, tests/devcluster.Controllers.start_kueue) admits its Job from a ClusterQueue
with CPU quota, the chart's operator (its image, pulled from the node's registry; its ClusterRole lists Kueue's
Workloads) follows the admission, the real kubelet runs the workload image, and rank 0 delivers the report.
"""

from __future__ import annotations

import time

import pytest
from acceptance_operator.building.queueing import QUEUE_LABEL

from tests.cluster.operator_harness import wait_for
from tests.devcluster import Controllers
from tests.e2e.test_real_node import RUN_TIMEOUT, apply, finished, get_json, smoke_test, succeeded_reason
from tests.realnode import RealNode

pytestmark = pytest.mark.timeout(600, func_only=True)
QUEUE = "smoke-queue"


@pytest.fixture(scope="module")
def kueue_node(operator_release: RealNode) -> RealNode:
    assert operator_release.server is not None
    started = time.monotonic()
    Controllers(operator_release.server, detached=True).start_kueue()
    print(f"kueue started in {time.monotonic() - started:.1f}s")
    return operator_release


def kueue_objects(namespace: str) -> list[dict]:
    quota = [{"name": "cpu", "nominalQuota": "16"}, {"name": "memory", "nominalQuota": "64Gi"}]
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "smoke"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "default", "resources": quota}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": QUEUE, "namespace": namespace}, "spec": {"clusterQueue": "smoke"}},
    ]


def test_cpu_smoke_with_a_queue_name_passes_through_kueue(kueue_node: RealNode, test_namespace: str):
    node, namespace = kueue_node, test_namespace
    for obj in kueue_objects(namespace):
        apply(node, namespace, obj)
    test = smoke_test("smoke-queued", "Job")
    test["spec"]["queueName"] = QUEUE
    apply(node, namespace, test)
    job = wait_for(lambda: node.kubectl("get", "job", "smoke-queued-g1", "-n", namespace, check=False).returncode
                   == 0 and get_json(node, "job", "smoke-queued-g1", "-n", namespace), "the test's Job", 60)
    assert job["metadata"]["labels"][QUEUE_LABEL] == QUEUE
    obj = finished(node, namespace, "smoke-queued", RUN_TIMEOUT)
    reason, message = succeeded_reason(obj)
    assert (obj["status"]["phase"], reason) == ("Succeeded", "SmokePassed"), message
    # Kueue admitted it: its Workload (labelled with the Job's uid) says so.
    uid = get_json(node, "job", "smoke-queued-g1", "-n", namespace)["metadata"]["uid"]
    (workload,) = get_json(node, "workloads.kueue.x-k8s.io", "-n", namespace, "-l",
                           f"kueue.x-k8s.io/job-uid={uid}")["items"]
    assert any(c["type"] == "Admitted" and c["status"] == "True" for c in workload["status"]["conditions"])
