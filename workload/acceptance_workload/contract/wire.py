"""Base model for everything that travels as Kubernetes JSON.

camelCase on the wire, snake_case in Python, and unknown fields rejected so a
misspelled field in a manifest is an error instead of a silently ignored line.
Strict, as the CRD's schema is: a value of the wrong JSON type (`nodes: "2"`,
`sweep: "yes"`, `iters: true`) is refused, never converted, so `render` and the
API server give the same verdict. Timestamps are the one exception: JSON has no
date type, so a Timestamp is an RFC 3339 string on the wire.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict, StringConstraints, WithJsonSchema
from pydantic.alias_generators import to_camel

# A time on the wire: an RFC 3339 string (JSON has no date type), read as a datetime even in a strict model.
Timestamp = Annotated[datetime, Strict(False)]


class WireModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        strict=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object as the API server stores it (camelCase, no nulls)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


_QUANTITY = re.compile(r"^(?P<num>[0-9]+(?:\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?$")
_FACTORS = {
    None: 1,
    "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}


def parse_bytes(value: int | str) -> int:
    """A Kubernetes-style quantity ("64Gi", "1G", 8) as a whole number of bytes."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 1Gi or 1048576, not a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"size must not be negative, got {value}")
        return value
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a size: use a whole number of bytes or a quantity such as 64Mi or 1Gi")
    return int(float(match["num"]) * _FACTORS[match["suffix"]])


def format_bytes(n: int) -> str:
    """Shortest exact binary quantity for n bytes (8 -> "8", 1048576 -> "1Mi")."""
    for suffix in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _FACTORS[suffix]
        if n >= factor and n % factor == 0:
            return f"{n // factor}{suffix}"
    return str(n)


# Longest size string: "4294967296Ki" and its like; anything longer is not a size anyone means.
MAX_SIZE_TEXT = 32


def _size_value(value: Any) -> float:
    """The size as the CRD's CEL rule computes it (size_cel): the number times its suffix's factor, unrounded."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a size such as 1Gi or 1048576 (an integer or a string), not {value!r}")
    if isinstance(value, int):
        parse_bytes(value)  # refuses a negative one
        return float(value)
    match = _QUANTITY.match(value)  # exactly as written: the CRD's pattern allows no space around it
    if not match:
        raise ValueError(f"{value!r} is not a size: use a whole number of bytes or a quantity such as 64Mi or 1Gi")
    return float(match["num"]) * _FACTORS[match["suffix"]]


def _size_check(maximum: int) -> Any:
    def check(value: Any) -> Any:
        if isinstance(value, str) and len(value) > MAX_SIZE_TEXT:
            raise ValueError(f"a size has at most {MAX_SIZE_TEXT} characters")
        if _size_value(value) > maximum:
            raise ValueError(f"{value!r} is more than the largest allowed size, {format_bytes(maximum)}")
        return value
    return check


# What the API server can check of a size at admission (the CRD carries it): a
# non-negative integer, or a string parse_bytes accepts.
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?$"
MAX_SIZE = 2**50  # 1 PiB: no size in a spec comes near it


def size_cel(expr: str) -> str:
    """A CEL expression (a double) for the size `expr` holds, int or quantity string, as _size_value computes it.

    The CRD's rules compare sizes with it (a string's bounds, minBytes <= maxBytes): the schema's minimum and
    maximum bound only the integer form. Suffixes are tried longest first (Ki before K).
    """
    factors = " : ".join(f"{expr}.endsWith('{suffix}') ? {float(factor)!r}"
                         for suffix, factor in sorted(((k, v) for k, v in _FACTORS.items() if k),
                                                      key=lambda kv: -len(kv[0])))
    return (f"(type({expr}) == int ? double({expr}) : "
            f"double({expr}.find('^[0-9]+([.][0-9]+)?')) * ({factors} : 1.0))")


def byte_size(maximum: int = MAX_SIZE, minimum: int = 0) -> Any:
    """A size on the wire: int or quantity string (x-kubernetes-int-or-string), kept as written, at most `maximum`.

    The schema bounds the integer form and the string's length and syntax; a CEL rule bounds the string's value
    (at most `maximum`, at least `minimum`), so the API server refuses what the model refuses. A check whose
    size has a floor (`minimum`) says so in its own validator, with the reason.
    """
    value = size_cel("self")
    rule = f"type(self) == int || ({value} <= {float(maximum)!r}" + (
        f" && {value} >= {float(minimum)!r})" if minimum else ")")
    message = f"at most {format_bytes(maximum)}" + (f" and at least {format_bytes(minimum)}" if minimum else "")
    return Annotated[
        int | str,
        BeforeValidator(_size_check(maximum)),
        WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": minimum, "maximum": maximum,
                        "maxLength": MAX_SIZE_TEXT, "pattern": QUANTITY_PATTERN,
                        "x-kubernetes-validations": [{"rule": rule, "message": f"a size {message}"}]}),
    ]


ByteSize = byte_size()


def text(max_length: int, *, min_length: int = 0, pattern: str | None = None) -> Any:
    """A string with the bounds the schema (maxLength, pattern) and the model both enforce."""
    return Annotated[str, StringConstraints(min_length=min_length or None, max_length=max_length, pattern=pattern)]


def version_tuple(text: str) -> tuple[int, ...]:
    """'535.104.05' -> (535, 104, 5); non-numeric tails are ignored ('12.4+cu' -> (12, 4))."""
    out = []
    for part in str(text).split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)
