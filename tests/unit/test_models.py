"""The AcceptanceTest models: what a short manifest means, and every way a bad one is refused."""

from __future__ import annotations

import pytest
import yaml
from acceptance_operator.resource import api
from acceptance_operator.resource.api import AcceptanceTest, AcceptanceTestSpec
from acceptance_operator.resource.spec_input import RenderError, parse_test
from pydantic import ValidationError

FOUR_LINES = """\
apiVersion: gpu-acceptance.io/v1alpha1
kind: AcceptanceTest
metadata: {name: t}
spec: {nodes: 2}
"""


def manifest(spec: dict | None = None, **top: object) -> dict:
    doc: dict = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "t"}}
    if spec is not None:
        doc["spec"] = spec
    doc.update(top)
    return doc


def errors_of(doc: dict) -> list[str]:
    """The `field: problem` lines `gpu-acceptance render` would print for `doc`."""
    with pytest.raises(RenderError) as info:
        parse_test(yaml.safe_dump(doc))
    return info.value.lines


def test_four_line_manifest_gets_every_default():
    test = AcceptanceTest.model_validate(yaml.safe_load(FOUR_LINES))
    s = test.spec
    assert (s.backend, s.nodes, s.gpus_per_node, s.profile) == ("PyTorchJob", 2, 8, "h100-sxm")
    assert s.image is None  # the operator resolves it when it builds a run (manifests.resolve_image)
    assert (s.timeout_seconds, s.ttl_seconds_after_finished, s.on_failure) == (3600, 86400, "none")
    assert s.network.fabric == "infiniband" and s.network.gpu_direct_rdma is True
    assert s.network.hcas == [] and s.network.socket_interface is None and s.network.env == {}
    assert s.pod.shm_size == "64Gi" and s.pod.ulimit_init is True
    assert s.pod.host_network is False and s.pod.service_account_name is None
    assert s.placement.node_selector == {} and s.placement.affinity is None
    assert s.checks.preflight.enabled and s.checks.nccl.enabled and s.checks.ddp.enabled
    assert s.checks.nccl.min_bytes == 8 and s.checks.nccl.max_bytes == "4Gi"
    # Thresholds stay unset in the spec: the profile supplies them when the run is configured.
    assert s.checks.nccl.thresholds.all_reduce_busbw_gbps is None
    assert test.metadata.namespace == "default" and test.metadata.uid is None


def test_wire_form_is_camel_case_and_round_trips():
    test = AcceptanceTest.model_validate(manifest({"gpusPerNode": 4, "network": {"gpuDirectRDMA": False}}))
    wire = test.to_wire()
    assert wire["spec"]["gpusPerNode"] == 4
    assert wire["spec"]["network"]["gpuDirectRDMA"] is False
    assert "gpus_per_node" not in wire["spec"]
    assert wire["spec"]["timeoutSeconds"] == 3600 and wire["spec"]["pod"]["shmSize"] == "64Gi"
    assert AcceptanceTest.model_validate(wire) == test


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"nodes": 0}, "spec.nodes: Input should be greater than or equal to 1"),
        ({"gpusPerNode": 0}, "spec.gpusPerNode: Input should be greater than or equal to 1"),
        ({"backend": "TFJob"}, "spec.backend: Input should be 'PyTorchJob', 'MPIJob', 'Job', 'JobSet' or 'TrainJob'"),
        ({"profile": "h900"}, "spec.profile: Input should be"),
        ({"nodez": 2}, "spec.nodez: unknown field"),
        ({"network": {"hca": ["mlx5_0"]}}, "spec.network.hca: unknown field"),
        ({"network": {"fabric": "omnipath"}}, "spec.network.fabric: Input should be"),
        ({"pod": {"shmSize": -1}}, "spec.pod.shmSize: size must not be negative, got -1"),
        ({"pod": {"shmSize": "-1Gi"}}, "spec.pod.shmSize: '-1Gi' is not a size"),
        ({"pod": {"shmSize": "lots"}}, "spec.pod.shmSize: 'lots' is not a size"),
        ({"checks": {"nccl": {"maxBytes": "-4Gi"}}}, "spec.checks.nccl.maxBytes: '-4Gi' is not a size"),
        ({"checks": {"nccl": {"minBytes": "1Gi", "maxBytes": "1Mi"}}},
         "spec.checks.nccl: minBytes (1Gi) must not exceed maxBytes (1Mi)"),
        ({"checks": {"nccl": {"minBytes": 0}}}, "spec.checks.nccl: minBytes must be at least 1"),
        ({"checks": {"nccl": {"collectives": []}}}, "spec.checks.nccl.collectives: List should have at least 1"),
        ({"checks": {"nccl": {"collectives": ["all_to_all"]}}}, "spec.checks.nccl.collectives[0]: Input should be"),
        ({"checks": {"preflight": {"enabled": False}, "gpu": {"enabled": False}, "p2p": {"enabled": False},
                     "nccl": {"enabled": False}, "ddp": {"enabled": False}}},
         "spec.checks: enable at least one of preflight, gpu, p2p, nccl, ddp"),
        ({"network": {"fabric": "ethernet"}, "checks": {"nccl": {"requireTransport": "IB_GDR"}}},
         "spec.checks.nccl.requireTransport: IB cannot be required on network.fabric ethernet"),
        ({"checks": {"ddp": {"thresholds": {"minScalingEfficiency": 1.5}}}},
         "spec.checks.ddp.thresholds.minScalingEfficiency: Input should be less than or equal to 1"),
        ({"timeoutSeconds": 10}, "spec.timeoutSeconds: Input should be greater than or equal to 60"),
        ({"resources": {"cpu": [1]}}, "spec.resources.cpu: Input should be a valid"),
        ({"pod": {"env": {"NODE_NAME": "x"}}}, "spec.pod.env.NODE_NAME: set by the operator"),
        ({"network": {"env": {"GPU_ACCEPTANCE_CONFIG": "{}"}}}, "spec.network.env.GPU_ACCEPTANCE_CONFIG: set by"),
        ({"pod": {"volumes": [{"name": "gpu-acceptance-shm", "emptyDir": {}}]}},
         "spec.pod.volumes[0].name: 'gpu-acceptance-shm': names starting with 'gpu-acceptance-' are the operator's"),
        ({"pod": {"volumeMounts": [{"name": "x", "mountPath": "/dev/shm"}]}},
         "spec.pod.volumeMounts[0].mountPath: '/dev/shm' is the operator's /dev/shm"),
        ({"placement": {"nodeSelector": {"gpu type": "h100"}}}, "spec.placement.nodeSelector: key 'gpu type'"),
    ],
)
def test_invalid_spec_is_refused_naming_the_field(spec: dict, expected: str):
    lines = errors_of(manifest(spec))
    assert any(line.startswith(expected) for line in lines), lines


def test_every_offending_field_is_named_once():
    lines = errors_of(manifest({"nodes": 0, "backend": "TFJob", "nodez": 1}))
    assert sorted(line.split(":")[0] for line in lines) == ["spec.backend", "spec.nodes", "spec.nodez"]


def test_document_level_mistakes_are_named():
    assert errors_of(manifest(kind="PyTorchJob")) == ["kind: Input should be 'AcceptanceTest'"]
    assert errors_of(manifest(apiVersion="gpu-acceptance.io/v1")) == [
        "apiVersion: Input should be 'gpu-acceptance.io/v1alpha1'"
    ]
    assert errors_of({"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {}}) == [
        "metadata.name: Field required"
    ]
    assert errors_of(manifest(spek={})) == ["spek: unknown field"]
    assert errors_of(manifest(metadata={"name": "Bad_Name"}))[0].startswith("metadata.name: 'Bad_Name' is not")


def test_yaml_shape_mistakes_are_refused():
    with pytest.raises(RenderError, match="exactly one AcceptanceTest document, found 2"):
        parse_test(FOUR_LINES + "---\n" + FOUR_LINES)
    with pytest.raises(RenderError, match="found 0"):
        parse_test("")
    with pytest.raises(RenderError, match="found a YAML list"):
        parse_test("- 1\n")
    with pytest.raises(RenderError, match="not valid YAML"):
        parse_test("spec: {nodes: [\n")


def test_python_side_validation_matches_wire_names():
    """The snake_case model refuses the same bad values the wire form does (one rule, two spellings)."""
    with pytest.raises(ValidationError):
        AcceptanceTestSpec(nodes=0)
    with pytest.raises(ValidationError):
        AcceptanceTestSpec.model_validate({"gpus_per_nodes": 8})
    assert AcceptanceTestSpec(gpus_per_node=4).gpus_per_node == 4
