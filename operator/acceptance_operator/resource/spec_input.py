"""A manifest as a user wrote it, read safely and strictly: one `field: problem` line per mistake.

What `gpu-acceptance render FILE`, `gpu-acceptance local -f FILE` and the operator (an InvalidSpec message) say
about a manifest or a spec that does not validate: the same verdict as the API server's (yamlread: the bytes
and the YAML; objectmeta: apiVersion, kind, metadata; the models: the spec). Pure, no Kubernetes calls.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from acceptance_operator.resource.api import API_VERSION, KIND, AcceptanceTest
from acceptance_operator.resource.objectmeta import envelope_problems, without_nulls
from acceptance_operator.resource.yamlread import MAX_MANIFEST_BYTES, ManifestProblem, decode, load_documents

__all__ = ["MAX_MANIFEST_BYTES", "RenderError", "parse_test", "problems_text", "validation_messages"]

# --------------------------------------------------------------------------- gpu-acceptance render


class RenderError(Exception):
    """A manifest that cannot be rendered; `lines` say what is wrong, one field each."""

    def __init__(self, lines: list[str], spec: Any = None):
        super().__init__("\n".join(lines))
        self.lines = lines
        self.spec = spec  # the spec as written, when the document was an object that did not validate


def _wire_path(loc: tuple[Any, ...], data: Any, error_type: str) -> str:
    """The error's location in the manifest, e.g. spec.checks.nccl.minBytes or spec.placement.tolerations[0].

    pydantic adds union-branch tags (int, str, ...) to locations; only steps that
    exist in the input are kept, plus the last one of a missing-field error.
    """
    parts: list[str] = []
    node = data
    for i, step in enumerate(loc):
        if isinstance(step, int) and isinstance(node, list) and 0 <= step < len(node):
            parts.append(f"[{step}]")
            node = node[step]
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            parts.append(f".{step}" if parts else step)
            node = node[step]
        elif error_type == "missing" and i == len(loc) - 1:
            parts.append(f".{step}" if parts else str(step))
    return "".join(parts)


# Messages of cross-field rules start with the field they are about: "checks: ...", "[0].mountPath ...".
_MESSAGE_PATH = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*): (.*)$", re.S)
_MESSAGE_INDEX = re.compile(r"^(\[\d+\](?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*) (.*)$", re.S)


def validation_messages(error: ValidationError, data: Any) -> list[str]:
    """One `field: problem` line per error, the field in camelCase wire form as in the YAML."""
    lines: list[str] = []
    for e in error.errors():
        loc = tuple(e["loc"])
        if loc[-1:] == ("[key]",) and e["msg"].startswith("Value error, key "):
            loc = loc[:-2]  # a map key's syntax: the map is the field, the message quotes the key
        path = _wire_path(loc, data, e["type"])
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        else:
            msg = e["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
            # Cross-field rules name their field first ("checks: enable ..."): fold it into the path.
            m = _MESSAGE_PATH.match(msg) or _MESSAGE_INDEX.match(msg)
            if m and not path.endswith(m[1]):
                sep = "" if m[1].startswith("[") or not path else "."
                path, msg = f"{path}{sep}{m[1]}", m[2]
        line = f"{path or '(document)'}: {msg}"
        if line not in lines:
            lines.append(line)
    return lines


MAX_PROBLEMS_TEXT = 4096


def problems_text(lines: list[str], limit: int = MAX_PROBLEMS_TEXT) -> str:
    """The lines as one message for a condition or event, within `limit` characters (how many more, if cut)."""
    text = ""
    for i, line in enumerate(lines):
        joined = f"{text}; {line}" if text else line
        if len(joined) > limit:
            rest = f"; and {len(lines) - i} more"
            return (text or line[: limit - len(rest)]) + rest
        text = joined
    return text


# The documents a manifest may hold besides spec: the envelope (objectmeta.py) and a status, which the API server
# drops from a created object (the status subresource is the operator's to write).
_TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec", "status")


@functools.cache
def _spec_schema() -> dict[str, Any]:
    """The CRD's schema of spec, generated from the models: where the API server allows a null."""
    from acceptance_operator.resource.crd import openapi_schema

    return openapi_schema()["properties"]["spec"]


def read_documents(source: str | bytes) -> list[Any]:
    """The YAML documents of a manifest's bytes (or text), strictly (yamlread.py); RenderError names the problem."""
    data = source if isinstance(source, bytes) else source.encode("utf-8", "surrogatepass")
    try:
        return [d for d in load_documents(decode(data)) if d is not None]
    except ManifestProblem as e:
        raise RenderError(e.lines) from e


def _turn_on(spec: Any, checks_on: Mapping[str, Mapping[str, Any]] | None) -> None:
    """spec.checks.<name> enabled, with the fields given, for each name, where the spec and its checks are objects
    (else left to the models to refuse)."""
    if not checks_on or not isinstance(spec, dict):
        return
    checks = spec.setdefault("checks", {})
    if not isinstance(checks, dict):
        return
    for name, fields in checks_on.items():
        entry = checks.get(name)
        if entry is None or isinstance(entry, dict):
            checks[name] = {**(entry or {}), **fields, "enabled": True}


def parse_test(source: str | bytes, turn_on: Mapping[str, Mapping[str, Any]] | None = None) -> AcceptanceTest:
    """The one AcceptanceTest in a manifest, validated as the API server and the operator would; RenderError says
    what is wrong, field by field: the bytes and YAML (yamlread), apiVersion, kind and metadata (objectmeta), the
    spec (the models, with nulls read as the API server reads them). `turn_on`: checks a command line enables
    (`local --soak`), set in spec.checks before the spec is judged."""
    docs = read_documents(source)
    if len(docs) != 1:
        raise RenderError([f"expected exactly one AcceptanceTest document, found {len(docs)}"])
    doc = docs[0]
    if not isinstance(doc, dict):
        raise RenderError([f"expected an AcceptanceTest object, found a YAML {type(doc).__name__}"])
    lines = [f"{key}: unknown field" for key in doc if key not in _TOP_LEVEL]
    envelope = envelope_problems(doc)
    spec = doc.get("spec")
    meta = doc["metadata"] if not envelope else {"name": "x"}
    data = {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k) is not None},
            "spec": without_nulls(spec, _spec_schema()) if spec is not None else {}}
    _turn_on(data["spec"], turn_on)
    try:
        test = AcceptanceTest.model_validate(data)
    except ValidationError as e:
        raise RenderError([*lines, *envelope, *validation_messages(e, data)], spec) from e
    if lines or envelope:
        raise RenderError([*lines, *envelope], spec)
    return test
