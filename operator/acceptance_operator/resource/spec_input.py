"""A manifest as a user wrote it, read safely: size and YAML limits, one `spec.<field>: problem` line per mistake.

What `gpu-acceptance render FILE` and the operator (an InvalidSpec message) say about a spec that does not
validate; pure, no Kubernetes calls.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import ValidationError

from acceptance_operator.resource.api import (
    AcceptanceTest,
)

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
        path = _wire_path(tuple(e["loc"]), data, e["type"])
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


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# `render` reads at most this much, and refuses YAML whose aliases expand to more nodes than this:
# a manifest is a few KiB; a "billion laughs" document is a few hundred bytes that expand without end.
MAX_MANIFEST_BYTES = 1024 * 1024
MAX_YAML_NODES = 100_000


def _expanded_nodes(root: yaml.Node) -> int:
    """How many nodes the document has once every alias is expanded; RenderError past MAX_YAML_NODES or a cycle."""
    sizes: dict[int, int | None] = {}

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            known = sizes[key]
            if known is None:
                raise RenderError(["not valid YAML: an alias refers to a node that contains it"])
            return known
        sizes[key] = None
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        if n > MAX_YAML_NODES:
            raise RenderError([f"the YAML expands to more than {MAX_YAML_NODES} values (aliases repeated many "
                               "times?); an AcceptanceTest has a few hundred at most"])
        sizes[key] = n
        return n

    return size(root)


def _load_documents(text: str) -> list[Any]:
    """yaml.safe_load_all, bounded: input size, alias expansion and nesting depth."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise RenderError([f"the manifest is larger than {MAX_MANIFEST_BYTES} bytes; an AcceptanceTest is a few KiB"])
    loader = yaml.SafeLoader(text)
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            _expanded_nodes(node)
            docs.append(loader.construct_document(node))
        return docs
    except yaml.YAMLError as e:
        raise RenderError([f"not valid YAML: {e}"]) from e
    except RecursionError as e:
        raise RenderError(["not valid YAML for a manifest: nested too deeply"]) from e
    finally:
        loader.dispose()


def parse_test(text: str) -> AcceptanceTest:
    """The one AcceptanceTest in a YAML text, validated; RenderError says what is wrong, field by field."""
    docs = [d for d in _load_documents(text) if d is not None]
    if len(docs) != 1:
        raise RenderError([f"expected exactly one AcceptanceTest document, found {len(docs)}"])
    data = docs[0]
    if not isinstance(data, dict):
        raise RenderError([f"expected an AcceptanceTest object, found a YAML {type(data).__name__}"])
    try:
        test = AcceptanceTest.model_validate(data)
    except ValidationError as e:
        raise RenderError(validation_messages(e, data), data.get("spec")) from e
    name = test.metadata.name
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise RenderError([f"metadata.name: {name!r} is not a valid name: lowercase letters, digits, "
                           "'-' and '.', starting and ending with a letter or digit"])
    return test
