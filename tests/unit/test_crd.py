"""The CRD generated from the models: structural, complete, and identical to the committed copies."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from acceptance_operator.resource import api
from acceptance_operator.resource.crd import build_crd, crd_yaml
from acceptance_workload.contract.wire import parse_bytes

REPO = Path(__file__).resolve().parents[2]
COMMITTED = [REPO / "crds" / "acceptancetest.yaml", REPO / "charts" / "gpu-acceptance" / "crds" / "acceptancetest.yaml"]


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return build_crd()


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node (properties, items, map values) with its dotted path."""
    yield path or "(root)", node
    for name, child in node.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{name}" if path else name)
    if "items" in node:
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{{}}")


def at(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for part in dotted.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def test_schema_is_structural(schema: dict[str, Any]):
    """What the API server's structural-schema rules forbid, or what pydantic would leak into it."""
    nodes = list(schema_nodes(schema))
    assert len(nodes) > 100  # the walk reaches the whole spec, status and report
    for path, node in nodes:
        for key in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "const", "discriminator"):
            assert key not in node, f"{key} at {path}"
        assert node.get("additionalProperties") is not False, f"additionalProperties: false at {path}"
        assert node.get("type") != "null", f"type null at {path} (use nullable)"
        if "properties" in node:
            assert node.get("type") == "object", f"properties without type object at {path}"
            assert "additionalProperties" not in node, f"properties and additionalProperties at {path}"
        typed = "type" in node or node.get("x-kubernetes-int-or-string") is True
        assert typed or node.get("x-kubernetes-preserve-unknown-fields") is True, f"untyped schema at {path}"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, f"int-or-string with a type at {path}"
        for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if key in node:  # OpenAPI v3.0: a flag beside the bound; the API server refuses JSON Schema's number
                assert node[key] is True and bound in node, f"{key}: {node[key]!r} at {path}"


@pytest.mark.parametrize(
    "field",
    ["spec.pod.shmSize", "spec.resources.cpu", "spec.resources.memory", "spec.checks.nccl.minBytes",
     "spec.checks.nccl.maxBytes", "spec.checks.nccl.thresholds.referenceBytes",
     "spec.checks.preflight.thresholds.minShmBytes"],
)
def test_sizes_and_quantities_are_int_or_string(schema: dict[str, Any], field: str):
    node = at(schema, field)
    assert node.get("x-kubernetes-int-or-string") is True
    assert "type" not in node


@pytest.mark.parametrize(
    "field",
    ["spec.pod.shmSize", "spec.checks.nccl.minBytes", "spec.checks.nccl.maxBytes",
     "spec.checks.nccl.thresholds.referenceBytes", "spec.checks.preflight.thresholds.minShmBytes"],
)
def test_sizes_are_checked_at_admission_like_parse_bytes(schema: dict[str, Any], field: str):
    """The pattern and minimum the server applies accept and refuse what parse_bytes does."""
    node = at(schema, field)
    assert node["minimum"] == (1 if field.endswith("minBytes") else 0)  # a sweep starts at one byte at least
    pattern = re.compile(node["pattern"])
    for good in ("64Gi", "1.5Gi", "8", "1G", "512Mi", "4Ki"):
        assert pattern.match(good) and parse_bytes(good) >= 0
    for bad in ("-1Gi", "lots", "1gi", "", "1 Gi", "1e9"):
        assert not pattern.match(bad)
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_extra_resources_are_a_bounded_map_of_quantities_without_the_gpus(schema: dict[str, Any]):
    extra = at(schema, "spec.resources.extra")
    assert extra["type"] == "object" and extra["maxProperties"] == api.MAX_EXTRA_RESOURCES
    assert extra["additionalProperties"]["x-kubernetes-int-or-string"] is True
    assert extra["additionalProperties"]["maxLength"] == 64
    rules = [r["rule"] for r in extra["x-kubernetes-validations"]]
    assert "!('nvidia.com/gpu' in self)" in rules and "self.all(k, size(k) <= 317)" in rules


def test_defaults_let_the_server_complete_a_short_manifest(schema: dict[str, Any]):
    assert at(schema, "spec")["default"] == {}
    # No default for backend and profile: the operator decides them from the cluster where a test leaves them unset.
    assert "default" not in at(schema, "spec.backend") and "default" not in at(schema, "spec.profile")
    assert at(schema, "spec.backend")["enum"] == ["PyTorchJob", "MPIJob", "Job", "JobSet", "TrainJob"]
    nodes = at(schema, "spec.nodes")
    assert (nodes["type"], nodes["default"], nodes["minimum"]) == ("integer", 1, 1)
    assert at(schema, "spec.gpusPerNode")["default"] == 8
    # No default: a stored test must not pin the image of the operator version that admitted it.
    assert "default" not in at(schema, "spec.image") and at(schema, "spec.image")["nullable"] is True
    assert at(schema, "spec.timeoutSeconds")["default"] == 3600
    assert at(schema, "spec.ttlSecondsAfterFinished")["default"] == 86400
    assert at(schema, "spec.pod.shmSize")["default"] == "64Gi"
    assert at(schema, "spec.network.fabric")["default"] == "infiniband"
    assert at(schema, "spec.network.gpuDirectRDMA")["default"] is True
    for nested in ("placement", "resources", "network", "pod", "checks", "checks.nccl", "checks.nccl.thresholds"):
        assert at(schema, f"spec.{nested}")["default"] == {}, nested


def test_kubernetes_objects_are_typed_so_admission_refuses_malformed_ones(schema: dict[str, Any]):
    affinity = at(schema, "spec.placement.affinity")
    assert affinity["nullable"] is True and "x-kubernetes-preserve-unknown-fields" not in affinity
    anti = at(schema, "spec.placement.affinity.podAntiAffinity")
    assert anti["type"] == "object"  # `podAntiAffinity: 5` is refused by the API server
    term = at(schema, "spec.placement.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.[]")
    assert term["required"] == ["topologyKey"]
    assert at(schema, "spec.placement.tolerations.[].effect")["enum"][:3] == ["NoSchedule", "PreferNoSchedule",
                                                                             "NoExecute"]
    assert at(schema, "spec.pod.volumeMounts.[]")["required"] == ["name", "mountPath"]


def test_a_volume_is_a_name_and_one_source_kept_as_written(schema: dict[str, Any]):
    volume = at(schema, "spec.pod.volumes.[]")
    assert volume["x-kubernetes-preserve-unknown-fields"] is True
    assert volume["required"] == ["name"] and volume["properties"]["name"]["type"] == "string"
    assert (volume["minProperties"], volume["maxProperties"]) == (2, 2)


def test_every_spec_value_is_bounded(schema: dict[str, Any]):
    """maxLength, maxItems, maxProperties, maximum on everything a user writes, so admission refuses a huge spec.

    A volume's source (pod.volumes, storage.volume) is the one free-form part; the model's MAX_SPEC_BYTES bounds
    it (tests/unit/test_bounds.py).
    """
    def problem(path: str, node: dict[str, Any]) -> bool:
        kind = node.get("type")
        return any([
            kind == "string" and "enum" not in node and "maxLength" not in node,
            bool(node.get("x-kubernetes-int-or-string")) and "maxLength" not in node,
            kind == "array" and "maxItems" not in node,
            kind == "object" and "additionalProperties" in node and "maxProperties" not in node,
            kind in ("integer", "number") and "maximum" not in node,
            bool(node.get("x-kubernetes-preserve-unknown-fields"))
            and path not in ("spec.pod.volumes[]", "spec.storage.volume",
                             # declared only for the CEL rule that refuses them (volumes.NODE_LOCAL_SOURCES)
                             "spec.storage.volume.hostPath", "spec.storage.volume.emptyDir"),
        ])

    unbounded = [path for path, node in schema_nodes(at(schema, "spec"), "spec") if problem(path, node)]
    assert unbounded == []


def test_map_keys_are_checked_with_cel(schema: dict[str, Any]):
    env = at(schema, "spec.pod.env")
    assert env["maxProperties"] == api.MAX_ENV
    assert env["additionalProperties"] == {"type": "string", "maxLength": api.MAX_ENV_VALUE}
    assert {r["rule"] for r in env["x-kubernetes-validations"]} == {
        f"self.all(k, size(k) <= {api.MAX_ENV_NAME})", "self.all(k, k.matches('^[^=]+$'))",
        *(r["rule"] for r in RESERVED_RULES)}


RESERVED_RULES = [
    {"rule": "self.all(k, !(k in ['GPU_ACCEPTANCE_CONFIG', 'NODE_NAME', 'POD_NAME', 'POD_NAMESPACE', 'MASTER_ADDR', "
             "'MASTER_PORT']))",
     "message": "GPU_ACCEPTANCE_CONFIG, NODE_NAME, POD_NAME, POD_NAMESPACE, MASTER_ADDR, MASTER_PORT: set by the "
                "operator for every run; remove them from env"},
    {"rule": "self.all(k, !k.startsWith('KUBERNETES_SERVICE_'))",
     "message": "names starting with KUBERNETES_SERVICE_ are reserved (the kubelet's address of the API server; the "
                "workload's client would send its token wherever it points); remove them from env"},
    {"rule": "self.all(k, !k.startsWith('KUBERNETES_PORT'))",
     "message": "names starting with KUBERNETES_PORT are reserved (the kubelet's address of the API server; the "
                "workload's client would send its token wherever it points); remove them from env"},
    {"rule": "self.all(k, !k.startsWith('GPU_ACCEPTANCE_'))",
     "message": "names starting with GPU_ACCEPTANCE_ are reserved (the operator's and the workload's own settings); "
                "remove them from env"},
]


@pytest.mark.parametrize("field", ["spec.pod.env", "spec.network.env"])
def test_reserved_env_names_are_refused_by_the_schema(schema: dict[str, Any], field: str):
    """Admission refuses what the model refuses: the API server's address, the project's settings, the run's own."""
    rules = at(schema, field)["x-kubernetes-validations"]
    assert [r for r in rules if r in RESERVED_RULES] == RESERVED_RULES


def test_cel_rules_carry_the_cross_field_constraints(schema: dict[str, Any]):
    rules = at(schema, "spec")["x-kubernetes-validations"]
    assert rules == api.SPEC_CEL_RULES
    messages = [r["message"] for r in rules]
    assert "checks: enable at least one of preflight, gpu, p2p, nccl, ddp, fsdp, storage, soak" in messages
    assert any(m.startswith("storage: checks.storage is enabled but no volume") for m in messages)
    assert "checks.nccl.requireTransport: IB cannot be required on network.fabric ethernet" in messages
    soak = next(r for r in rules if r["fieldPath"] == ".checks.soak.durationSeconds")
    assert "set spec.timeoutSeconds to at least durationSeconds + 600" in soak["message"]
    for rule in rules:
        assert rule["fieldPath"].startswith(".")


def test_status_conditions_are_a_map_keyed_by_type(schema: dict[str, Any]):
    conditions = at(schema, "status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert at(schema, "status.conditions.[].lastTransitionTime")["format"] == "date-time"
    assert "report" in at(schema, "status")["properties"]


def test_names_scope_and_status_subresource(crd: dict[str, Any]):
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{api.PLURAL}.{api.GROUP}"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "AcceptanceTest"
    assert spec["names"]["shortNames"] == ["at"]
    (version,) = spec["versions"]
    assert version["name"] == api.VERSION and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_printer_columns(crd: dict[str, Any]):
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    table = [(c["name"], c["jsonPath"], c.get("priority", 0)) for c in columns]
    assert table == [
        ("Phase", ".status.phase", 0),
        ("Reason", '.status.conditions[?(@.type=="Succeeded")].reason', 0),
        ("Bus BW", ".status.summary.allReduceBusbwGBps", 0),
        ("Nodes", ".spec.nodes", 0),
        ("Soak", ".status.soak.progress", 0),
        ("Age", ".metadata.creationTimestamp", 0),
        ("Backend", ".status.backend", 1),
        ("Profile", ".status.profile", 1),
        ("Sweep", ".status.sweep.progress", 1),
        ("Worst", ".status.soak.worst", 1),
    ]


def test_printer_column_paths_exist_in_the_schema(crd: dict[str, Any], schema: dict[str, Any]):
    for column in crd["spec"]["versions"][0]["additionalPrinterColumns"]:
        # A JSONPath filter over a list (conditions[?(@.type=="Succeeded")]) walks into the list's items.
        path = re.sub(r"\[\?\(.*?\)\]", ".[]", column["jsonPath"]).lstrip(".")
        if path.startswith("metadata."):
            continue
        at(schema, path)  # KeyError when a column points at nothing


@pytest.mark.parametrize("committed", COMMITTED, ids=["crds", "chart"])
def test_committed_crd_has_not_drifted_from_the_models(committed: Path):
    assert committed.read_text() == crd_yaml(), (
        f"{committed.relative_to(REPO)} is stale: run `gpu-acceptance crd > crds/acceptancetest.yaml && "
        "cp crds/acceptancetest.yaml charts/gpu-acceptance/crds/`"
    )


def test_cli_prints_the_committed_crd():
    out = subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "crd"], capture_output=True, text=True,
                         check=True).stdout
    assert out == COMMITTED[0].read_text()
    assert yaml.safe_load(out)["kind"] == "CustomResourceDefinition"
