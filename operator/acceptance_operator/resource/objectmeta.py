"""What the API server checks of an AcceptanceTest beyond its spec's schema: apiVersion, kind and metadata.

`render` and `local -f` refuse what `kubectl apply` would: a document without apiVersion or kind, or of another
kind; metadata that is not an object with a valid name; a namespace that is not a DNS label; label and
annotation keys and values Kubernetes refuses (ValidateObjectMeta: qualified-name keys, label values of 63
characters, 256 KiB of annotations in all); metadata fields ObjectMeta does not have. And they read nulls as
the API server does: a null where the schema does not allow one is dropped before defaulting
(`nodes: null` is `nodes: 1`), see without_nulls.
"""

from __future__ import annotations

from typing import Any

from acceptance_operator.resource import podmeta
from acceptance_operator.resource.api import API_VERSION, KIND

MAX_NAME = 253
MAX_NAMESPACE = 63
MAX_ANNOTATIONS_BYTES = 256 * 1024  # Kubernetes' TotalAnnotationSizeLimitB: keys and values together
# ObjectMeta's fields (k8s.io/apimachinery/pkg/apis/meta/v1): anything else in metadata is an unknown field.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields",
})


def envelope_problems(doc: dict[str, Any]) -> list[str]:
    """One line per problem of the document's apiVersion, kind and metadata, as the API server would refuse them."""
    lines = [f"{field}: Field required" if doc.get(field) is None else f"{field}: Input should be {want!r}"
             for field, want in (("apiVersion", API_VERSION), ("kind", KIND)) if doc.get(field) != want]
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return [*lines, f"metadata: Field required, an object with at least a name (found {_kind_of(meta)})"]
    lines += [f"metadata.{key}: unknown field" for key in meta if key not in OBJECT_META_FIELDS]
    lines += _name_problems(meta)
    lines += _map_problems(meta, "labels", podmeta.label_value_problem)
    lines += _map_problems(meta, "annotations", None, lower=True)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
        if size > MAX_ANNOTATIONS_BYTES:
            lines.append(f"metadata.annotations: {size} bytes in all, more than Kubernetes' {MAX_ANNOTATIONS_BYTES}")
    return lines


def _kind_of(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


def _name_problems(meta: dict[str, Any]) -> list[str]:
    lines = []
    name = meta.get("name")
    if name is None:
        lines.append("metadata.name: Field required")
    elif not isinstance(name, str) or not name:
        lines.append(f"metadata.name: a name is a non-empty string, found {name!r}")
    elif len(name) > MAX_NAME or not podmeta.DNS_SUBDOMAIN_RE.match(name):
        lines.append(f"metadata.name: {name!r} is not a valid name: at most {MAX_NAME} lowercase letters, digits, "
                     "'-' and '.', starting and ending with a letter or digit")
    if meta.get("namespace") not in (None, ""):  # unset or empty: the namespace the request names
        namespace = meta["namespace"]
        if not isinstance(namespace, str) or len(namespace) > MAX_NAMESPACE or \
                not podmeta.DNS_SUBDOMAIN_RE.match(namespace) or "." in namespace:
            lines.append(f"metadata.namespace: {namespace!r} is not a namespace name: at most {MAX_NAMESPACE} "
                         "lowercase letters, digits and '-', starting and ending with a letter or digit")
    return lines


def _map_problems(meta: dict[str, Any], field: str, value_problem: Any, lower: bool = False) -> list[str]:
    """metadata.labels or .annotations: an object of string keys and string values with Kubernetes' syntax
    (an annotation key's syntax is checked lowercased, as Kubernetes checks it)."""
    if field not in meta or meta[field] is None:
        return []
    values = meta[field]
    if not isinstance(values, dict):
        return [f"metadata.{field}: an object of string keys and values, found {_kind_of(values)}"]
    lines = []
    for key, value in values.items():
        problem = podmeta.key_problem(key.lower() if lower else key) if isinstance(key, str) else \
            f"key {key!r}: a key is a string"
        if problem is None and not isinstance(value, str):
            problem = f"value of {key!r}: a string, found {value!r} (quote it)"
        if problem is None and value_problem is not None:
            problem = value_problem(value)
        if problem:
            lines.append(f"metadata.{field}: {problem}")
    return lines


def without_nulls(value: Any, schema: dict[str, Any]) -> Any:
    """`value` with every null the schema does not allow dropped, as the API server prunes them before defaulting.

    An object's fields follow their schema; a free-form object (x-kubernetes-preserve-unknown-fields, no
    properties) keeps what it holds, as the API server keeps it.
    """
    if isinstance(value, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        values = schema.get("additionalProperties")
        if props is None and not isinstance(values, dict):
            return value
        out = {}
        for key, item in value.items():
            child = props.get(key) if props is not None else values
            if child is None:  # an unknown field: kept, for the model to name
                out[key] = item
                continue
            if item is None and not child.get("nullable"):
                continue
            out[key] = without_nulls(item, child)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [without_nulls(item, schema["items"]) for item in value]
    return value
