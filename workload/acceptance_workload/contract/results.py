"""The one shape every check's results take, and how one is judged: the contract between the checks, the rule
table (rules.py) that judges them and the report (report/model.py) that gathers them.

Here rather than in the report so that the rule table, which the operator's re-judging shares, needs nothing of
the report but this: the spec family stays below the report family.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

from acceptance_workload.contract.wire import WireModel

# The checks' names in run order, as the registry hands them down when it is built (declare_checks); empty until then.
_CHECK_NAMES: list[str] = []


def declare_checks(names: Iterable[str]) -> None:
    """The registry (checks/registry.py) hands its names down here once it is built.

    The contract says what a check name is; which names exist is the registry's to say, and a new check is its
    package and one line there. The registry sits above the contract (every check imports the contract), so the
    contract cannot import it: the registry, which knows the names, declares them, as a plugin registers with its
    host. Every reader of a report has it built (the report model is assembled from it), the CRD too.
    """
    _CHECK_NAMES[:] = names


def check_names() -> tuple[str, ...]:
    """The checks' names in run order: the registry's (checks/registry.py), as it declared them."""
    if not _CHECK_NAMES:
        raise LookupError("no check names are declared yet: they are the registry's, which declares them when "
                          "acceptance_workload.checks.registry is imported; import it before reading a result")
    return tuple(_CHECK_NAMES)


def _known(name: str) -> str:
    if name not in check_names():
        raise ValueError(f"no check is called {name!r}; the checks are {', '.join(check_names())}")
    return name


class _OneOfTheChecks:
    """A check name: a string the registry lists, and in JSON schema (the CRD) an enum of them in run order."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(_known, core_schema.str_schema())

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {"enum": list(check_names()), "type": "string"}


CheckName = Annotated[str, _OneOfTheChecks]
Comparison = Literal["ge", "le", "eq", "info"]


class CheckResult(WireModel):
    """One measurement judged against one threshold, on one node/GPU or on the whole job."""

    check: CheckName
    name: str = Field(description="What was measured, e.g. gpu_count, all_reduce_busbw, throughput_per_gpu.")
    value: float | None = Field(None, description="The measurement; null when it could not be taken.")
    unit: str = ""
    threshold: float | None = None
    comparison: Comparison = Field("ge", description="ge: value >= threshold; le: <=; eq: ==; info: not judged.")
    observed: str | None = Field(None, description="Textual evidence, e.g. the GPU name NVML reported.")
    expected: str | None = None
    passed: bool
    message: str = ""
    node: str | None = Field(None, description="Node the measurement belongs to; null for the whole job.")
    gpu: int | None = Field(None, description="GPU index on that node, where one GPU is to blame.")
    estimated: bool | None = Field(
        None, description="True when the threshold is the profile's estimate, not yet a measured floor."
    )


ESTIMATED_SUFFIX = " [estimated threshold]"


def judge(value: float | None, threshold: float | None, comparison: Comparison) -> bool:
    """Pass/fail of one measurement; a missing measurement never passes."""
    if value is None:
        return False
    if threshold is None or comparison == "info":
        return True
    if comparison == "ge":
        return value >= threshold
    if comparison == "le":
        return value <= threshold
    return value == threshold
