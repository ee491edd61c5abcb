"""A manifest's bytes as YAML documents, read strictly and within bounds (`render`, `local -f`).

Strict where kubectl and the API server are: the text is UTF-8 (or UTF-16 with its byte order mark, which YAML
readers, the API server's among them, take too) with no control character (YAML allows tab,
line breaks and printable characters only; a NUL, U+FFFE or binary data is named by its byte offset), and a
mapping never repeats a key (YAML says a key is unique; a second `nodes:` used to win silently). Bounded where
a hostile file would not be: its size, how many values its aliases expand to, how deeply it nests. Every
problem is a ManifestProblem with one line to show, never a traceback.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# `render` reads at most this much, and refuses YAML whose aliases expand to more nodes than this:
# a manifest is a few KiB; a "billion laughs" document is a few hundred bytes that expand without end.
MAX_MANIFEST_BYTES = 1024 * 1024
MAX_YAML_NODES = 100_000

# What YAML 1.1 (PyYAML's reader) and the API server's reader allow: tab, line feed, carriage return and
# printable characters; not C0/C1 controls (NEL excepted), surrogates, U+FFFE or U+FFFF.
_NOT_PRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


class ManifestProblem(Exception):
    """What is wrong with a manifest, one line each (the caller names the file)."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def decode(data: bytes) -> str:
    """The manifest's text: UTF-8 without control characters, else ManifestProblem naming the byte offset."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestProblem([f"the manifest is larger than {MAX_MANIFEST_BYTES} bytes; an AcceptanceTest is a "
                               "few KiB"])
    encoding = "utf-16" if data.startswith(_UTF16_BOMS) else "utf-8"  # as YAML readers (and kubectl) read it
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        if encoding == "utf-16":
            raise ManifestProblem([f"byte {e.start}: not UTF-16 text, though the file starts with a UTF-16 byte "
                                   "order mark; save it as UTF-8"]) from None
        raise ManifestProblem([f"byte {e.start}: 0x{data[e.start]:02x} is not UTF-8 (binary data, or text in "
                               "another encoding); a manifest is UTF-8 text"]) from None
    bad = _NOT_PRINTABLE.search(text)
    if bad:
        offset = len(text[:bad.start()].encode(encoding, "surrogatepass"))  # UTF-16: its byte order mark counted
        raise ManifestProblem([f"byte {offset}: character U+{ord(bad[0]):04X} is not allowed in YAML (a control "
                               "character or non-character); only tab, line breaks and printable text are"])
    return text


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping with the same key twice (Kubernetes' strict decoding does too)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class says so
                break
            if repeated:
                raise ManifestProblem([f"line {key_node.start_mark.line + 1}: duplicate key {key!r} (the mapping "
                                       "already has it); keep one"])
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_yaml_map)


def _expanded_nodes(root: yaml.Node) -> int:
    """How many nodes the document has once every alias is expanded; past MAX_YAML_NODES or a cycle: refused."""
    sizes: dict[int, int | None] = {}

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            known = sizes[key]
            if known is None:
                raise ManifestProblem(["not valid YAML: an alias refers to a node that contains it"])
            return known
        sizes[key] = None
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        if n > MAX_YAML_NODES:
            raise ManifestProblem([f"the YAML expands to more than {MAX_YAML_NODES} values (aliases repeated many "
                                   "times?); an AcceptanceTest has a few hundred at most"])
        sizes[key] = n
        return n

    return size(root)


def load_documents(text: str) -> list[Any]:
    """The YAML documents of `text`, strictly and within bounds (ManifestProblem otherwise)."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_MANIFEST_BYTES:
        raise ManifestProblem([f"the manifest is larger than {MAX_MANIFEST_BYTES} bytes; an AcceptanceTest is a "
                               "few KiB"])
    loader = _StrictLoader(text)
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            _expanded_nodes(node)
            docs.append(loader.construct_document(node))
        return docs
    except yaml.YAMLError as e:
        raise ManifestProblem([f"not valid YAML: {e}"]) from e
    except RecursionError as e:
        raise ManifestProblem(["not valid YAML for a manifest: nested too deeply"]) from e
    finally:
        loader.dispose()
