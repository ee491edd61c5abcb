"""What a test without spec.backend or spec.profile runs as, decided by the operator against a real API server:
the first backend whose CRD the cluster serves (the CRDs installed one by one, as a platform team would), recorded
in status.backend and a DefaultsChosen event; the profile from the nvidia.com/gpu.product label of the Node objects
the test selects, an unknown or mixed product ending the run before any object is created.

The API server of this module alone: which CRDs and Nodes exist is cluster-wide, and must not reach other tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apiserver import ApiServer, backend_crd_paths, trainer_crd_paths
from tests.cluster.conftest import AT_CRD, StartOperator
from tests.cluster.operator_harness import Cluster, OperatorProcess

PRODUCT = "nvidia.com/gpu.product"


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """An API server with the AcceptanceTest CRD and no backend's: Kubernetes' Job is all it serves."""
    server = ApiServer(tmp_path_factory.mktemp("bare") / "cluster")
    server.start()
    try:
        server.install_crds([AT_CRD])
        yield server
    finally:
        server.stop()


def backend_crd(name: str) -> Path:
    return next(p for p in backend_crd_paths() if name in p.name)


def config_of(job_or_pod_spec: dict) -> dict:
    """The workload's configuration (its env) of the first container that has one."""
    for container in job_or_pod_spec["containers"]:
        for env in container.get("env") or []:
            if env["name"] == "GPU_ACCEPTANCE_CONFIG":
                return json.loads(env["value"])
    raise AssertionError("no workload configuration in the pod")


def decided(cluster: Cluster, name: str, backend: str) -> dict:
    """The test once its run started: status.backend says `backend`, and the event says why."""
    status = cluster.wait(lambda: (s := cluster.status(name)).get("backend") and s, f"{name}'s status.backend")
    assert status["backend"] == backend, status
    _, _, message = cluster.wait_event(name, "DefaultsChosen")
    assert f"backend {backend}: spec.backend is unset" in message, message
    return status


def test_the_first_backend_the_cluster_serves_as_its_crds_come(bare_server: ApiServer,
                                                                 start_operator: StartOperator):
    server = bare_server
    namespace = server.create_namespace("backends")
    proc: OperatorProcess = start_operator(server.kubeconfig, [namespace])
    cluster = Cluster(server, namespace, proc.log_tail)

    # Nothing installed: an Indexed Job (and its headless Service), as examples/quick.yaml would run.
    cluster.create_test("bare", {"nodes": 1})
    decided(cluster, "bare", "Job")
    cluster.wait_job("Job", "bare-g1")
    assert cluster.condition("bare", "JobCreated")["status"] == "True"

    # JobSet installed: a JobSet.
    server.install_crds([backend_crd("jobsets")])
    cluster.create_test("jobset", {"nodes": 1})
    decided(cluster, "jobset", "JobSet")
    cluster.wait_job("JobSet", "jobset-g1")

    # Kubeflow Trainer v2 (on JobSet) installed, no training-operator: a TrainJob and its own TrainingRuntime.
    server.install_crds(trainer_crd_paths())
    cluster.create_test("trainer", {"nodes": 2, "profile": "cpu-smoke"})
    status = decided(cluster, "trainer", "TrainJob")
    assert status["profile"] == "cpu-smoke"  # given: never changed
    trainjob = cluster.wait_job("TrainJob", "trainer-g1")
    assert trainjob["spec"]["runtimeRef"]["name"] == "trainer-g1"
    runtime = cluster.wait_job("TrainingRuntime", "trainer-g1")
    template = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert config_of(template["spec"])["profile"] == "cpu-smoke"

    # The training-operator installed too: PyTorchJob comes first again.
    server.install_crds([backend_crd("pytorchjobs")])
    cluster.create_test("pytorch", {"nodes": 1})
    decided(cluster, "pytorch", "PyTorchJob")
    cluster.wait_job("PyTorchJob", "pytorch-g1")

    # An explicit backend is never changed.
    cluster.create_test("named", {"nodes": 1, "backend": "Job"})
    cluster.wait_job("Job", "named-g1")
    status = cluster.wait(lambda: (s := cluster.status("named")).get("backend") and s, "named's status.backend")
    assert status["backend"] == "Job"
    assert not [e for e in cluster.events("named") if e[1] == "DefaultsChosen" and "backend" in e[2]]
    assert cluster.job("PyTorchJob", "named-g1") is None


@pytest.fixture
def nodes(bare_server: ApiServer) -> Iterator[list[str]]:
    """GPU Node objects (no kubelet: the scheduler has nothing to do here) in three pools: A100, H100 PCIe, and a
    pool mixing A100 and H200."""
    made = {"a100-0": ("a100", "NVIDIA-A100-SXM4-80GB"), "a100-1": ("a100", "NVIDIA-A100-SXM4-80GB"),
            "pcie-0": ("pcie", "NVIDIA-H100-PCIe"), "mixed-0": ("mixed", "NVIDIA-A100-SXM4-80GB"),
            "mixed-1": ("mixed", "NVIDIA-H200"), "bare-0": ("unlabelled", None)}
    for name, (pool, product) in made.items():
        labels = {"pool": pool, "kubernetes.io/hostname": name, **({PRODUCT: product} if product else {})}
        bare_server.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                      "metadata": {"name": name, "labels": labels}})
        bare_server.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"capacity": {
            "nvidia.com/gpu": "8", "cpu": "64", "memory": "1Ti", "pods": "110"}}},
            content_type="application/merge-patch+json")
    yield list(made)
    for name in made:
        bare_server.request("DELETE", f"/api/v1/nodes/{name}", expect=(200, 404))


def test_the_profile_comes_from_the_selected_nodes_gpu_product(bare_server: ApiServer, nodes: list[str],
                                                                start_operator: StartOperator):
    server = bare_server
    namespace = server.create_namespace("profiles")
    proc = start_operator(server.kubeconfig, [namespace])
    cluster = Cluster(server, namespace, proc.log_tail)
    backend = {"backend": "Job"}  # the backend is not what this test is about

    cluster.create_test("a100", {**backend, "placement": {"nodeSelector": {"pool": "a100"}}})
    job = cluster.wait_job("Job", "a100-g1")
    assert config_of(job["spec"]["template"]["spec"])["profile"] == "a100-sxm"
    assert cluster.status("a100")["profile"] == "a100-sxm"
    _, _, message = cluster.wait_event("a100", "DefaultsChosen")
    assert f"profile a100-sxm: spec.profile is unset and the nodes the test selects carry {PRODUCT}=" \
           "NVIDIA-A100-SXM4-80GB" in message

    # An unknown product: ends at once, before any job, naming the product and the profiles.
    cluster.create_test("pcie", {**backend, "placement": {"nodeSelector": {"pool": "pcie"}}})
    cluster.wait_phase("pcie", "Failed")
    succeeded = cluster.condition("pcie", "Succeeded")
    assert succeeded["reason"] == "ProfileUnknown"
    for text in (f"{PRODUCT}=NVIDIA-H100-PCIe", "the profiles: h100-sxm, h200-sxm, b200, a100-sxm", "pcie-0"):
        assert text in succeeded["message"], succeeded["message"]
    assert cluster.condition("pcie", "JobCreated")["reason"] == "ProfileUnknown"
    assert cluster.job("Job", "pcie-g1") is None

    # Mixed products of different profiles: the same, naming both.
    cluster.create_test("mixed", {**backend, "placement": {"nodeSelector": {"pool": "mixed"}}})
    cluster.wait_phase("mixed", "Failed")
    message = cluster.condition("mixed", "Succeeded")["message"]
    assert cluster.condition("mixed", "Succeeded")["reason"] == "ProfileUnknown"
    assert "NVIDIA-A100-SXM4-80GB: a100-sxm" in message and "NVIDIA-H200: h200-sxm" in message
    assert cluster.job("Job", "mixed-g1") is None

    # No label on the selected nodes: h100-sxm, and it says so.
    cluster.create_test("unlabelled", {**backend, "placement": {"nodeSelector": {"pool": "unlabelled"}}})
    job = cluster.wait_job("Job", "unlabelled-g1")
    assert config_of(job["spec"]["template"]["spec"])["profile"] == "h100-sxm"
    _, _, message = cluster.wait_event("unlabelled", "DefaultsChosen")
    assert "profile h100-sxm assumed" in message

    # A profile the spec names is never changed, whatever the nodes say.
    cluster.create_test("named", {**backend, "profile": "b200", "placement": {"nodeSelector": {"pool": "a100"}}})
    job = cluster.wait_job("Job", "named-g1")
    assert config_of(job["spec"]["template"]["spec"])["profile"] == "b200"
