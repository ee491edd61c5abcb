"""The operator's own judgement of a report: against the spec and the run, never the report's word.

The workload measures; the operator decides. Every result is judged again from
its value and the threshold the operator derives from the spec and profile
(the same WorkloadConfig.build the workload was configured with); the
report's own `passed`, `threshold` and `comparison` are overwritten. One table
(RULES) says, per (check, result name), how the threshold and comparison
follow from the resolved checks; a result whose name the table does not know
fails closed. A report is also checked against the run it claims to describe
(GPU mode, test uid and generation, node count, GPUs per node, the nodes the
job's pods ran on) and against the results the spec requires (a report that
leaves out a judged result fails as if the result had failed).

Pure: no Kubernetes calls; the handlers pass in what they read.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from acceptance_operator.resource.runs import report_run
from acceptance_operator.workload import (
    CHECK_NAMES,
    CHECKS,
    MAX_FAILURES,
    CheckResult,
    Comparison,
    Detail,
    Due,
    Judgement,
    Report,
    Required,
    WorkloadConfig,
    __version__,
    judge,
    rules,
    table,
    threshold_text,
    value_text,
    version_tuple,
)

MAX_MESSAGE = 500  # characters of a result's message kept: the report must not grow the status
# Failed results of one node that a folded judgement (judge_parts, fold=True) keeps whole; the rest of the node's
# failures are counted by one stand-in per check. What reads the folded report needs far fewer: failedNodes, the
# node metrics and spec.onFailure need one failure a node, a node's row its first, the condition message the
# first 5 of the report and the status the first MAX_FAILURES (kept whole whatever their node). 16 keeps every
# failure of one GPU measurement on an 8-GPU node (its floor and its ratio to the node's median, per GPU), at
# 1,000 nodes 16,000 results (~25 MB) where a report failing everywhere has ~160,000.
FAILED_KEPT_PER_NODE = 16


@dataclass(frozen=True)
class RunFacts:
    """What the operator knows about the run a report claims to describe."""

    config: WorkloadConfig  # the resolved checks and the run's shape, as the operator configured the workload
    uid: str | None  # metadata.uid of the AcceptanceTest
    pod_nodes: frozenset[str] | None = None  # nodes the run's pods are or were bound to; None: not observed


@dataclass
class Context:
    """What a rule judges against: the operator's config, and the report's own measurements for relative rules."""

    config: WorkloadConfig
    report: Report  # whose environment and localisation rows the rules read: the whole report, or its job-wide part
    results: list[CheckResult] | None = None  # where a node's other results are (its part); None: report.results
    _by_name: dict[tuple[str, str], dict[str, list[CheckResult]]] = field(default_factory=dict)
    _memo: dict[str, object] = field(default_factory=dict)

    def threshold(self, row: rules.Rule) -> float | None:
        """The row's threshold, derived from the operator's resolved thresholds and the run's shape."""
        return row.threshold.derive(rules.thresholds_of(self.config, row.check), rules.Run.of(self.config))

    def once(self, key: str, compute: Callable[[], object]) -> object:
        """A value derived from the whole report, computed for the first result that needs it."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def on_node(self, check: str, name: str, node: str | None) -> list[CheckResult]:
        """The report's results of one measurement on one node (indexed once per measurement)."""
        key = (check, name)
        if key not in self._by_name:
            index: dict[str, list[CheckResult]] = {}
            for r in self.report.results if self.results is None else self.results:
                if (r.check, r.name) == key and r.node:
                    index.setdefault(r.node, []).append(r)
            self._by_name[key] = index
        return self._by_name[key].get(node or "", [])


Rule = Callable[[CheckResult, Context], Judgement]


def numeric(threshold: float | None, comparison: Comparison) -> Judgement:
    """A measured value against a threshold; without one, recorded but not judged."""
    return Judgement(threshold, comparison if threshold is not None else "info")


def _threshold(row: rules.Rule, x: Context) -> float | None:
    return x.threshold(row)


def _expected(row: rules.Rule, x: Context) -> str | None:
    return table.expected(row.check, row.name, rules.thresholds_of(x.config, row.check), rules.Run.of(x.config))


def _measured(row: rules.Rule, r: CheckResult, x: Context) -> Judgement:
    if row.job_wide and r.node is not None:
        return Judgement(None, row.comparison, False, f"a job-wide {row.name} result names a node")
    return numeric(_threshold(row, x), row.comparison)


KindJudge = Callable[[rules.Rule, CheckResult, Context], Judgement]


def _meets_text(meets: Callable[[str, str], bool], failure: str) -> KindJudge:
    """A row whose observation (`observed`) must meet the text the row requires: a version, a GPU model."""
    def judge_text(row: rules.Rule, r: CheckResult, x: Context) -> Judgement:
        need = _expected(row, x)
        if need is None:
            return numeric(None, row.comparison)
        try:
            ok = r.observed is not None and meets(r.observed, need)
        except ValueError:
            ok = False
        note = "" if ok else failure.format(observed=r.observed or "unknown", need=need)
        return Judgement(_threshold(row, x), row.comparison, ok, note)
    return judge_text


_version = _meets_text(lambda seen, need: version_tuple(seen) >= version_tuple(need), "version {observed} below {need}")
_gpu_model = _meets_text(lambda seen, want: want.lower() in seen.lower(), "GPU {observed} is not a {need}")


def _transport(row: rules.Rule, r: CheckResult, x: Context) -> Judgement:
    """The share of connections that used the required transport must be 1, and it must be the one required."""
    required = _expected(row, x)
    if required is None:
        return numeric(None, row.comparison)
    if r.expected != required:
        return Judgement(_threshold(row, x), row.comparison, False,
                         f"the report judged transport {r.expected}, the run requires {required}")
    return numeric(_threshold(row, x), row.comparison)


def _gpu_ratio(row: rules.Rule, r: CheckResult, x: Context) -> Judgement:
    """The GPU's value over its node's median GPU, recomputed from the report's own per-GPU measurements."""
    metric = row.of or ""
    floor = _threshold(row, x)
    comparison: Comparison = row.comparison if floor is not None else "info"
    siblings = x.on_node(row.check, metric, r.node)
    own = next((s.value for s in siblings if s.gpu == r.gpu), None)
    present = [s.value for s in siblings if s.value is not None and s.value > 0]
    if own is None or not present:
        return Judgement(floor, comparison, False, f"no {metric} of GPU {r.gpu} and its node {r.node} to compare")
    ratio = round(own / statistics.median(present), 4)
    note = "" if r.value is not None and abs(r.value - ratio) <= 1e-3 else (
        f"the report said {r.value}, its measurements give {ratio}")
    return Judgement(floor, comparison, note=note, value=ratio)


def _culprit(row: rules.Rule, _r: CheckResult, x: Context) -> Judgement:
    """A rank the workload blamed (stopped, failed, fell behind), a slow block: always a failure."""
    return Judgement(_threshold(row, x), row.comparison, False)


# How the operator judges each kind of row of the result-rule table (acceptance_workload.contract.rules); the table, not
# this module, says which result is of which kind and which threshold judges it. The kinds every check may write are
# judged here; a kind only one check writes is that check's to judge (its CHECK's rejudge.kinds, from the registry).
SHARED_KINDS: dict[str, KindJudge] = {
    "measured": _measured, "version": _version, "model": _gpu_model, "transport": _transport,
    "ratio": _gpu_ratio, "culprit": _culprit,
}
KIND_JUDGES: dict[str, KindJudge] = {
    **SHARED_KINDS, **{kind: judge_kind for c in CHECKS if c.rejudge for kind, judge_kind in c.rejudge.kinds.items()},
}
# The checks' own tests of a failure that says the whole job failed (a folded judgement keeps it whole).
JOB_FAILED = tuple(c.rejudge.job_failed for c in CHECKS if c.rejudge and c.rejudge.job_failed)
# The details whose rows of the nodes' parts a folded verdict keeps, joined into the job-wide part's.
GATHERED = tuple(d for c in CHECKS if c.rejudge for d in c.details if d.name in c.rejudge.gathered)
RULES = table.RULES  # every (check, name) the operator can judge: the workload's table, nothing else


def rule_for(result: CheckResult) -> Rule | None:
    row = table.find(result.check, result.name)
    if row is None:
        return None
    judge_kind = KIND_JUDGES[row.kind]
    return lambda r, x: judge_kind(row, r, x)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


def judge_result(result: CheckResult, context: Context) -> CheckResult:
    """The result with the operator's threshold, comparison and pass/fail; unknown names fail closed."""
    rule = rule_for(result)
    if rule is None:
        return result.model_copy(update={
            "passed": False, "message": _clip(f"the operator does not know the result {result.check}/{result.name} "
                                              f"and cannot judge it (fails closed); {result.message}")})
    j = rule(result, context)
    value = result.value if j.value is None else j.value
    passed = judge(value, j.threshold, j.comparison) if j.passed is None else (j.passed and value is not None)
    judged = result.model_copy(update={"value": value, "threshold": j.threshold, "comparison": j.comparison,
                                       "passed": passed})
    notes = [n for n in (j.note, _overruled(result, judged)) if n]
    judged.message = _clip("; ".join([*notes, result.message] if result.message else notes))
    return judged


def _overruled(claimed: CheckResult, judged: CheckResult) -> str:
    """Where the operator's pass/fail differs from the report's, say so before the workload's own text (which may
    still speak of the report's threshold: '... >= 299' on a result that fails at >= 340)."""
    if claimed.passed == judged.passed:
        return ""
    against = threshold_text(judged)
    return (f"{'failed' if not judged.passed else 'passed'} as the operator judges it "
            f"({value_text(judged)}{' ' + against if against else ''}; the report said "
            f"{'passed' if claimed.passed else 'failed'})")


def required_results(config: WorkloadConfig, nodes: Iterable[str], report: Report | None = None) -> list[Required]:
    """Every judged result the enabled checks must produce, per node where it is measured per node: each check
    says which (its CHECK's `required`), in run order. `report`: the re-judged job-wide report, where what it
    holds decides (nccl's localisation, storage's gates); None: before any report."""
    due = Due(config, sorted(nodes), report)
    return [req for check in CHECKS if check.required and check.enabled_in(config.checks)
            for req in check.required(due)]


Key = tuple[str, str, str | None, int | None]  # (check, name, node, gpu) of a result


def skew(written: Report, config: WorkloadConfig) -> dict[str, str]:
    """Why each enabled check the workload did not run at all is absent, by check: the report's checksRun is its
    own config's enabled checks, so a check missing there is one its image does not know, i.e. a workload image
    older than this operator (a platform team that pinned the image and upgraded the operator). Named, with the
    two ways out, instead of a bare "no result" that blames nobody."""
    ran = set(written.checks_run)
    absent = [c for c in CHECK_NAMES if getattr(config.checks, c).enabled and c not in ran]
    image = written.environment.workload_version or "a version from before reports named theirs"
    return {c: (f"the workload that wrote the report did not run check {c} at all (it ran "
                f"{', '.join(written.checks_run) or 'none'}): its image ({image}) is older than this operator "
                f"(gpu-acceptance {__version__}) and does not know the check; run the workload image of the "
                f"operator's version (leave spec.image unset, or set the chart's workloadImage to it) or turn the "
                f"check off (spec.checks.{c}.enabled: false)") for c in absent}


def missing_required(present: set[Key], report: Report, config: WorkloadConfig,
                     nodes: Iterable[str], unknown: dict[str, str] | None = None) -> list[CheckResult]:
    """A failed result for each required one the report lacks (with a value or not); `present`: its results' keys;
    `unknown`: why a check's results are all absent (skew), said instead of what the result judges."""
    present = present | {(c, n, node, None) for c, n, node, _ in present}  # a per-node requirement: any GPU's
    out = []
    for req in required_results(config, nodes, report):
        if (req.check, req.name, req.node, req.gpu) in present:
            continue
        where = (f" for node {req.node}" if req.node else "") + (f" GPU {req.gpu}" if req.gpu is not None else "")
        why = (unknown or {}).get(req.check)
        message = f"the report has no {req.name} result{where}: {why}" if why else \
            f"the report has no {req.name} result{where} ({req.why} is judged)"
        out.append(CheckResult(check=req.check, name=req.name, value=None, passed=False,  # type: ignore[arg-type]
                               node=req.node, gpu=req.gpu, message=message))
    return out


def run_problems(report: Report, facts: RunFacts) -> list[str]:
    """Why the report does not describe this run; empty when it does."""
    c, env = facts.config, report.environment
    problems: list[str] = []
    if report.mode != c.mode:
        problems.append(f"it is a {report.mode} report, but the run is a {c.mode} run "
                        "(a CPU smoke report never passes a GPU test; spec.profile cpu-smoke asks for one)")
    test = c.test
    if test is not None and report.generation != test.generation:
        problems.append(f"it is for generation {report.generation}, not {test.generation}")
    elif test is not None and test.run is not None and report_run(report.run, report.generation) != test.run:
        problems.append(f"it is for run {report_run(report.run, report.generation)}, not {test.run}")
    if facts.uid is not None and report.uid != facts.uid:
        problems.append(f"it is for the test with uid {report.uid}, not {facts.uid}")
    hostnames = set(env.hostnames)
    if env.nodes != c.nodes or len(hostnames) != c.nodes:
        problems.append(f"it measured {len(hostnames)} node(s) (environment.nodes {env.nodes}), "
                        f"spec.nodes is {c.nodes}")
    if env.gpus_per_node != c.gpus_per_node:
        problems.append(f"it measured {env.gpus_per_node} GPU(s) per node, spec.gpusPerNode is {c.gpus_per_node}")
    if env.world_size is not None and env.world_size != c.nodes * c.gpus_per_node:
        problems.append(f"its world size is {env.world_size}, the run has {c.nodes * c.gpus_per_node} GPUs")
    named = {r.node for r in report.results if r.node}
    if named - hostnames:
        problems.append(f"results name node(s) it did not run on: {_few(named - hostnames)}")
    if "" in hostnames or any(r.node == "" for r in report.results):
        problems.append("it names a node with an empty name")
    if facts.pod_nodes is not None:
        # Every node it names must be one a pod of this run is or was bound to (the operator remembers the nodes
        # of pods a job controller removed since): a pod that was never scheduled ran nothing.
        foreign = hostnames - facts.pod_nodes - {""}
        if foreign:
            problems.append(f"node(s) {_few(foreign)} ran no pod of this run (its pods ran on "
                            f"{_few(facts.pod_nodes) or 'no node: none was scheduled'})")
    return problems


def _few(names: Iterable[str], limit: int = 5) -> str:
    names = sorted(names)
    more = f" (and {len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


@dataclass
class Rejudged:
    """The report with the operator's pass/fail on every result, and why it does not fit the run (if so)."""

    report: Report
    problems: list[str] = field(default_factory=list)


def rejudge(report: Report, facts: RunFacts) -> Rejudged:
    """Judge every result again, add the required results the report lacks, check the report fits the run.

    The whole report comes back judged (what `gpu-acceptance report` shows); the
    report passed in is left as it is.
    """
    return judge_parts(report, (), facts)


def judge_parts(job: Report, parts: Iterable[Report], facts: RunFacts, *, fold: bool = False) -> Rejudged:
    """rejudge() of a report read in parts: the job-wide part, then the nodes' parts (evidence.parts), each judged
    as it comes, so only one part is ever whole in memory.

    Every result of a node is in its node's part (evidence.parts makes sure), so a
    rule that compares a GPU with its node finds the node there; the job-wide
    part has the environment and the localisation rows. fold=True keeps what the
    verdict needs and lets the rest go: every failed and every job-wide result as
    judged, the rows of the nodes' parts a check's rejudge hook gathers (ddp's ranks: the
    headline's fallback), and for the passed results of
    a node one shared stand-in per check, which counts each of them in the tally
    and names its node (the NCCL sweeps and per-GPU rows of the nodes' parts are
    not kept). Failed results too are bounded: the report's first MAX_FAILURES and
    each node's first FAILED_KEPT_PER_NODE are kept as judged, each further one
    of a node is counted by a failed stand-in per check and node (see _Fold). The
    1,000-node report of a sweep's inter-node test is ~160,000 results; whole, as
    pydantic models, ~300 MB.
    """
    results: list[CheckResult] = []
    present: set[Key] = set()
    rows: dict[str, list[object]] = {d.name: [] for d in GATHERED}
    keep = _Fold().keep if fold else _as_judged
    for part in _chain(job, parts):
        context = Context(facts.config, job, part.results)
        for result in part.results:
            judged = judge_result(result, context)
            present.add((judged.check, judged.name, judged.node, judged.gpu))
            results.append(keep(judged))
        if part is not job:
            for detail in GATHERED:
                rows[detail.name] += _rows(detail, getattr(part, detail.name))
    # A shallow copy with new results: the sweeps and environment are read, never changed (a deep copy of a
    # 1,000-node report's sweeps would cost seconds).
    report = job.model_copy(update={
        "results": results, **{d.name: _joined(d, getattr(job, d.name), rows[d.name]) for d in GATHERED},
        "checks_run": [c for c in CHECK_NAMES if getattr(facts.config.checks, c).enabled]})
    nodes = report.environment.hostnames or sorted({r.node for r in results if r.node})
    report.results += map(keep, missing_required(present, report, facts.config, nodes, skew(job, facts.config)))
    report.finalize()
    return Rejudged(report, run_problems(report, facts))


def _rows(detail: Detail, held: Any) -> list[Any]:
    """A detail's node rows in one part: where its Detail says they are (the field itself, or one of its fields)."""
    if held is None or detail.rows is None:
        return []
    return list(held if detail.rows == "" else getattr(held, detail.rows))


def _joined(detail: Detail, held: Any, rows: list[Any]) -> Any:
    """The job-wide part's detail with the nodes' parts' rows after its own (as it is when there are none)."""
    if held is None or not rows:
        return held
    if detail.rows == "":
        return [*held, *rows]
    return held.model_copy(update={detail.rows: [*getattr(held, detail.rows or ""), *rows]})


def _chain(job: Report, parts: Iterable[Report]) -> Iterator[Report]:
    yield job
    yield from parts


def _as_judged(result: CheckResult) -> CheckResult:
    return result


@dataclass
class _Fold:
    """What a folded judgement keeps of each judged result, in the report's order.

    A job-wide result, the report's first MAX_FAILURES failures, each node's
    first FAILED_KEPT_PER_NODE and every failure that says the job failed (a
    node's transport: what decides the results required of its check reads it, by name; one a node at
    most: a check's rejudge.job_failed says which) as judged; for the rest of a node's results
    one shared stand-in per (check, node, passed), put in each one's place, so the
    tally, failedNodes, each node's counts and the first failures listed read as
    in the whole report while memory holds one pointer a result.
    """

    failures: int = 0
    failed_on: dict[str, int] = field(default_factory=dict)
    standins: dict[tuple[str, str, bool], CheckResult] = field(default_factory=dict)

    def keep(self, result: CheckResult) -> CheckResult:
        if not result.passed:
            self.failures += 1
        if result.node is None:
            return result
        if not result.passed:
            self.failed_on[result.node] = seen = self.failed_on.get(result.node, 0) + 1
            if self.failures <= MAX_FAILURES or seen <= FAILED_KEPT_PER_NODE or _job_failed(result):
                return result
        return self.standins.setdefault((result.check, result.node, result.passed), _standin(result))


def _job_failed(result: CheckResult) -> bool:
    return any(failed(result) for failed in JOB_FAILED)


def _standin(result: CheckResult) -> CheckResult:
    """What the verdict keeps of a node's passed results of one check, or of its failed ones past those kept:
    whether they passed, and where."""
    if result.passed:
        return CheckResult(check=result.check, name="passed", value=None, comparison="info", passed=True,
                           node=result.node, message="passed results of this check on this node, folded")
    return CheckResult(check=result.check, name="failed", value=None, comparison="info", passed=False,
                       node=result.node, message=f"further failed results of this check on this node, folded "
                       f"(the first {FAILED_KEPT_PER_NODE} of the node are kept; all are in the evidence)")
