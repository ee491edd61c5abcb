"""Manifests mutated from the examples, as a hostile user would write them: deterministic (a fixed seed).

Each Case is the bytes `render` reads and the API server is sent, with their content type: JSON for mutations of
the document's structure (type swaps, numbers out of range, bad names and keys, deletions, unknown fields,
nesting, strings with control characters: JSON is YAML too, so both read the same values), YAML text for the
mutations only text can carry (repeated keys, control bytes, NUL, U+FFFE, binary data, UTF-16).
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
JSON, YAML = "application/json", "application/yaml"

# What a swapped value becomes: the wrong JSON type, the right type with a wrong value, nothing.
SWAPS: list[Any] = ["2", 2, True, "yes", 1.5, -1, 0, 10**13, "", "x", [], {}, None, "a\u0001b", [1], {"k": "v"},
                    "1Gi", " 1Gi", "true"]
NUMBERS = [0, -1, 1, 2**31, 2**53, 65, 4097, 100_001, 7 * 86400 + 1]
STRINGS = ["", " x", "Bad_Name!", "x" * 64, "x" * 254, "a\u0001b", "a\nb", "-x-", "UPPER", "a/b/c", "x.y",
           "* * * * * *", "61 * * * *", "0 3 * * *", "-1Gi", "2Pi", "512Ki", "/dev/shm", "relative/path"]
NAMES = ["Bad_Name", "a" * 254, "", 5, None, "x.y", "-x", "ok-name"]
NAMESPACES = ["Bad_NS", "x" * 64, "-x", 5, "a.b"]
LABELS = [{"bad key!": "x"}, {"a": "bad value!"}, {"a": 1}, {"a" * 64: "x"}, {"example.com/x": "y"},
          {"Example.com/x": "y"}, {"a": ""}, None, "x"]
# The minimal inputs (issue 54), each put into every example's spec.
TARGETED: list[tuple[str, Any]] = [
    ("nodes", "2"), ("sweep", "yes"), ("checks.nccl.crossCheck", 1), ("checks.gpu.iters", True),
    ("checks.gpu.hbmBytes", " 1Gi"), ("checks.gpu.hbmBytes", "2Pi"), ("checks.gpu.hbmBytes", "512Ki"),
    ("checks.gpu.hbmBytes", 1024), ("checks.nccl.minBytes", "1Gi"), ("checks.nccl.maxBytes", "1Ki"),
    ("checks.nccl.minBytes", 0), ("checks.storage.throughputBytes", "1Mi"), ("checks.nccl.maxBytes", "64Gi"),
    ("placement.tolerations", [{"operator": "Exists", "value": "x"}]),
    ("placement.tolerations", [{"key": "bad key!", "operator": "Exists"}]),
    ("placement.tolerations", [{"key": "a", "tolerationSeconds": 5, "effect": "NoSchedule"}]),
    ("placement.tolerations", [{"value": "x"}]),
    ("placement.nodeSelector", {"bad key!": "x"}), ("placement.nodeSelector", {"a": "bad value!"}),
    ("placement.priorityClassName", "Bad_Name!"), ("placement.schedulerName", "UPPER"),
    ("resources.memory", "-1Gi"), ("resources.cpu", -1), ("resources.extra", {"bad key!": 1}),
    ("pod.volumes", [{"name": "Data_Vol", "nfs": {"server": "s", "path": "/"}}]),
    ("pod.volumes", [{"name": "gpu-acceptance-x", "nfs": {"server": "s", "path": "/"}}]),
    ("pod.volumeMounts", [{"name": "data", "mountPath": "/data"}]),
    ("pod.volumeMounts", [{"name": "data", "mountPath": "/dev/shm/x"}]),
    ("pod.imagePullSecrets", ["Bad_Secret"]),
    ("schedule", "* * * * * *"), ("schedule", "61 * * * *"), ("schedule", "x"), ("schedule", "0 3 * * *"),
    ("storage", {"volume": {"hostPath": {"path": "/x"}}}), ("storage", {"volume": {"emptyDir": {}}}),
    ("storage", {"volume": {"nfs": {"server": "s", "path": "/"}}, "mountPath": "data"}),
    ("storage", {"volume": {"nfs": {"server": "s", "path": "/"}}, "mountPath": "/"}),
    ("storage", {"volume": {"nfs": {"server": "s", "path": "/"}}, "mountPath": "/dev/shm"}),
    ("nodes", None), ("network", "eth0"), ("network", ["eth0"]), ("nodez", 2),
    # What only the operator refuses (test_manifest_agreement.DOCUMENTED): each is seen at least once.
    ("schedule", "0 0 31 2 *"), ("schedule", "5-1 * * * *"), ("image", "registry.example/other:1"),
    ("pod.env", {f"BIG_{i}": "x" * 8000 for i in range(9)}),
    ("pod.volumes", [{"name": "data", "nfs": "server:/export"}]),
]


@dataclass(frozen=True)
class Case:
    """One manifest: what was done to which example, and the bytes both are given."""

    what: str
    body: bytes
    content_type: str
    namespace: str  # where kubectl would send it: the namespace the manifest names, else the current one


def _paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path into the document (keys and list indexes), containers and leaves alike."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


def _get(doc: Any, path: tuple) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> None:
    """Set the value at `path`, creating the objects on the way (a targeted field the example leaves out)."""
    for step in path[:-1]:
        if isinstance(doc, dict) and not isinstance(doc.get(step), (dict, list)):
            doc[step] = {}
        doc = doc[step]
    doc[path[-1]] = value


def _nested(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        out = {"a": out}
    return out


class Mutator:
    """The structural mutations of one example (a document), drawn from `rng`."""

    def __init__(self, doc: dict[str, Any], rng: random.Random):
        self.doc, self.rng = doc, rng
        self.paths = list(_paths(doc))

    def one(self) -> tuple[str, dict[str, Any]]:
        doc = copy.deepcopy(self.doc)
        op = self.rng.choice(["swap", "swap", "delete", "unknown", "number", "string", "nest", "metadata"])
        return getattr(self, f"_{op}")(doc)

    def _swap(self, doc: dict) -> tuple[str, dict]:
        path, value = self.rng.choice(self.paths), self.rng.choice(SWAPS)
        _set(doc, path, copy.deepcopy(value))
        return f"swap {_dotted(path)}={value!r}", doc

    def _delete(self, doc: dict) -> tuple[str, dict]:
        path = self.rng.choice(self.paths)
        del _get(doc, path[:-1])[path[-1]]
        return f"delete {_dotted(path)}", doc

    def _unknown(self, doc: dict) -> tuple[str, dict]:
        objects = [()] + [p for p in self.paths if isinstance(_get(doc, p), dict)]
        path = self.rng.choice(objects)
        key = self.rng.choice(["nodez", "Bad Key!", "enabled", "x"])
        _get(doc, path)[key] = 1
        return f"add {_dotted((*path, key))}=1", doc

    def _number(self, doc: dict) -> tuple[str, dict]:
        leaves = [p for p in self.paths if type(_get(doc, p)) in (int, float)] or self.paths
        path, value = self.rng.choice(leaves), self.rng.choice(NUMBERS)
        _set(doc, path, value)
        return f"number {_dotted(path)}={value}", doc

    def _string(self, doc: dict) -> tuple[str, dict]:
        leaves = [p for p in self.paths if isinstance(_get(doc, p), str)] or self.paths
        path, value = self.rng.choice(leaves), self.rng.choice(STRINGS)
        _set(doc, path, value)
        return f"string {_dotted(path)}={value[:20]!r}", doc

    def _nest(self, doc: dict) -> tuple[str, dict]:
        depth = self.rng.choice([3, 20, 100])
        if self.rng.random() < 0.5:
            source = {"name": "deep", "csi": {"driver": "d", "volumeAttributes": _nested(depth)}}
            _set(doc, ("spec", "pod", "volumes"), [source])
            return f"nest spec.pod.volumes[0].csi depth {depth}", doc
        objects = [p for p in self.paths if isinstance(_get(doc, p), dict)]
        path = self.rng.choice(objects)
        _get(doc, path)["deep"] = _nested(depth)
        return f"nest {_dotted(path)}.deep depth {depth}", doc

    def _metadata(self, doc: dict) -> tuple[str, dict]:
        field = self.rng.choice(["name", "namespace", "labels", "annotations"])
        meta = doc.setdefault("metadata", {})
        value = self.rng.choice({"name": NAMES, "namespace": NAMESPACES, "labels": LABELS,
                                 "annotations": [*LABELS, {"a": "x" * 300 * 1024}, {"a": "x" * 200 * 1024}]}[field])
        meta[field] = copy.deepcopy(value)
        return f"metadata.{field}={str(value)[:30]!r}", doc


def _dotted(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _textual(text: str, rng: random.Random) -> list[tuple[str, bytes]]:
    """Mutations only text carries: a repeated key, control bytes, NUL, U+FFFE, invalid UTF-8, UTF-16."""
    out = []
    lines = text.splitlines(keepends=True)
    keyed = [i for i, line in enumerate(lines) if re.match(r"^\s*[A-Za-z][\w.-]*: \S", line)]
    for i in rng.sample(keyed, min(3, len(keyed))):
        out.append((f"duplicate line {i + 1}", "".join([*lines[:i + 1], lines[i], *lines[i + 1:]]).encode()))
    data = text.encode()
    for bad in (b"\x01", b"\x00", "\ufffe".encode(), b"\xff", b"\x1b[31m", b"\x7f"):
        at = rng.randrange(len(data))
        out.append((f"bytes {bad!r} at {at}", data[:at] + bad + data[at:]))
    out.append(("utf-16", text.encode("utf-16")))
    out.append(("binary", bytes(rng.randrange(256) for _ in range(64))))
    return out


def cases(namespace: str, seed: int = 54, per_example: int = 90) -> list[Case]:
    """Every example mutated `per_example` times (plus the issue's minimal inputs and the textual mutations)."""
    rng = random.Random(seed)
    out = []
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        doc["metadata"]["namespace"] = namespace
        out.append(_json(f"{path.stem}: as it ships", doc, namespace))
        for field, value in TARGETED:
            mutated = copy.deepcopy(doc)
            _set(mutated, ("spec", *field.split(".")), copy.deepcopy(value))
            out.append(_json(f"{path.stem}: spec.{field}={value!r}", mutated, namespace))
        mutator = Mutator(doc, rng)
        for _ in range(per_example):
            what, mutated = mutator.one()
            out.append(_json(f"{path.stem}: {what}", mutated, namespace))
        text = yaml.safe_dump(doc, sort_keys=False)
        out += [Case(f"{path.stem}: {what}", body, YAML, namespace) for what, body in _textual(text, rng)]
    return out


def _json(what: str, doc: Any, namespace: str) -> Case:
    """A document sent as JSON, to the namespace it names when that is a namespace's name (`true`, `x`)."""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    named = meta.get("namespace") if isinstance(meta, dict) else None
    valid = isinstance(named, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", named)
    return Case(what, json.dumps(doc).encode(), JSON, named if valid else namespace)
