"""The Kubernetes objects a spec passes into its pods (tolerations, affinity, volumes, mounts), typed and bounded.

Typed rather than free-form so the API server refuses a malformed one at
admission (`podAntiAffinity: 5` used to reach the builders and raise there on
every reconcile), and so every list and string has a bound in the CRD. Field
names and enums are Kubernetes' own (core/v1); `to_wire()` gives back exactly
what the user wrote, for the builders to pass on. A volume keeps its source
free-form (there are dozens of kinds), but must be one object beside its name;
the spec's size budget (api.MAX_SPEC_BYTES) bounds what is inside.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from acceptance_operator.resource import podmeta
from acceptance_operator.workload import WireModel, text

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _syntax(problem: Callable[[str], str | None], pattern: str, max_length: int, min_length: int = 0) -> Any:
    """A string Kubernetes checks the syntax of: `problem` says what is wrong in the model, `pattern` in the CRD."""
    def check(value: str) -> str:
        found = problem(value)
        if found:
            raise ValueError(found)
        return value

    schema = {"type": "string", "maxLength": max_length, "pattern": pattern, **({"minLength": min_length}
                                                                                if min_length else {})}
    return Annotated[text(max_length, min_length=min_length), AfterValidator(check), WithJsonSchema(schema)]


def _dns_problem(what: str, regex: str, max_length: int) -> Callable[[str], str | None]:
    compiled = re.compile(regex)
    return lambda value: None if len(value) <= max_length and compiled.match(value) else (
        f"{value!r} is not a {what}: at most {max_length} lowercase letters, digits, "
        f"{'dots and ' if what == 'DNS subdomain name' else ''}'-', starting and ending with a letter or digit")


# Label keys are [prefix/]name: a DNS subdomain (<= 253) and a name (<= 63); values at most 63 characters.
LabelKey = _syntax(podmeta.key_problem, podmeta.QUALIFIED_NAME, podmeta.MAX_KEY, 1)
LabelValue = _syntax(podmeta.label_value_problem, podmeta.LABEL_VALUE, podmeta.MAX_LABEL_VALUE)
# Object names (Secrets, ServiceAccounts, PriorityClasses, schedulers): DNS subdomains; volume names: DNS labels.
Name = _syntax(_dns_problem("DNS subdomain name", podmeta.DNS_SUBDOMAIN_RE.pattern, 253),
               podmeta.DNS_SUBDOMAIN_RE.pattern, 253, 1)
DnsLabel = _syntax(_dns_problem("DNS label", DNS_LABEL, 63), DNS_LABEL, 63, 1)
Path = text(4096, min_length=1)
# A Kueue LocalQueue's name as the value of its queue-name label: a DNS subdomain that is also a label value.
QueueName = text(63, min_length=1, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# Kubernetes quantities (resources.cpu, memory, extra), as its resource.Quantity parses them; a pod's requests and
# limits are never negative.
QUANTITY = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkKMGTPE]|[KMGTPE]i)?$"


def _quantity(value: Any) -> Any:
    """A request Kubernetes accepts: an integer at least 0, or a quantity string (QUANTITY) of at most 64 characters.

    Another type is left to the union's own type errors."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return value
    if (isinstance(value, int) and value >= 0) or (isinstance(value, str) and len(value) <= 64
                                                   and re.match(QUANTITY, value)):
        return value
    raise ValueError(f"{value!r} is not a Kubernetes quantity: a non-negative number with an optional suffix, "
                     "e.g. 32, 500m, 512Gi")


Quantity = Annotated[
    int | str, BeforeValidator(_quantity),
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 0, "maxLength": 64,
                    "pattern": QUANTITY}),
]

MAX_TERMS = 32
MAX_VALUES = 64


class LabelSelectorRequirement(WireModel):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] | None = Field(None, max_length=MAX_VALUES)


class LabelSelector(WireModel):
    match_labels: dict[LabelKey, LabelValue] | None = Field(None, max_length=MAX_VALUES)
    match_expressions: list[LabelSelectorRequirement] | None = Field(None, max_length=MAX_TERMS)


class NodeSelectorRequirement(WireModel):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[LabelValue] | None = Field(None, max_length=MAX_VALUES)


class NodeSelectorTerm(WireModel):
    match_expressions: list[NodeSelectorRequirement] | None = Field(None, max_length=MAX_TERMS)
    match_fields: list[NodeSelectorRequirement] | None = Field(None, max_length=MAX_TERMS)


class NodeSelector(WireModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(max_length=MAX_TERMS)


class PreferredSchedulingTerm(WireModel):
    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(WireModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = Field(
        None, max_length=MAX_TERMS)


class PodAffinityTerm(WireModel):
    label_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: list[Name] | None = Field(None, max_length=MAX_VALUES)
    topology_key: LabelKey
    match_label_keys: list[LabelKey] | None = Field(None, max_length=MAX_VALUES)
    mismatch_label_keys: list[LabelKey] | None = Field(None, max_length=MAX_VALUES)


class WeightedPodAffinityTerm(WireModel):
    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(WireModel):
    """podAffinity and podAntiAffinity have the same shape."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = Field(
        None, max_length=MAX_TERMS)
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = Field(
        None, max_length=MAX_TERMS)


class Affinity(WireModel):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


# What the API server refuses of a pod's toleration (ValidateTolerations), as CEL rules and as the model's check.
TOLERATION_RULES: list[dict[str, str]] = [
    {"rule": "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
     "message": "value must be empty when operator is Exists", "fieldPath": ".value"},
    {"rule": "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
     "message": "operator must be Exists when key is empty (a toleration of every taint)", "fieldPath": ".operator"},
    {"rule": "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
     "message": "tolerationSeconds needs effect NoExecute (only NoExecute taints evict)",
     "fieldPath": ".tolerationSeconds"},
]


class Toleration(WireModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": TOLERATION_RULES})
    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    toleration_seconds: int | None = Field(None, ge=-(2**31), le=2**31)

    @model_validator(mode="after")
    def _as_kubernetes_validates(self) -> Toleration:
        """TOLERATION_RULES: a pod with this toleration would not be created."""
        if self.operator == "Exists" and self.value:
            raise ValueError(f"value: {TOLERATION_RULES[0]['message']}")
        if not self.key and self.operator != "Exists":
            raise ValueError(f"operator: {TOLERATION_RULES[1]['message']}")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError(f"tolerationSeconds: {TOLERATION_RULES[2]['message']}")
        return self


class VolumeMount(WireModel):
    name: DnsLabel
    mount_path: Path
    sub_path: text(4096) | None = None
    sub_path_expr: text(4096) | None = None
    read_only: bool | None = None
    mount_propagation: Literal["None", "HostToContainer", "Bidirectional"] | None = None
    recursive_read_only: Literal["Disabled", "IfPossible", "Enabled"] | None = None


def no_default(schema: dict[str, Any]) -> None:
    """A field's json_schema_extra: no default in the CRD's schema, so the API server does not fill in what the
    operator decides per cluster (spec.backend, spec.profile); the model's default is what `render` assumes."""
    schema.pop("default", None)


def one_source(extra: dict[str, Any] | None, what: str) -> str:
    """The kind of the one volume source in a model's extra fields (ValueError naming what is wrong)."""
    sources = dict(extra or {})
    if len(sources) != 1:
        raise ValueError(f"{what} (emptyDir, persistentVolumeClaim, configMap, ...); found {len(sources)}: "
                         f"{', '.join(sources) or 'none'}")
    ((kind, value),) = sources.items()
    if not isinstance(value, dict):
        raise ValueError(f"{kind}: a volume source is an object, not {type(value).__name__}")
    if _depth(value) > MAX_SOURCE_DEPTH:
        raise ValueError(f"{kind}: nested more than {MAX_SOURCE_DEPTH} levels deep; a volume source (csi's "
                         "volumeAttributes, a projected volume) is a few levels at most")
    return kind


# A free-form volume source is bounded in depth, not only in size: a deeper one only fails to serialize later.
MAX_SOURCE_DEPTH = 16


def _depth(value: Any) -> int:
    """How deeply `value` nests objects and lists (a scalar: 0), without recursion (it may be very deep)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_SOURCE_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


class Volume(WireModel):
    """A pod volume: its name and exactly one source (emptyDir, persistentVolumeClaim, configMap, ...) as written."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"maxProperties": 2, "minProperties": 2})
    name: DnsLabel

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        one_source(self.model_extra, "a volume has its name and exactly one source")
        return self

    @property
    def source(self) -> str:
        """The kind of source, e.g. hostPath."""
        return next(iter(self.model_extra or {}))


def wire_list(items: list[Any] | None) -> list[dict[str, Any]]:
    return [item.to_wire() for item in items or []]
