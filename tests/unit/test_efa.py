"""network.fabric efa in the operator: the EFA devices every GPU pod requests, the libfabric env, what is refused."""

from __future__ import annotations

import pytest
import yaml
from acceptance_operator.building.backends import build_job
from acceptance_operator.building.manifests import build_workload_config
from acceptance_operator.resource import efa
from acceptance_operator.resource.spec_input import RenderError, parse_test
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.configuration.profiles import resolve_checks
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV

from tests.unit.test_manifests import BACKENDS, env_of, gpu_pod_specs, main_container, make, templates

P5 = {"node.kubernetes.io/instance-type": "p5.48xlarge"}


def efa_spec(**network) -> dict:
    return {"nodes": 2, "network": {"fabric": "efa", **network}}


def problems(spec: dict) -> list[str]:
    text = yaml.safe_dump({"apiVersion": "gpu-acceptance.io/v1alpha1", "kind": "AcceptanceTest",
                           "metadata": {"name": "t"}, "spec": spec})
    with pytest.raises(RenderError) as e:
        parse_test(text)
    return e.value.lines


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_gpu_pod_requests_the_efa_devices_and_gets_the_libfabric_env(backend: str):
    job = build_job(make({**efa_spec(efaDevices=32), "backend": backend}))
    specs = gpu_pod_specs(job)
    assert len(specs) >= 1
    for spec in specs:
        container = main_container(spec)
        resources = container["resources"]
        assert resources["requests"][efa.EFA_RESOURCE] == 32 and resources["limits"][efa.EFA_RESOURCE] == 32
        assert resources["requests"]["nvidia.com/gpu"] == 8
        env = env_of(container)
        assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
        assert not {"NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_NET"} & set(env)
        assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}  # EFA registers memory
        config = WorkloadConfig.model_validate_json(env[CONFIG_ENV])
        assert config.fabric == "efa" and config.required_transport() == "OFI"


def test_the_mpi_launcher_requests_no_efa_device():
    job = build_job(make({**efa_spec(efaDevices=32), "backend": "MPIJob"}))
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert efa.EFA_RESOURCE not in str(main_container(launcher)["resources"])


@pytest.mark.parametrize("instance, count", sorted(efa.EFA_DEVICES_BY_INSTANCE.items()))
def test_the_count_defaults_to_the_selected_instance_types(instance: str, count: int):
    job = build_job(make({**efa_spec(), "placement": {"nodeSelector": {efa.INSTANCE_TYPE_LABEL: instance}}}))
    for spec in gpu_pod_specs(job):
        assert main_container(spec)["resources"]["limits"][efa.EFA_RESOURCE] == count
    assert efa.EFA_DEVICES_BY_INSTANCE["p5.48xlarge"] == 32 and efa.EFA_DEVICES_BY_INSTANCE["p5en.48xlarge"] == 16


def test_an_explicit_count_wins_over_the_instance_type():
    job = build_job(make({**efa_spec(efaDevices=8), "placement": {"nodeSelector": P5}}))
    assert {main_container(s)["resources"]["limits"][efa.EFA_RESOURCE] for s in gpu_pod_specs(job)} == {8}


def test_without_gpu_direct_rdma_device_rdma_is_not_asked():
    env = env_of(main_container(gpu_pod_specs(build_job(make(efa_spec(efaDevices=4, gpuDirectRDMA=False))))[0]))
    assert env["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in env


def test_other_fabrics_request_no_efa_device():
    for fabric in ("infiniband", "roce", "ethernet"):
        for template in templates(build_job(make({"nodes": 2, "network": {"fabric": fabric}}))):
            assert efa.EFA_RESOURCE not in str(template) and "FI_PROVIDER" not in str(template)


def test_a_count_that_cannot_be_known_is_refused_saying_what_to_set():
    (line,) = problems(efa_spec())
    assert line.startswith("spec.network.efaDevices: set the EFA devices per pod"), line
    assert "p5.48xlarge: 32" in line and "node.kubernetes.io/instance-type" in line
    # an instance type without EFA in the table does not decide a count either
    (line,) = problems({**efa_spec(), "placement": {"nodeSelector": {efa.INSTANCE_TYPE_LABEL: "g5.48xlarge"}}})
    assert line.startswith("spec.network.efaDevices: ")


@pytest.mark.parametrize("spec, start", [
    ({"network": {"fabric": "infiniband", "efaDevices": 32}}, "spec.network.efaDevices: only for network.fabric efa"),
    ({**efa_spec(efaDevices=32), "resources": {"extra": {efa.EFA_RESOURCE: 32}}},
     "spec.resources.extra: vpc.amazonaws.com/efa comes from network.efaDevices"),
    (efa_spec(efaDevices=0), "spec.network.efaDevices: Input should be greater than or equal to 1"),
])
def test_inconsistent_efa_settings_are_refused(spec: dict, start: str):
    (line,) = problems(spec)
    assert line.startswith(start), line


def test_efa_thresholds_are_the_efa_floors_and_marked_estimated():
    config = build_workload_config(make({**efa_spec(efaDevices=32), "profile": "h200-sxm"}))
    nccl = config.checks.nccl.thresholds
    assert nccl.all_reduce_busbw_gbps == 250.0 and nccl.all_gather_busbw_gbps == 225.0
    assert nccl.node_all_reduce_busbw_gbps == 340.0  # inside a node NVLink, as on any fabric
    assert nccl.all_reduce_latency_us is None  # EFA latency: reported, not judged
    assert "nccl.allReduceBusbwGBps" in config.estimated_thresholds
    # p4d (a100-sxm, 4 x 100 Gb/s) has no EFA floor: the IB one would fail a healthy node
    a100 = build_workload_config(make({**efa_spec(efaDevices=4), "profile": "a100-sxm"})).checks.nccl.thresholds
    assert a100.all_reduce_busbw_gbps is None
    ib = resolve_checks(ChecksSpec(), "h200-sxm", 2, 8, "infiniband").nccl.thresholds
    assert ib.all_reduce_busbw_gbps == 340.0  # the IB floor is untouched


def test_a_single_node_efa_run_needs_no_transport_but_still_requests_its_devices():
    test = make({"nodes": 1, "network": {"fabric": "efa", "efaDevices": 32}})
    assert build_workload_config(test).required_transport() is None
    assert main_container(gpu_pod_specs(build_job(test))[0])["resources"]["limits"][efa.EFA_RESOURCE] == 32
