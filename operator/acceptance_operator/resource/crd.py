"""The AcceptanceTest CRD, generated from the pydantic models.

Pydantic's JSON schema is turned into a Kubernetes structural schema: refs are
inlined, `X | None` becomes `nullable`, int-or-string unions get their marker,
free-form objects keep unknown fields, titles go, and nested objects default to
{} so the API server fills in every field default of a short manifest.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from acceptance_operator.resource import api
from acceptance_operator.resource.conditions import SUCCEEDED

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    # The Succeeded condition's reason (Passed, ChecksFailed, Timeout, InvalidSpec, ...): what Phase does not say.
    {"name": "Reason", "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{SUCCEEDED}")].reason',
     "description": "reason of the Succeeded condition: why the test is in its phase"},
    {"name": "Bus BW", "type": "number", "jsonPath": ".status.summary.allReduceBusbwGBps",
     "description": "all_reduce bus bandwidth over the whole job, GB/s"},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.nodes"},
    {"name": "Soak", "type": "string", "jsonPath": ".status.soak.progress",
     "description": "checks.soak's progress: elapsed/total (kept after the verdict; the next run clears it)"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Backend", "type": "string", "jsonPath": ".status.backend", "priority": 1,
     "description": "The current run's backend: spec.backend, or the one the operator chose"},
    {"name": "Profile", "type": "string", "jsonPath": ".status.profile", "priority": 1,
     "description": "The current run's profile: spec.profile, or the one taken from the nodes"},
    {"name": "Sweep", "type": "string", "jsonPath": ".status.sweep.progress", "priority": 1,
     "description": "A sweep's progress: nodes passed of the total, failed, running, pending"},
    {"name": "Worst", "type": "string", "jsonPath": ".status.soak.worst", "priority": 1,
     "description": "checks.soak: the worst GPU so far"},
]

_DROP_KEYS = {"title", "additionalProperties", "$defs", "discriminator"}


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """One pydantic schema node as a structural Kubernetes schema node."""
    node = copy.deepcopy(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        node = {**copy.deepcopy(target), **node}
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node.pop("allOf")[0], **node}
        return _structural(node, defs)

    out: dict[str, Any] = {}
    if "anyOf" in node:
        raw = node.pop("anyOf")
        options = [o for o in raw if o.get("type") != "null"]
        if sorted(o.get("type", "") for o in options) == ["integer", "string"]:
            out["x-kubernetes-int-or-string"] = True
        elif len(options) == 1:
            out.update(_structural(options[0], defs))
        else:
            raise ValueError(f"cannot express union {options} in a structural schema")
        if len(options) < len(raw):
            out["nullable"] = True
    if "const" in node:
        node["enum"] = [node.pop("const")]

    kind = node.get("type")
    if kind == "object" or "properties" in node:
        out.update(_object(node, defs))
    elif kind == "array":
        out["type"] = "array"
        out["items"] = _structural(node.get("items", {}), defs)
    elif kind is not None:
        out["type"] = kind

    _copy_keywords(node, out)
    if out.get("nullable") and "enum" in out:
        # The API server refuses a null that an enum does not list, even where nullable (null in the enum does not
        # help): not nullable, a null is dropped before validation, as unset, which is what the model reads.
        del out["nullable"]
    return out


def _object(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """An object node: typed properties (nested objects defaulting to {}), a map's values, or kept as written."""
    out: dict[str, Any] = {"type": "object"}
    props = node.get("properties")
    if props:
        out["properties"] = {k: _structural(v, defs) for k, v in props.items()}
        for key, child in out["properties"].items():
            # Nested objects default to {} so the API server applies their field defaults (a required one
            # stays required: {} would not pass its own required fields).
            if child.get("type") == "object" and "properties" in child and "default" not in child \
                    and not child.get("nullable") and key not in node.get("required", ()):
                child["default"] = {}
        if node.get("required"):
            out["required"] = list(node["required"])
    elif isinstance(node.get("additionalProperties"), dict) and node["additionalProperties"]:
        value = _structural(node["additionalProperties"], defs)
        out["additionalProperties"] = value
    elif len(node.get("patternProperties") or {}) == 1:
        # A map whose keys have a pattern: the values' schema, and the pattern as a CEL rule below.
        (value,) = node["patternProperties"].values()
        out["additionalProperties"] = _structural(value, defs)
    else:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if props and node.get("additionalProperties") is True:
        # A model that keeps extra fields (a volume's source): its own fields typed, the rest kept as written.
        out["x-kubernetes-preserve-unknown-fields"] = True
    out.update(_key_rules(node))
    return out


# pydantic writes gt/lt as JSON Schema 2020's exclusiveMinimum: 0; Kubernetes' OpenAPI v3.0 wants minimum: 0 with
# exclusiveMinimum: true (the API server refuses the number).
_EXCLUSIVE = {"exclusiveMinimum": "minimum", "exclusiveMaximum": "maximum"}


def _copy_keywords(node: dict[str, Any], out: dict[str, Any]) -> None:
    """The node's other keywords a structural schema keeps (descriptions, bounds, enums, CEL rules)."""
    for key, value in node.items():
        if key in _DROP_KEYS or key in ("type", "properties", "items", "required", "anyOf", "propertyNames",
                                        "patternProperties"):
            continue
        if key == "x-kubernetes-validations":
            out[key] = [*out.get(key, []), *value]
            continue
        if key == "default" and value is None:
            continue
        if key == "format" and value not in ("date-time", "int32", "int64", "byte"):
            continue
        if key in _EXCLUSIVE and not isinstance(value, bool):  # JSON Schema's number -> OpenAPI v3.0's flag
            out[_EXCLUSIVE[key]], out[key] = value, True
            continue
        out[key] = value


def _key_rules(node: dict[str, Any]) -> dict[str, Any]:
    """Structural schemas have no propertyNames or patternProperties: the API server checks map keys with CEL."""
    names = node.get("propertyNames") or {}
    rules = []
    if "maxLength" in names:
        rules.append({"rule": f"self.all(k, size(k) <= {names['maxLength']})",
                      "message": f"keys must be at most {names['maxLength']} characters"})
    if "pattern" in names:  # a key syntax (label keys: [prefix/]name), as the model's key type checks it
        rules.append({"rule": f"self.all(k, k.matches('{names['pattern']}'))",
                      "message": f"keys must match {names['pattern']}"})
    for pattern in node.get("patternProperties") or {}:
        rules.append({"rule": f"self.all(k, k.matches({pattern!r}))", "message": f"keys must match {pattern}"})
    return {"x-kubernetes-validations": rules} if rules else {}


def _schema_of(model: type[api.WireModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


def openapi_schema() -> dict[str, Any]:
    spec = _schema_of(api.AcceptanceTestSpec)
    spec["default"] = {}
    spec["x-kubernetes-validations"] = api.SPEC_CEL_RULES
    status = _schema_of(api.AcceptanceTestStatus)
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return {
        "type": "object",
        "description": "A GPU cluster acceptance run: preflight, NCCL collectives and DDP training on "
        "the nodes under test, with the verdict and its evidence in status.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def build_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{api.PLURAL}.{api.GROUP}",
            "labels": {"app.kubernetes.io/name": "gpu-acceptance", "app.kubernetes.io/part-of": "gpu-acceptance"},
        },
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": ["gpu"],
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated by `gpu-acceptance crd` from the pydantic models; do not edit by hand.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120)
