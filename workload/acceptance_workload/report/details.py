"""What a check adds to the report model: its detail fields (report.<name>), and how the evidence holds each.

A check's package declares its details (checks.contract.Check.details) beside its parts; checks/report_model.py
walks the registry for them and assembles the Report (ReportBase with every check's details, in run order), and
the evidence (evidence.py) splits and joins each by what its Detail says, naming no check. The detail models
themselves may live in the check's package or, for the checks the report's own code reads (the headline's nccl and
ddp), in report/model.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import Field


def node_of(item: Any) -> str | None:
    """The node a detail's row belongs to: its `node` (a rank's, a GPU's, a node's own row)."""
    return item.node


@dataclass(frozen=True)
class Detail:
    """A field of the report one check writes, and how the evidence shards hold it.

    `name`: the report's field (`report.<name>`, camelCase on the wire); `annotation`: its type (a detail model or
    None, or a list of rows); `factory`: the default is `factory()` (a list field), else None.
    `rows`: where its rows of one node are, which split() spreads over the node shards (each row to its node's,
    `row_node(row)`; None: job-wide, kept in the job-wide shard) and assemble() joins again: the attribute of the
    detail holding them, "" when the field itself is the list of rows, None when the detail is job-wide only.
    `shrink`: the detail made smaller when a shard is over its budget (rows dropped, saying so); the details that
    have one give way in run order, the results' messages first.
    """

    name: str
    annotation: Any
    factory: Callable[[], Any] | None = None
    rows: str | None = None
    row_node: Callable[[Any], str | None] = node_of
    shrink: Callable[[Any], Any] | None = None

    def field(self) -> tuple[Any, Any]:
        """The pydantic field (annotation, FieldInfo) of the Report, its name on the wire as it is (camelCase would
        make "p2p" "p2P")."""
        if self.factory:
            return self.annotation, Field(default_factory=self.factory, alias=self.name)
        return self.annotation, Field(None, alias=self.name)
