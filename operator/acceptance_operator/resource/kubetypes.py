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

from typing import Any, Literal

from acceptance_workload.contract.wire import WireModel, text
from pydantic import ConfigDict, Field, model_validator

# Label keys are [prefix/]name: a DNS subdomain (<= 253) and a name (<= 63).
LabelKey = text(317, min_length=1)
LabelValue = text(63)
Name = text(253, min_length=1)
DnsLabel = text(63, min_length=1)
Path = text(4096, min_length=1)
# A Kueue LocalQueue's name as the value of its queue-name label: a DNS subdomain that is also a label value.
QueueName = text(63, min_length=1, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
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


class Toleration(WireModel):
    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    toleration_seconds: int | None = Field(None, ge=-(2**31), le=2**31)


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
    return kind


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
