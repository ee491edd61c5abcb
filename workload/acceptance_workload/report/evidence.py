"""A report in two parts: the compact status part, and the full evidence in objects owned by the test.

status.report must stay small at any node count (a status is read on every
`kubectl get`, and an object over ~1.5 MiB is refused), so it holds only what a
person needs first: the verdict as the workload saw it, the failures with
their evidence, the headline numbers and one short row per node. Everything
else (every result, every NCCL sweep row, the DDP ranks) goes into evidence
shards: ConfigMaps the operator creates for the run, one for the job-wide part
and one per group of NODES_PER_SHARD nodes (their results, sweeps, per-GPU rows, DDP ranks and node facts:
GPU serials, firmware, host load), each a partial Report, which the workload may write by name only.
`assemble` puts the full Report back together; it is what the operator judges and what `gpu-acceptance
report` prints.

Pure: no Kubernetes imports; status.py writes, the operator and CLI read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from typing import TypeVar

from pydantic import Field

from acceptance_workload.contract.results import CheckName, CheckResult, check_names
from acceptance_workload.contract.wire import Timestamp, WireModel
from acceptance_workload.report.details import Detail
from acceptance_workload.report.model import Environment, ReportBase

NODES_PER_SHARD = 8  # ~45 KB of evidence a node (8 GPUs): 8 nodes stay far under the 1 MiB object limit
SHARD_BUDGET_BYTES = 900 * 1024  # a shard larger than this drops its sweep rows (and says so)
EVIDENCE_KEY = "evidence.json"
# The status part, in the run's job-wide ConfigMap beside its evidence: rank 0 writes it last, in the same write as
# the job-wide evidence and after every node's shard, so its presence says the run's evidence is complete.
STATUS_KEY = "status.json"
# While a long check runs (checks.soak), rank 0 writes its progress here, in the same job-wide ConfigMap, at most
# every 30 s: {"check", "elapsedSeconds", "totalSeconds", "worst", "updated"} (soak.py; the operator reads it).
PROGRESS_KEY = "progress.json"
MAX_FAILURES = 40  # failures listed in the status; the rest are counted and are in the evidence
MAX_FAILURE_MESSAGE = 300
MAX_ROW_FAILURE = 120
MAX_ERROR = 2000
T = TypeVar("T")


def shard_count(nodes: int) -> int:
    """Node shards for a run of `nodes` nodes (the job-wide shard comes on top)."""
    return max(1, math.ceil(nodes / NODES_PER_SHARD))


def shard_names(prefix: str, nodes: int) -> list[str]:
    """Names of a run's evidence ConfigMaps: the job-wide one first, then one per group of nodes."""
    return [f"{prefix}-job", *(f"{prefix}-{k}" for k in range(shard_count(nodes)))]


class NodeRow(WireModel):
    """One node in one line: how many results, how many failed, the first failure in words."""

    node: str
    passed: bool
    results: int
    failed: int
    failure: str | None = Field(None, description="The first failed result, e.g. 'preflight/gpu_count GPU 3: ...'.")


class TallyPart(WireModel):
    """Report.tally() on the wire."""

    passed: int = 0
    failed: int = 0
    total: int = 0


class HeadlinePart(WireModel):
    """Report.headline() on the wire."""

    all_reduce_busbw_gbps: float | None = Field(None, alias="allReduceBusbwGBps")
    ddp_throughput_per_gpu: float | None = None
    ddp_throughput_unit: str | None = None
    scaling_efficiency: float | None = None


class LocalizationPart(WireModel):
    """How long the inter-node localisation stage took (its pairs are in the evidence)."""

    rounds: int
    seconds: float
    groups: int = Field(description="Pairs (and bisection blocks) measured over all rounds.")


class StatusReport(WireModel):
    """The status part (`status.json` of `<test>-evidence-job`), which the operator copies into status.report:
    compact at any node count; the evidence holds the rest."""

    version: str = "v1"
    mode: str = Field("gpu", description="gpu, or cpu-smoke (which never passes an AcceptanceTest).")
    generation: int | None = None
    uid: str | None = None
    run: str | None = None
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    passed: bool = Field(False, description="The workload's own verdict; the operator judges again.")
    error: str | None = None
    checks_run: list[CheckName] = Field(default_factory=list)
    tally: TallyPart = Field(default_factory=TallyPart)
    headline: HeadlinePart = Field(default_factory=HeadlinePart)
    localization: LocalizationPart | None = None
    failures: list[CheckResult] = Field(default_factory=list, description="The first failed results.")
    failures_omitted: int = Field(0, description="Failed results not listed here (all are in the evidence).")
    failed_nodes: list[str] = Field(default_factory=list)
    nodes: list[NodeRow] = Field(default_factory=list)
    environment: Environment = Field(default_factory=Environment)
    evidence: list[str] = Field(default_factory=list, description="ConfigMaps holding the full report.")


def _clip(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit - 3] + "..."


def _short(r: CheckResult) -> str:
    gpu = f" GPU {r.gpu}" if r.gpu is not None else ""
    return _clip(f"{r.check}/{r.name}{gpu}: {r.message or r.value}", MAX_ROW_FAILURE) or ""


def node_rows(report: ReportBase) -> list[NodeRow]:
    by_node: dict[str, list[CheckResult]] = {n: [] for n in report.environment.hostnames}
    for r in report.results:
        if r.node:
            by_node.setdefault(r.node, []).append(r)
    rows = []
    for node in sorted(by_node):
        failed = [r for r in by_node[node] if not r.passed]
        rows.append(NodeRow(node=node, passed=not failed, results=len(by_node[node]), failed=len(failed),
                            failure=_short(failed[0]) if failed else None))
    return rows


def compact(report: ReportBase, evidence: list[str]) -> StatusReport:
    """The status part of a report."""
    failures = [r for r in report.results if not r.passed]
    tally, headline = report.tally(), report.headline()
    return StatusReport(
        mode=report.mode, generation=report.generation, uid=report.uid, run=report.run,
        started_at=report.started_at,
        finished_at=report.finished_at, passed=report.passed, error=_clip(report.error, MAX_ERROR),
        checks_run=report.checks_run,
        tally=TallyPart(passed=tally.passed, failed=tally.failed, total=tally.total),
        headline=HeadlinePart(**dataclasses.asdict(headline)),
        localization=None if report.localization is None else LocalizationPart(
            rounds=report.localization.rounds, seconds=report.localization.seconds,
            groups=len(report.localization.pairs)),
        failures=[r.model_copy(update={"message": _clip(r.message, MAX_FAILURE_MESSAGE) or ""})
                  for r in failures[:MAX_FAILURES]],
        failures_omitted=max(0, len(failures) - MAX_FAILURES),
        failed_nodes=report.failed_nodes, nodes=node_rows(report),
        environment=report.environment.model_copy(update={"hostnames": []}),
        evidence=evidence,
    )


def _node_groups(report: ReportBase, groups: int) -> list[list[str]]:
    nodes = sorted({*report.environment.hostnames, *(r.node for r in report.results if r.node),
                    *(n.node for n in report.nodes)})
    per = max(NODES_PER_SHARD, math.ceil(len(nodes) / groups)) if nodes else NODES_PER_SHARD
    return [nodes[k * per:(k + 1) * per] for k in range(groups)]


def _job_wide(report: ReportBase) -> ReportBase:
    """The job-wide part: everything but what belongs to a node (results, each detail's rows of a node, the nodes'
    facts)."""
    update: dict[str, object] = {"results": [r for r in report.results if r.node is None], "nodes": []}
    for d in report.DETAILS:
        value = getattr(report, d.name)
        if d.rows == "":
            update[d.name] = [row for row in value if d.row_node(row) is None]
        elif d.rows is not None:
            update[d.name] = value.model_copy(update={d.rows: []}) if value is not None else None
    return report.model_copy(update=update, deep=True)


def _spread(items: list[T], node_of: Callable[[T], str | None], shard_of: dict[str, int], count: int) -> list[list[T]]:
    """Each shard's items, in report order, in one pass (a pass per shard is 25 M steps at 1,024 nodes)."""
    out: list[list[T]] = [[] for _ in range(count)]
    for item in items:
        shard = shard_of.get(node_of(item))  # type: ignore[arg-type]
        if shard is not None:
            out[shard].append(item)
    return out


def _node_parts(report: ReportBase, groups: list[list[str]]) -> list[ReportBase]:
    """The part of the report about each group of nodes: their results, each detail's rows of them, their facts."""
    shard_of = {node: k for k, group in enumerate(groups) for node in group}

    def spread(items: list[T], node_of: Callable[[T], str | None] = lambda x: x.node) -> list[list[T]]:
        return _spread(items, node_of, shard_of, len(groups))

    def detail_parts(d: Detail) -> list[object]:
        value = getattr(report, d.name)
        if d.rows == "":
            return spread(value, d.row_node)
        if value is None:
            return [None] * len(groups)
        return [value.model_copy(update={d.rows: mine}) for mine in spread(getattr(value, d.rows), d.row_node)]

    results, nodes = spread(report.results), spread(report.nodes)
    details = {d.name: detail_parts(d) for d in report.DETAILS if d.rows is not None}
    base = type(report)(mode=report.mode, generation=report.generation, uid=report.uid, run=report.run)
    return [base.model_copy(update={
        "results": results[k], "skipped": [], **{name: parts[k] for name, parts in details.items()},
        "nodes": nodes[k], "failed_nodes": [],
    }, deep=True) for k in range(len(groups))]


def _fit(part: ReportBase, budget: int = SHARD_BUDGET_BYTES) -> str:
    """The shard's JSON; over budget, the results' messages are cut, then each detail that can shrink does (nccl's
    sweep rows, then the burn-in's series), in run order, until it fits."""
    text = json.dumps(part.to_wire(), separators=(",", ":"))
    if len(text) <= budget:
        return text
    for r in part.results:
        r.message = _clip(r.message, MAX_FAILURE_MESSAGE) or ""
    for d in (d for d in part.DETAILS if d.shrink is not None):
        value = getattr(part, d.name)
        if value:
            setattr(part, d.name, d.shrink(value))
        text = json.dumps(part.to_wire(), separators=(",", ":"))
        if len(text) <= budget:
            break
    return text


def split(report: ReportBase, names: list[str]) -> tuple[StatusReport, dict[str, str]]:
    """The status part and each evidence ConfigMap's data (JSON of a partial Report), by name.

    `names` are the run's ConfigMaps (shard_names): the job-wide part goes into the first, the nodes,
    in name order, are spread over the others.
    """
    if len(names) < 2:
        raise ValueError("a report needs a job-wide evidence ConfigMap and at least one for its nodes")
    groups = _node_groups(report, len(names) - 1)
    status = compact(report, names)
    # The job-wide ConfigMap holds the status part too (STATUS_KEY): its evidence gets the rest of the budget.
    shards = {names[0]: _fit(_job_wide(report), SHARD_BUDGET_BYTES - len(status_text(status)))}
    for name, part in zip(names[1:], _node_parts(report, groups), strict=True):
        shards[name] = _fit(part)
    return status, shards


def status_text(status: StatusReport) -> str:
    """The status part as the job-wide ConfigMap holds it (STATUS_KEY)."""
    return json.dumps(status.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":"))


def deliveries(report: ReportBase, names: list[str]) -> list[tuple[str, dict[str, str]]]:
    """The ConfigMap writes that deliver `report`, in order: (name, data) for every node shard, then the job-wide
    ConfigMap with its evidence and the status part in one write, last (the mark that the evidence is complete)."""
    status, shards = split(report, names)
    job, *nodes = names
    return [*((name, {EVIDENCE_KEY: shards[name]}) for name in nodes),
            (job, {EVIDENCE_KEY: shards[job], STATUS_KEY: status_text(status)})]


class EvidenceError(ValueError):
    """The evidence of a report cannot be put together: what is missing or does not belong."""


def parts(status: StatusReport, read: Callable[[str], str | None], model: type[ReportBase]) -> Iterator[ReportBase]:
    """Each evidence shard as a partial report of `model` (the Report of the registry's checks, assembled above this
    family and handed in: checks/report_model.parts), the job-wide one first, read and parsed one at a time.

    `read` gives a shard's text by ConfigMap name. One at a time, so a reader that
    judges each part as it comes (the operator) never holds a 1,000-node report
    whole. Every shard listed must be there and be of the status part's run, and
    every node's results must be in one shard only (what a node's GPUs are judged
    against is the rest of its node, found in the same shard).
    """
    if not status.evidence:
        raise EvidenceError("status.report lists no evidence")
    holder: dict[str, str] = {}  # node -> the shard its results are in
    for name in status.evidence:
        text = read(name)
        if not text:
            raise EvidenceError(f"evidence ConfigMap {name} is missing or empty")
        try:
            part = model.model_validate_json(text)
        except ValueError as e:
            raise EvidenceError(f"evidence ConfigMap {name} could not be read: {str(e)[:300]}") from e
        if (part.generation, part.run, part.uid) != (status.generation, status.run, status.uid):
            raise EvidenceError(f"evidence ConfigMap {name} is for generation {part.generation} run "
                                f"{part.run or 'first'} of uid {part.uid}, not generation {status.generation} run "
                                f"{status.run or 'first'} of uid {status.uid}")
        for node in sorted({r.node for r in part.results if r.node}):
            if holder.setdefault(node, name) != name:
                raise EvidenceError(f"evidence ConfigMaps {holder[node]} and {name} both hold results of node {node}")
        yield part


def assemble(status: StatusReport, shards: dict[str, str | None], model: type[ReportBase]) -> ReportBase:
    """The full report of `model` from its status part and its evidence shards (every one listed must be there)."""
    each = parts(status, shards.get, model)
    full = next(each)
    for part in each:
        full.results += part.results
        full.nodes += part.nodes
        for d in (d for d in full.DETAILS if d.rows is not None):
            mine, theirs = getattr(full, d.name), getattr(part, d.name)
            if d.rows == "":
                mine += theirs
            elif mine is not None and theirs is not None:
                getattr(mine, d.rows).extend(getattr(theirs, d.rows))
    full.checks_run = [c for c in check_names() if c in full.checks_run]
    return full
