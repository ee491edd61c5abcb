"""An AcceptanceTest file as `render` and `local -f` read it: its bytes, then one verdict on them.

`gpu-acceptance render FILE` and `gpu-acceptance local -f FILE` refuse the same manifests, the ones the API
server refuses (resource/spec_input.parse_test): the workload's local run does not import the operator, so
`gpu-acceptance local` hands it manifest_spec. Nothing heavy is imported until a file is read: a local run
without -f needs neither pyyaml nor the operator's extra.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def read_manifest(path: str) -> bytes:
    """The file (or stdin for -) as bytes, at most one byte past MAX_MANIFEST_BYTES (enough to tell it is too large).

    Bytes, not text: the strict reader (yamlread.decode) names the offset of a byte that is not UTF-8 text.
    """
    from acceptance_operator.resource.yamlread import MAX_MANIFEST_BYTES

    if path == "-":
        return sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
    with Path(path).open("rb") as f:
        return f.read(MAX_MANIFEST_BYTES + 1)


def manifest_spec(path: str, turn_on: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """`local -f`: the manifest read and validated as `render` reads it, its spec as written (unset fields left out);
    `turn_on`: checks the command line enables (`--soak` with its duration, `--fsdp`), judged as the run has them.

    ValueError with the message to print, naming the file, when it cannot be read or is not a valid AcceptanceTest.
    """
    try:
        from acceptance_operator.resource.spec_input import RenderError, parse_test
    except ImportError as e:
        raise ValueError(f"reading a manifest needs the operator's extra (pip install 'gpu-acceptance[operator]'): "
                         f"{e}") from None
    source = "standard input" if path == "-" else path
    try:
        test = parse_test(read_manifest(path), turn_on=turn_on)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    except RenderError as e:
        raise ValueError("\n  ".join([f"{source} is not a valid AcceptanceTest:", *e.lines])) from None
    return test.spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
