"""A check's own part of the operator's re-judging: what only the check knows of how its results are judged again.

The operator re-judges every report (operator judging/rejudge.py) from the rule table alone for the kinds of row
every check shares (a measured value, a version, a GPU model, a transport, a ratio to the node's GPUs, a culprit).
What only one check knows (how nccl's inter-node rows are recomputed from its localisation pairs, which of its
failures says the whole job failed, which of its details' node rows the verdict reads) is that check's
`Rejudging`, its CHECK's `rejudge` hook (checks/contract.Check), which the operator finds by walking the registry as
it does for `required`: it names no check itself.

Here, in the contract, so that a check's package (below the operator) can say it in the operator's terms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from acceptance_workload.contract.results import CheckResult, Comparison


@dataclass(frozen=True)
class Judgement:
    """The operator's threshold and comparison for one result, and, where not numeric, its pass/fail."""

    threshold: float | None
    comparison: Comparison
    passed: bool | None = None  # None: judge(value, threshold, comparison)
    note: str = ""
    value: float | None = None  # a value the operator derived from the report's measurements; replaces the result's


class Judging(Protocol):
    """What a kind's judge is handed (the operator's judging context): the operator's config, the report (the whole
    report or its job-wide part: its environment and detail rows), a row's threshold as the operator derives it,
    and a value derived once from the whole report."""

    config: Any
    report: Any

    def threshold(self, row: Any) -> float | None: ...

    def once(self, key: str, compute: Callable[[], object]) -> object: ...


KindJudge = Callable[[Any, CheckResult, Judging], Judgement]  # (its rule-table row, the result, the context)


@dataclass(frozen=True)
class Rejudging:
    """A check's hook into the operator's re-judging (checks/contract.Check.rejudge).

    `kinds`: judges of the kinds of rule-table row only this check writes (rules.row(..., kind=K)), by kind.
    `job_failed`: whether a result of this check says the whole job failed; a folded judgement keeps such a
    failure whole, whatever its node's count (what decides the results required of the check reads it).
    `gathered`: the check's details (report.<name>) whose rows of the nodes' parts a folded verdict keeps,
    joined into the job-wide part's (the headline's fallback reads them); the rows are where the Detail says.
    """

    kinds: Mapping[str, KindJudge] = field(default_factory=dict)
    job_failed: Callable[[CheckResult], bool] | None = None
    gathered: tuple[str, ...] = ()
