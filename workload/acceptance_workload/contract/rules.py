"""How a result is judged: the rows of the rule table and the table of one check (Table).

Both sides judge through the rows and nothing else: each check's judges build
every CheckResult with its table's `result()` (or ask `threshold()` /
`expected()`), and the operator's re-judging asks the whole table
(checks/table.py: every check's rows, from the registry) with the thresholds
it resolved from the spec. A result name that is not a row cannot be emitted
(`rule()` raises UnknownResult) and is failed by the operator (fails closed);
tests/workload/test_result_rules.py checks that every result a run writes has a
row and that no other module reads a threshold field.

A check's rows are in its package (checks/<name>/rules.py): `RULES = Table(MODEL,
[row(...), ...])`, MODEL its thresholds model. Every table also holds the
liveness rows every check has (`rank_exited`, ..., `stage_error`: the rank the
workload blamed, in whichever check it happened). Adding a result is adding ONE
row to its check's table:

    row(CHECK, NAME, COMPARISON, UNIT, THRESHOLD, kind=KIND)

- CHECK, NAME: the CheckResult's `check` and `name`, exactly as emitted.
- COMPARISON: "ge" (value >= threshold), "le" or "eq". Without a threshold
  (the spec and profile leave it unset) the result is recorded, not judged
  ("info").
- UNIT: the unit the value is in ("GB/s", "C", "" for a ratio).
- THRESHOLD: how the threshold follows from the check's resolved thresholds
  (spec.checks.CHECK.thresholds, profile defaults filled in) and the run's
  shape; one of the builders:
    field("snake_attr")          the threshold field itself (its wire key, e.g.
                                 "preflight.maxGpuTemperatureC", is the row's
                                 `key`, which also marks profile estimates);
    field("attr", scale=f)       the same, converted (e.g. "1Gi" -> bytes);
    fixed(x)                     a constant (0 wrong elements, 1 for "must be good");
    required_text("attr")        a text the observation must meet (a version, a GPU
                                 model): threshold 1.0 when set, else not judged;
    when_flag("attr", run=...)   1.0 when a yes/no field is true (and the run needs it);
    from_run(fn)                 from the run's shape alone (GPUs per node).
- kind (only where the operator must do more than compare the value): "version",
  "model" (compare `observed` with the required text), "transport" (the transport
  the report judged must be the one required), "ratio" (value recomputed from the
  node's other GPUs; `of=` names the absolute result), "inter_node" (recomputed
  from the localisation pair rows), "culprit" (always a failure). Default
  "measured": the value against the threshold.
- job_wide=True: measured over the whole job; the operator fails one that names a node.

New thresholds go into the check's thresholds model (the spec field, its wire
alias) and the profiles (the defaults); only the rows read them to judge a
result. Examples (each is a row of its check's table):

    # a small-message latency result of nccl (NcclThresholds.all_reduce_latency_us):
    row("nccl", "all_reduce_latency", "le", "us", field("all_reduce_latency_us"), job_wide=True),
    # a preflight item judged only when a yes/no threshold asks for it:
    row("preflight", "cpu_affinity", "ge", "share", when_flag("require_numa_local_cpus")),
    # a check "fsdp": checks/fsdp/rules.py holds RULES = Table(FsdpThresholds, [...]) with
    row("fsdp", "throughput_per_gpu", "ge", "", field("min_throughput_per_gpu")),

The judge then builds the result with `RULES.result("throughput_per_gpu",
value, check.thresholds, ...)` (or `judged()` with a threshold it computed as
its row says), and the operator judges it with no change of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from acceptance_workload.contract.results import ESTIMATED_SUFFIX, CheckResult, Comparison, judge
from acceptance_workload.contract.wire import WireModel, version_tuple

if TYPE_CHECKING:
    from acceptance_workload.contract.config import RunConfig

Kind = Literal["measured", "version", "model", "transport", "ratio", "inter_node", "culprit"]
CULPRITS = ("rank_exited", "rank_responding", "rank_error", "rank_progress")  # control.CULPRIT_KINDS
STAGE_ERROR = "stage_error"  # a rank raised inside the check's stage (stages.py)


class UnknownResult(KeyError):
    """A result name with no row: a programming error in a judge, found by the tests."""


@dataclass(frozen=True)
class Run:
    """The run's shape, as far as a threshold depends on it."""

    nodes: int = 1
    gpus_per_node: int = 1
    fabric: str = "infiniband"
    transport: str | None = None  # the inter-node transport the run must show (RunConfig.required_transport)
    cpu_limit: float | None = None  # cores spec.resources.cpu asked each pod for (None: not asked)
    memory_limit: float | None = None  # bytes spec.resources.memory asked for, in whole pages (None: not asked)

    @property
    def rdma(self) -> bool:
        return self.nodes > 1 and self.fabric != "ethernet"

    @classmethod
    def of(cls, config: RunConfig) -> Run:
        return cls(config.nodes, config.gpus_per_node, config.fabric, config.required_transport(),
                   config.limits.cores(), config.limits.page_bytes())


Derive = Callable[[Any, Run], "float | None"]
Expect = Callable[[Any, Run], "str | None"]


@dataclass(frozen=True)
class Threshold:
    """How a row's threshold follows from the check's thresholds and the run; `attr`: the field it reads."""

    derive: Derive
    attr: str | None = None
    expect: Expect | None = None  # the text an observation must meet (version, model, transport)
    doc: str = ""


def field(attr: str, *, scale: Callable[[Any], float] = float, run: Callable[[Run], bool] | None = None,
          doc: str = "") -> Threshold:
    def derive(th: Any, r: Run) -> float | None:
        value = getattr(th, attr)
        return None if value is None or (run is not None and not run(r)) else scale(value)
    return Threshold(derive, attr, doc=doc or attr)


def fixed(value: float, doc: str = "") -> Threshold:
    return Threshold(lambda _th, _r: value, doc=doc or f"always {value:g}")


def required_text(attr: str) -> Threshold:
    def expect(th: Any, _r: Run) -> str | None:
        return getattr(th, attr)
    return Threshold(lambda th, r: None if expect(th, r) is None else 1.0, attr, expect, doc=f"1 when {attr} is set")


def when_flag(attr: str, *, run: Callable[[Run], bool] | None = None, doc: str = "") -> Threshold:
    return Threshold(lambda th, r: 1.0 if getattr(th, attr) and (run is None or run(r)) else None, attr,
                     doc=doc or f"1 when {attr}")


def from_run(fn: Callable[[Run], float | None], doc: str) -> Threshold:
    return Threshold(lambda _th, r: fn(r), doc=doc)


def transport_threshold(required: str | None) -> float | None:
    """A transport row's threshold once the required transport is known: every connection on it (1.0), or none."""
    return None if required is None else 1.0


def transport(expect: Expect, doc: str, attr: str | None = None) -> Threshold:
    return Threshold(lambda th, r: transport_threshold(expect(th, r)), attr, expect, doc=doc)


@dataclass(frozen=True)
class Rule:
    """One row: a result and how it is judged."""

    check: str
    name: str
    comparison: Comparison
    unit: str
    threshold: Threshold
    kind: Kind = "measured"
    of: str | None = None  # kind "ratio": the absolute result whose values it compares
    job_wide: bool = False  # measured over the whole job: a result of this name that names a node fails
    key: str | None = None  # "check.wireName" of the field it reads (as spec.checks and the profiles name it)


def row(check: str, name: str, comparison: Comparison, unit: str, threshold: Threshold, *,
        kind: Kind = "measured", of: str | None = None, job_wide: bool = False) -> Rule:
    return Rule(check, name, comparison, unit, threshold, kind, of, job_wide)


def liveness_rows(check: str) -> list[Rule]:
    """The rows every check has: a rank the workload blamed (dead, silent, failed, behind) or whose stage raised."""
    culprit = fixed(1.0, "always a failure: the rank stopped, failed or fell behind")
    return [*(row(check, name, "ge", "", culprit, kind="culprit") for name in CULPRITS),
            row(check, STAGE_ERROR, "ge", "", fixed(1.0, "always a failure: a rank raised inside the check's stage"),
                kind="culprit")]


def liveness(check: str, name: str, **fields: Any) -> CheckResult:
    """The failed result of a rank blamed in `check`, by its liveness row (which every check's table has): the
    runtime names culprits in whichever check they happen without the check's table."""
    found = {r.name: r for r in liveness_rows(check)}.get(name)
    if found is None:
        raise UnknownResult(f"{name} is not a liveness result (one of {', '.join((*CULPRITS, STAGE_ERROR))})")
    threshold = found.threshold.derive(None, Run())
    return CheckResult(check=check, name=name, value=0.0, unit=found.unit, threshold=threshold,
                       comparison=found.comparison, passed=False, **fields)


def _looser(r: Rule, th: Any, base: Any, run: Run) -> bool:
    """Whether row `r` judges more leniently with thresholds `th` than with `base` (the profile's), in the direction
    of its comparison: a lower floor, a higher ceiling, an older version, another required text, no threshold where
    the profile has one. A requirement the profile does not make is never looser."""
    ours, theirs = r.threshold.derive(th, run), r.threshold.derive(base, run)
    if r.threshold.expect is not None:
        want, have = r.threshold.expect(th, run), r.threshold.expect(base, run)
        if have is not None and want != have:
            if r.kind != "version" or want is None:
                return True

            return version_tuple(want) < version_tuple(have)
    if r.kind == "inter_node" and r.threshold.attr:  # its field is the ratio to the others' median, a floor of its own
        ours, theirs = getattr(th, r.threshold.attr), getattr(base, r.threshold.attr)
    if theirs is None:
        return False
    if ours is None:
        return True
    return ours < theirs if r.comparison == "ge" else ours > theirs if r.comparison == "le" else ours != theirs


class Table:
    """One check's rows: its own (checks/<name>/rules.py) and the liveness rows, each keyed by result name; `model`
    is the check's thresholds model, whose wire names are the rows' keys."""

    def __init__(self, model: type[WireModel], rows: Iterable[Rule]):
        rows = list(rows)
        self.check = rows[0].check
        self.model = model
        self.rows: dict[str, Rule] = {}
        for r in [*rows, *liveness_rows(self.check)]:
            assert r.check == self.check, f"{r.check}/{r.name} is in the table of {self.check}"
            assert r.name not in self.rows, f"{r.check}/{r.name} has two rows"
            self.rows[r.name] = dataclasses.replace(r, key=self._key(r.threshold.attr))

    def _key(self, attr: str | None) -> str | None:
        if attr is None:
            return None
        info = self.model.model_fields[attr]
        return f"{self.check}.{info.alias or attr}"

    def find(self, name: str) -> Rule | None:
        """The row of a result; None for a name the table does not know (the operator fails it)."""
        return self.rows.get(name)

    def rule(self, name: str) -> Rule:
        found = self.find(name)
        if found is None:
            raise UnknownResult(f"no result rule for {self.check}/{name}: add a row to "
                                f"acceptance_workload.checks.{self.check}.rules.RULES")
        return found

    def threshold(self, name: str, thresholds: Any, run: Run | None = None) -> float | None:
        """The threshold of a result from its check's resolved thresholds; None: recorded, not judged."""
        return self.rule(name).threshold.derive(thresholds, run or Run())

    def expected(self, name: str, thresholds: Any, run: Run | None = None) -> str | None:
        """The text a version, model or transport result must meet; None where none is required."""
        expect = self.rule(name).threshold.expect
        return None if expect is None else expect(thresholds, run or Run())

    def needs_value(self, name: str, thresholds: Any, run: Run | None = None) -> bool:
        """Whether a measurement that cannot be taken fails (a threshold judges it) or is skipped.

        A floor of 0 ("ge") is met by any value, so an unreadable value is not needed for it.
        """
        r = self.rule(name)
        t = r.threshold.derive(thresholds, run or Run())
        return t is not None and not (r.comparison == "ge" and t <= 0)

    def key(self, name: str) -> str | None:
        """The threshold key ("nccl.allReduceBusbwGBps") a result is judged by, None where it is not a spec field."""
        found = self.find(name)
        return None if found is None else found.key

    def loosened(self, thresholds: Any, profile: Any, run: Run | None = None) -> list[tuple[str, Any, Any]]:
        """The thresholds that judge more leniently than the profile's: (key, value, the profile's value), one per
        field ("ddp.minScalingEfficiency", 0.01, 0.9). `thresholds` and `profile` are the check's thresholds
        resolved with and without the spec's overrides, for the same run (run nodes, GPUs, fabric).

        The direction of each field is its rows' comparison, so a new row needs nothing here. A field no row
        reads has no direction: set to anything but the profile's value, it counts as looser (fail closed).
        """
        run = run or Run()
        out: dict[str, tuple[str, Any, Any]] = {}
        read: set[str] = set()
        for r in self.rows.values():
            if r.threshold.attr is None or r.key is None:
                continue
            read.add(r.threshold.attr)
            if r.key not in out and _looser(r, thresholds, profile, run):
                out[r.key] = (r.key, getattr(thresholds, r.threshold.attr), getattr(profile, r.threshold.attr))
        for attr in self.model.model_fields:
            ours, theirs = getattr(thresholds, attr), getattr(profile, attr)
            key = self._key(attr)
            if attr not in read and ours != theirs and key is not None:
                out[key] = (key, ours, theirs)
        return list(out.values())

    def mark_estimate(self, result: CheckResult, estimated: Collection[str]) -> CheckResult:
        """`result`, marked as judged by an estimate when its threshold is one of the profile's estimates."""
        k = self.key(result.name)
        if k is None or k not in estimated or result.threshold is None or result.comparison == "info":
            return result
        return result.model_copy(update={"estimated": True, "message": result.message + ESTIMATED_SUFFIX})

    def result(self, name: str, value: float | None, thresholds: Any, *, run: Run | None = None,
               unit: str | None = None, passed: bool | None = None, estimated: Collection[str] = (),
               **fields: Any) -> CheckResult:
        """A CheckResult judged by its row: threshold and comparison from the table ("info" without a threshold).

        `passed` overrides the numeric judgement where the judge knows more (a version compare); a missing value
        never passes.
        """
        t = self.rule(name).threshold.derive(thresholds, run or Run())
        return self.judged(name, value, t, unit=unit, passed=passed, estimated=estimated, **fields)

    def judged(self, name: str, value: float | None, threshold: float | None, *, unit: str | None = None,
               passed: bool | None = None, estimated: Collection[str] = (), **fields: Any) -> CheckResult:
        """A CheckResult against a threshold the judge has from its row (threshold(), or, for an "inter_node" row,
        computed from the measurements as the row says); comparison and unit from the row."""
        r = self.rule(name)
        comparison: Comparison = r.comparison if threshold is not None else "info"
        ok = judge(value, threshold, comparison) if passed is None else (passed and value is not None)
        out = CheckResult(check=self.check, name=name, value=value, unit=r.unit if unit is None else unit,
                          threshold=threshold, comparison=comparison, passed=ok, **fields)
        return self.mark_estimate(out, estimated) if estimated else out


def thresholds_of(config: RunConfig, check: str) -> Any:
    """The resolved thresholds model of one check in a run's configuration."""
    return getattr(config.checks, check).thresholds
