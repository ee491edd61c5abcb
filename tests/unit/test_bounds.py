"""Every input bounded, every malformed structure refused by the models with the field named (issue 8, item 3)."""

from __future__ import annotations

import json

import pytest
import yaml
from acceptance_operator.building import backends
from acceptance_operator.resource import api, spec_input
from acceptance_operator.resource.spec_input import RenderError, parse_test, problems_text

from tests.unit.test_models import errors_of, manifest


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"pod": {"env": {"BIG": "x" * 300_000}}}, "spec.pod.env.BIG: String should have at most 8192 characters"),
        ({"pod": {"env": {f"V{i}": "1" for i in range(api.MAX_ENV + 1)}}},
         "spec.pod.env: Dictionary should have at most 64"),
        ({"network": {"env": {"A=B": "1"}}}, "spec.network.env.A=B: String should match pattern"),
        ({"resources": {"extra": {"nvidia.com/gpu": 1}}},
         "spec.resources.extra: nvidia.com/gpu comes from spec.gpusPerNode; remove it from resources.extra"),
        ({"resources": {"cpu": "lots"}}, "spec.resources.cpu"),
        ({"image": ""}, "spec.image: String should have at least 1 character"),
        ({"image": "ghcr.io/x y"}, "spec.image: String should match pattern"),
        ({"checks": {"nccl": {"maxBytes": "64Gi"}}}, "spec.checks.nccl.maxBytes: '64Gi' is more than the largest"),
        ({"checks": {"nccl": {"maxBytes": 2**40}}}, "spec.checks.nccl.maxBytes: 1099511627776 is more than"),
        ({"checks": {"nccl": {"maxBytes": "1" * 40}}}, "spec.checks.nccl.maxBytes: a size has at most 32 characters"),
        ({"checks": {"nccl": {"iters": 10**7}}}, "spec.checks.nccl.iters: Input should be less than or equal to 10000"),
        ({"checks": {"ddp": {"batchSize": 10**6}}}, "spec.checks.ddp.batchSize: Input should be less than or equal"),
        ({"checks": {"ddp": {"steps": 10**9}}}, "spec.checks.ddp.steps: Input should be less than or equal"),
        ({"timeoutSeconds": 10**9}, "spec.timeoutSeconds: Input should be less than or equal to 604800"),
        ({"checks": {"heartbeatTimeoutSeconds": 5}},
         "spec.checks.heartbeatTimeoutSeconds: Input should be greater than or equal to 10"),
        ({"checks": {"heartbeatTimeoutSeconds": 10**6}},
         "spec.checks.heartbeatTimeoutSeconds: Input should be less than or equal to 3600"),
        ({"checks": {"preflight": {"thresholds": {"maxGpuMemoryInUseMiB": -1}}}},
         "spec.checks.preflight.thresholds.maxGpuMemoryInUseMiB: Input should be greater than or equal to 0"),
        ({"placement": {"affinity": {"podAntiAffinity": 5}}},
         "spec.placement.affinity.podAntiAffinity: Input should be"),
        ({"placement": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}}}},
         "spec.placement.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution: Input should be"),
        ({"placement": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}}},
         "spec.placement.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey:"),
        ({"placement": {"tolerations": [5]}}, "spec.placement.tolerations[0]: Input should be"),
        ({"placement": {"tolerations": [{"operator": "Maybe"}]}}, "spec.placement.tolerations[0].operator: Input"),
        ({"pod": {"volumeMounts": [{"name": "v"}]}}, "spec.pod.volumeMounts[0].mountPath: Field required"),
        ({"pod": {"volumes": [{"name": "v"}]}}, "spec.pod.volumes[0]: a volume has its name and exactly one source"),
        ({"pod": {"volumes": [{"name": "v", "configMap": 5}]}},
         "spec.pod.volumes[0].configMap: a volume source is an object, not int"),
        ({"pod": {"volumes": [{"name": 5, "emptyDir": {}}]}},
         "spec.pod.volumes[0].name: Input should be a valid string"),
        ({"pod": {"volumes": [{"name": f"v{i}", "configMap": {"name": "c" * 250, "items": [
            {"key": "k" * 200, "path": "p" * 200}] * 10}} for i in range(30)]}},
         "spec: 1"),  # "spec: 1xxxxx bytes as JSON, more than the 65536 a spec may have"
    ],
)
def test_malformed_or_oversized_spec_is_refused_naming_the_field(spec: dict, expected: str):
    lines = errors_of(manifest(spec))
    assert any(line.startswith(expected) for line in lines), lines


def test_the_size_budget_names_itself():
    volumes = [{"name": f"v{i}", "configMap": {"name": "c", "items": [{"key": "k" * 250, "path": "p"}] * 10}}
               for i in range(30)]
    (line,) = errors_of(manifest({"pod": {"volumes": volumes}}))
    size = len(json.dumps({"pod": {"volumes": volumes}}, separators=(",", ":")))
    assert line == (f"spec: {size} bytes as JSON, more than the {api.MAX_SPEC_BYTES} a spec may have; "
                    "shorten env values, volumes or affinity")


def test_bounds_allow_what_real_tests_use():
    """The bounds are not too tight: a spec with every kind of object, near a real one, passes."""
    spec = {
        "nodes": 4096, "image": "registry.example.com/gpu/workload@sha256:" + "a" * 64,
        "placement": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "maintenance", "operator": "Equal", "value": "true", "effect": "NoExecute",
                             "tolerationSeconds": 60}, {"operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}]}},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                                                       "labelSelector": {"matchLabels": {"app": "x"}}}}]}},
        },
        "resources": {"cpu": "90000m", "memory": "1.5Ti", "extra": {"rdma/ib": 1, "nvidia.com/hostdev": "8"}},
        "network": {"hcas": [f"mlx5_{i}" for i in range(8)], "env": {"NCCL_TOPO_FILE": "/etc/nccl/topo.xml"}},
        "pod": {"env": {"UCX_TLS": "rc,sm"}, "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}]},
        "checks": {"nccl": {"maxBytes": "32Gi", "iters": 10_000}, "ddp": {"batchSize": 4096, "steps": 100_000}},
        "timeoutSeconds": 7 * 86400,
    }
    test = parse_test(yaml.safe_dump(manifest(spec)))
    assert test.spec.resources.extra["rdma/ib"] == 1
    job = backends.build_job(test)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert job["tolerations"] == spec["placement"]["tolerations"]  # passed on as written
    assert job["affinity"]["nodeAffinity"] == spec["placement"]["affinity"]["nodeAffinity"]
    assert job["affinity"]["podAffinity"] == spec["placement"]["affinity"]["podAffinity"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "d"}} in job["volumes"]
    assert {"name": "data", "mountPath": "/data", "readOnly": True} in job["containers"][0]["volumeMounts"]


def test_problems_text_stays_within_its_limit():
    lines = [f"spec.pod.env.V{i}: String should have at most 8192 characters" for i in range(500)]
    text = problems_text(lines)
    assert len(text) <= spec_input.MAX_PROBLEMS_TEXT
    assert text.startswith(lines[0]) and text.endswith(" more")
    assert problems_text(lines[:2]) == "; ".join(lines[:2])
    assert len(problems_text(["x" * 10_000])) <= spec_input.MAX_PROBLEMS_TEXT


# --------------------------------------------------------------------------- YAML input of render


def test_alias_bomb_is_refused_before_it_expands():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 12):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]\n"
    with pytest.raises(RenderError, match=r"expands to more than 100000 values"):
        parse_test(bomb)


def test_a_few_aliases_are_fine():
    text = ("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: t}\n"
            "spec:\n  pod: {env: &e {A: '1'}}\n  network: {env: *e}\n")
    assert parse_test(text).spec.network.env == {"A": "1"}


def test_recursive_alias_and_deep_nesting_and_size_are_refused():
    with pytest.raises(RenderError, match="refers to a node that contains it"):
        parse_test("a: &a [*a]\n")
    with pytest.raises(RenderError, match="nested too deeply"):
        parse_test("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RenderError, match="larger than 1048576 bytes"):
        parse_test("# " + "x" * spec_input.MAX_MANIFEST_BYTES)
