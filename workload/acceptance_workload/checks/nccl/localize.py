"""Inter-node localisation: which node makes the job slow between nodes.

The job-wide sweep says that the fabric is slow, not where; the per-node sweeps
only test NVLink inside each node. This stage measures all_reduce between pairs
of nodes, many disjoint pairs at once (one process group per pair, every rank
of both nodes in it, all pairs of a round concurrently):

- round 1 pairs the nodes in order (0-1, 2-3, ...); an odd node waits a round;
- every later round pairs each node not yet known good (slow, or untested)
  with a distinct known-good node it has not met, as many at once as there
  are good nodes; a suspect is settled once it was paired with two known-good
  nodes (one, when only one is good). One pair can dip on a healthy node (a
  fresh communicator on sockets spread 0.73-1.0 of its neighbours' on GPUs),
  so nobody is named on one pair with a good node.

A node's value is its best pair's busbw: a healthy node has at least one fast
pair, a culprit is slow with every partner. It is judged against the median of
the other nodes' values (relative: no absolute floor needed, so it works on any
fabric and on gloo) and against the inter-node floor where the profile has one.
One culprit takes two rounds at any even node count (its round-1 partner,
cleared in round 2, is its second good node) and three at 3 nodes; in general
the rounds are 1 + ceil(suspects / good nodes), plus one where a suspect met
only one good node, suspects being both nodes of each slow pair and an odd
node out.

When the job-wide sweep failed but every pair passes (a fault that only shows
with many nodes at once, e.g. a bad spine link), jobs above BISECT_ABOVE nodes
are bisected: each slow block is split in halves run concurrently, each half
judged against its sibling, down to pairs (log2(N) rounds).

A frozen node is not waited for here: the stage runs under the watchdog, whose
timeout names the rank whose heartbeat stopped.

The planning and judgement are pure; torch is imported only inside the functions that measure.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.nccl.rules import INTER_NODE, RULES, SLOW_BLOCK, inter_node_ratio
from acceptance_workload.checks.nccl.spec import Localize, NcclCheck
from acceptance_workload.contract import rules
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.wire import format_bytes, parse_bytes
from acceptance_workload.report.model import LocalizationDetail, PairRow

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Group, Session
    from acceptance_workload.runtime.watchdog import Watchdog

RESULT = INTER_NODE
BLOCK_RESULT = SLOW_BLOCK
WINDOWS = 5  # each group's time is the median of this many windows, so one hiccup does not name a node
WINDOW_SECONDS = 0.1  # at full speed: spans many scheduler slices (and stop-and-go periods) on a busy host
CALIBRATION_OPS = 3
MAX_ITERS = 1000
BISECT_ABOVE = 16  # nodes: above it, a job-wide failure that no pair shows is bisected
CONFIRM_PARTNERS = 2  # known-good nodes a node must be slow with before it is named (one pair can dip)
JOB_WIDE_SIGNALS = ("transport",)  # per-node nccl results that say the fabric between nodes failed
Block = tuple[str, ...]


# ----------------------------------------------------------------------------- when it runs


def job_failed(results: Sequence[CheckResult]) -> bool:
    """The job-wide NCCL results failed: a job-wide busbw, correctness or transport result."""
    return any(r.check == "nccl" and not r.passed and (r.node is None or r.name in JOB_WIDE_SIGNALS)
               for r in results)


def wanted(localize: Localize, nodes: int, failed: bool, floor: float | None) -> bool:
    """Whether the stage runs: onFailure runs it after a job-wide failure, and when no floor could fail the job.

    Never on fewer than 3 nodes: 2 nodes make one pair, which is the job-wide sweep again, with no third node
    to compare it with (and on gloo an extra group of every rank aborts rank 0 when a rank dies later).
    """
    if nodes < 3 or localize == "never":
        return False
    return localize == "always" or failed or floor is None


def inter_node_floor(check: NcclCheck, nodes: int) -> float | None:
    """The profile's (or spec's) job-wide all_reduce floor between nodes: a pair of nodes must reach it too."""
    return RULES.threshold(RESULT, check.thresholds, rules.Run(nodes=nodes))


def pair_bytes(check: NcclCheck) -> int:
    """The message size of the pair tests: the thresholds' reference size (bandwidth-bound), else the sweep's top."""
    top = parse_bytes(check.max_bytes)
    ref = check.thresholds.reference_bytes
    return min(top, parse_bytes(ref)) if ref is not None else top


# ----------------------------------------------------------------------------- judgement (pure)


@dataclass(frozen=True)
class NodeJudgement:
    node: str
    value: float | None  # best pair busbw, GB/s
    reference: float | None  # median of the other nodes' values
    threshold: float | None  # the higher of ratio x reference and the floor
    passed: bool


def threshold_for(reference: float | None, ratio: float | None, floor: float | None) -> float | None:
    bounds = [b for b in (None if ratio is None or reference is None else ratio * reference, floor) if b is not None]
    return max(bounds) if bounds else None


def judge_values(values: dict[str, float | None], ratio: float | None, floor: float | None,
                 ) -> dict[str, NodeJudgement]:
    """Each node's value against the median of the others' and the floor; a node without a value fails."""
    out = {}
    for node, value in values.items():
        others = [v for n, v in values.items() if n != node and v is not None]
        reference = statistics.median(others) if others else None
        threshold = threshold_for(reference, ratio, floor)
        passed = value is not None and (threshold is None or value >= threshold)
        out[node] = NodeJudgement(node, value, reference, threshold, passed)
    return out


def node_values(rows: Sequence[PairRow], nodes: Sequence[str]) -> dict[str, float | None]:
    """Each node's best pair busbw (None: never in a pair)."""
    values: dict[str, float | None] = {n: None for n in nodes}
    for row in rows:
        if row.kind != "pair" or row.busbw_gbps is None:
            continue
        for n in row.nodes:
            if n in values:  # a row naming a node the run did not measure counts for nothing
                values[n] = max(values[n] or 0.0, row.busbw_gbps)
    return values


@dataclass(frozen=True)
class GroupView:
    """One measured group beside what it was compared with, for the report's tables (text, HTML, JUnit)."""

    row: PairRow
    reference: float | None  # a pair: the median of the nodes' best pairs; a bisection half: its sibling half
    slow: bool  # below the ratio of its reference or the floor (or not measured)
    named: tuple[str, ...]  # the nodes in the group that the report names


def group_views(detail: LocalizationDetail, named: Collection[str]) -> list[GroupView]:
    """Every group of the stage beside its reference; `named`: the nodes the report fails (its results' judgement).

    A pair is compared with the median of the nodes' best pairs (a node is judged by its best pair against the
    median of the others'), a half of the bisection with its sibling half, as block_slow judges it.
    """
    values = [v for v in node_values(detail.pairs, sorted({n for r in detail.pairs for n in r.nodes})).values()
              if v is not None]
    median = statistics.median(values) if values else None
    rounds: dict[int, list[PairRow]] = {}
    for r in detail.pairs:
        rounds.setdefault(r.round, []).append(r)
    out = []
    for r in detail.pairs:
        mine = tuple(n for n in r.nodes if n in named)
        if r.kind == "pair":
            threshold = threshold_for(median, detail.ratio, detail.floor_gbps)
            slow = r.busbw_gbps is None or (threshold is not None and r.busbw_gbps < threshold)
            out.append(GroupView(r, median, slow, mine))
            continue
        sibling = [s.busbw_gbps for s in rounds[r.round] if s is not r and s.parent == r.parent
                   and s.busbw_gbps is not None]
        out.append(GroupView(r, statistics.median(sibling) if sibling else None,
                             block_slow(r, rounds[r.round], detail.ratio, detail.floor_gbps), mine))
    return out


def ratio_of(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else value / reference


# ----------------------------------------------------------------------------- planning (pure)


def first_round(nodes: Sequence[str]) -> list[Block]:
    return [tuple(nodes[i:i + 2]) for i in range(0, len(nodes) - 1, 2)]


def next_round(nodes: Sequence[str], rows: Sequence[PairRow], ratio: float | None, floor: float | None,
               *, failed: bool = False) -> list[Block]:
    """The next round's groups, or [] when every node is settled (or nothing more can be learnt).

    A node that is not passing is settled once it was paired with CONFIRM_PARTNERS distinct known-good nodes
    (fewer when fewer are good); until then it is paired with a good node it has not met. A healthy node
    whose one pair dipped gets a second, fresh pair (a new communicator) before anyone is named.
    """
    judged = judge_values(node_values(rows, nodes), ratio, floor)
    good = [n for n in nodes if judged[n].passed]
    met = partners(rows)
    enough = min(CONFIRM_PARTNERS, len(good))
    plan: list[Block] = []
    busy: set[str] = set()
    for n in (n for n in nodes if not judged[n].passed):
        mine = met.get(n, set())
        if len(mine.intersection(good)) >= enough:
            continue
        partner = next((g for g in good if g not in busy and g not in mine), None)
        if partner is not None:
            plan.append((n, partner))
            busy.add(partner)
    if plan:
        return plan
    if failed and len(nodes) > BISECT_ABOVE and len(good) == len(nodes):
        return bisect_round(nodes, rows, ratio, floor)
    return []


def partners(rows: Sequence[PairRow]) -> dict[str, set[str]]:
    """Whom each node was paired with, over the pairing rounds so far."""
    met: dict[str, set[str]] = {}
    for r in rows:
        if r.kind == "pair":
            for n in r.nodes:
                met.setdefault(n, set()).update(m for m in r.nodes if m != n)
    return met


def bisect_round(nodes: Sequence[str], rows: Sequence[PairRow], ratio: float | None, floor: float | None,
                 ) -> list[Block]:
    """Split the job (then each slow half) in two; [] once the slow blocks are pairs or no half is slower."""
    blocks = [r for r in rows if r.kind == "block"]
    if not blocks:
        return list(halves(tuple(nodes)))
    last = max(r.round for r in blocks)
    current = [r for r in blocks if r.round == last]
    slow = [tuple(r.nodes) for r in current if block_slow(r, current, ratio, floor)]
    return [h for block in slow if len(block) >= 4 for h in halves(block)]


def halves(block: Block) -> tuple[Block, Block]:
    mid = len(block) // 2
    return block[:mid], block[mid:]


def block_slow(row: PairRow, siblings: Sequence[PairRow], ratio: float | None, floor: float | None) -> bool:
    """A half slower than its sibling (the other half of the same block) by more than the ratio, or below the floor."""
    if row.busbw_gbps is None:
        return True
    other = [s.busbw_gbps for s in siblings if s is not row and s.busbw_gbps is not None
             and s.parent == row.parent]
    threshold = threshold_for(statistics.median(other) if other else None, ratio, floor)
    return threshold is not None and row.busbw_gbps < threshold


def slow_blocks(rows: Sequence[PairRow], ratio: float | None, floor: float | None) -> list[Block]:
    """The smallest blocks of the bisection that were slow (the fault is within each)."""
    blocks = [r for r in rows if r.kind == "block"]
    if not blocks:
        return []
    by_round: dict[int, list[PairRow]] = {}
    for r in blocks:
        by_round.setdefault(r.round, []).append(r)
    for k in sorted(by_round, reverse=True):  # the latest round in which some half was slow: the smallest blocks
        slow = [tuple(r.nodes) for r in by_round[k] if block_slow(r, by_round[k], ratio, floor)]
        if slow:
            return slow
    return []


def plan_and_measure(nodes: Sequence[str], measure: Callable[[Block], float], ratio: float | None,
                     floor: float | None, *, failed: bool = False) -> LocalizationDetail:
    """The whole stage with `measure(block) -> busbw` in place of the collectives: on paper, and in tests."""
    detail = LocalizationDetail(bytes=0, ratio=ratio, floor_gbps=floor, rounds=0, seconds=0.0)
    plan = first_round(nodes)
    while plan and detail.rounds < max_rounds(len(nodes)):
        detail.rounds += 1
        for block in plan:
            detail.pairs.append(new_row(detail.rounds, block, detail.pairs, measure(block), 0.0))
        plan = next_round(nodes, detail.pairs, ratio, floor, failed=failed)
    return detail


def simulated(nodes: int, bad: set[int], *, failed: bool = False, only_at_scale: bool = False,
              ) -> tuple[list[str], LocalizationDetail]:
    """The stage on paper for `nodes` nodes with `bad` slow: a group's busbw 1, or 0.1 with a bad node in it.

    only_at_scale: the bad nodes are slow only in groups larger than a pair (a fault no pair shows).
    """
    names = [f"n{i}" for i in range(nodes)]

    def measure(block: Block) -> float:
        hit = any(int(n[1:]) in bad for n in block) and (len(block) > 2 or not only_at_scale)
        return 0.1 if hit else 1.0
    return names, plan_and_measure(names, measure, 0.75, None, failed=failed)


def new_row(k: int, block: Block, rows: Sequence[PairRow], busbw: float, time_us: float) -> PairRow:
    """The row of one group of round k: a pair of the pairing rounds, or a half of the bisection (with its parent)."""
    if len(block) == 2 and not any(r.round == k and r.kind == "block" for r in rows) and not _bisecting(k, rows):
        return PairRow(round=k, kind="pair", nodes=list(block), busbw_gbps=busbw, time_us=time_us)
    parent = next((i for i in range(len(rows) - 1, -1, -1)
                   if rows[i].kind == "block" and set(block) < set(rows[i].nodes)), None)
    return PairRow(round=k, kind="block", nodes=list(block), parent=parent, busbw_gbps=busbw, time_us=time_us)


def _bisecting(k: int, rows: Sequence[PairRow]) -> bool:
    """Round k continues a bisection: the previous round split blocks."""
    return any(r.round == k - 1 and r.kind == "block" for r in rows)


def max_rounds(nodes: int) -> int:
    """A bound no plan reaches on a sane run (each round settles or halves something)."""
    return nodes + 2 * max(1, nodes.bit_length()) + 2


# ----------------------------------------------------------------------------- results (rank 0)


def results(detail: LocalizationDetail, nodes: Sequence[str], estimated: Collection[str] = ()) -> list[CheckResult]:
    """One inter_node_busbw result per node: its best pair beside the median of the other nodes."""
    rows = detail.pairs
    judged = judge_values(node_values(rows, nodes), detail.ratio, detail.floor_gbps)
    out = []
    for node in nodes:
        j = judged[node]
        result = RULES.judged(RESULT, _round(j.value), _round(j.threshold), passed=j.passed, node=node,
                              message=describe(j, rows, detail))
        out.append(RULES.mark_estimate(result, estimated))
    for block in slow_blocks(rows, detail.ratio, detail.floor_gbps):
        out += [RULES.result(BLOCK_RESULT, None, None, passed=False, node=n,
                            message=f"the job-wide fault shows in the block {_few(block)} of the bisection but "
                                    "in none of its pairs") for n in block]
    return out


def describe(j: NodeJudgement, rows: Sequence[PairRow], detail: LocalizationDetail) -> str:
    """'pairs: with sim-node-0 0.41 GB/s (round 2), with sim-node-3 0.38 GB/s (round 1); median of the others 1.62'."""
    mine = [r for r in rows if r.kind == "pair" and j.node in r.nodes]
    pairs = ", ".join(f"with {next(n for n in r.nodes if n != j.node)} {_fmt(r.busbw_gbps)} GB/s (round {r.round})"
                      for r in mine[:4]) or "in no pair"
    text = f"pairs: {pairs}; median of the other nodes {_fmt(j.reference)} GB/s"
    if detail.ratio is not None:
        text += f"; a node below {detail.ratio:g} of it is named"
    if detail.floor_gbps is not None:
        text += f"; floor {detail.floor_gbps:g} GB/s"
    if not j.passed:
        text += (": slow with every partner" if len(mine) > 1 else ": slow, and no known-good partner was left")
    return text


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _few(block: Sequence[str], limit: int = 6) -> str:
    return ", ".join(block[:limit]) + (f" and {len(block) - limit} more" if len(block) > limit else "")


# ----------------------------------------------------------------------------- the stage on a session


def run_stage(session: Session, check: NcclCheck, watchdog: Watchdog, *, failed: bool, floor: float | None,
              progress: Callable[[str], None] | None = None) -> LocalizationDetail | None:
    """Every rank runs the rounds rank 0 plans; rank 0 returns the stage's rows, rounds and seconds."""
    from acceptance_workload.checks.nccl.nccl import bandwidths

    control = session.control
    nodes = session.nodes()
    size = pair_bytes(check)
    ratio = inter_node_ratio(check.thresholds)
    detail = LocalizationDetail(bytes=size, ratio=ratio, floor_gbps=floor, rounds=0, seconds=0.0)
    t0 = time.monotonic()
    plan: list[Block] | None = first_round(nodes) if session.is_root else None
    k = 0
    while True:
        plan = [tuple(b) for b in control.broadcast(f"localize plan {k + 1}", plan) or []]
        if not plan:
            break
        k += 1
        seconds = measure_round(session, check, watchdog, plan, size, k)
        gathered = control.gather(f"localize round {k}", seconds)
        if not session.is_root:
            continue
        assert gathered is not None
        for block in plan:
            ranks = [r for n in block for r in session.node_ranks(n)]
            mean = statistics.fmean(gathered[r] for r in ranks)
            busbw = round(bandwidths("all_reduce", size, mean, len(ranks))[1], 4)
            detail.pairs.append(new_row(k, block, detail.pairs, busbw, round(mean * 1e6, 2)))
        plan = next_round(nodes, detail.pairs, ratio, floor, failed=failed) if k < max_rounds(len(nodes)) else []
        if progress:
            progress(f"localize round {k}: {len(plan)} group(s) next")
    if not session.is_root:
        return None
    detail.rounds, detail.seconds = k, round(time.monotonic() - t0, 2)
    if progress:
        progress(f"localize: {k} round(s) of all_reduce {format_bytes(size)} in {detail.seconds:.1f}s")
    return detail


def measure_round(session: Session, check: NcclCheck, watchdog: Watchdog, plan: list[Block], size: int,
                  k: int) -> float | None:
    """This rank's seconds per all_reduce in its block's group this round; None when its node is idle.

    Every rank creates every group of the round, in plan order, and only the
    members connect. torch names a group from a per-process count of the groups
    it has created; a group-local creation (use_local_synchronization) counts
    only on the members, so once a round left a node idle (an odd node out, a
    node not paired in round 2), two members of a later group computed
    different names, waited on different store keys and hung until the
    collective timeout, blaming nobody (a healthy 3-node run failed). A
    non-member's call only counts: no store traffic and no barrier (unless
    TORCH_DIST_INIT_BARRIER=1), so with 512 pairs a round no rank takes part in
    the 511 other groups' setup.
    """
    import torch.distributed as dist

    from acceptance_workload.runtime.launch import Group

    node = next(i.node for i in session.ranks if i.rank == session.rank)
    mine = next((b for b in plan if node in b), None)
    # gloo processes share one host's cores: groups measured at once would take cores from each other (a
    # stalled pair hands its cores to the healthy one), so on CPU they take turns. GPUs run them at once.
    in_turn = session.device.type == "cpu"
    seconds = None
    with watchdog.step(f"nccl localize round {k}"):
        own = None
        for block in plan:
            ranks = sorted(r for n in block for r in session.node_ranks(n))
            pg = dist.new_group(ranks)
            if block == mine:
                own = Group(scope="pair", ranks=ranks, rank=ranks.index(session.rank), pg=pg)
        for i, block in enumerate(plan if in_turn else [mine]):
            if own is not None and block == mine:
                seconds = time_group(own, check, size, session.device)
            if in_turn:
                session.control.allgather(f"localize round {k} group {i}", None)
    # Kept, not destroyed: a destroyed gloo group's connections abort the process (std::terminate) when a
    # peer dies later in the run; a live one reports it like the job's other groups. A few groups per rank.
    return seconds


def time_group(group: Group, check: NcclCheck, size: int, device: Any) -> float:
    """Seconds per all_reduce on `group`: the median of WINDOWS windows of at least WINDOW_SECONDS each.

    The iterations come from the fastest of a few single operations (the slowest
    rank's, so every rank runs the same count): each window then spans many
    scheduler slices, or stop-and-go periods of a node that keeps stalling, and
    shows its average rate; the median leaves out one disturbed window.
    """
    import torch
    import torch.distributed as dist

    from acceptance_workload.checks.nccl.nccl import _barrier, _sync

    dtype = getattr(torch, check.dtype)
    buf = torch.ones(max(1, size // torch.tensor([], dtype=dtype).element_size()), dtype=dtype, device=device)
    for _ in range(max(1, check.warmup_iters)):
        dist.all_reduce(buf, group=group.pg)
    singles = []
    for _ in range(CALIBRATION_OPS):
        _barrier(torch, group, device)
        t0 = time.perf_counter()
        dist.all_reduce(buf, group=group.pg)
        _sync(torch, device)
        singles.append(time.perf_counter() - t0)
    estimate = torch.tensor([min(singles)], dtype=torch.float64, device=device)
    dist.all_reduce(estimate, op=dist.ReduceOp.MAX, group=group.pg)
    iters = iterations(float(estimate.item()))
    windows = []
    for _ in range(WINDOWS):
        _barrier(torch, group, device)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf, group=group.pg)
        _sync(torch, device)
        windows.append((time.perf_counter() - t0) / iters)
    return statistics.median(windows)


def iterations(one_op_seconds: float) -> int:
    """Operations a window needs to last WINDOW_SECONDS (bounded: a 1-us op does not run a million times)."""
    return max(1, min(MAX_ITERS, math.ceil(WINDOW_SECONDS / max(one_op_seconds, 1e-6))))


def named_and_judged(checked: Sequence[CheckResult]) -> tuple[set[str], set[str]]:
    """(the nodes the stage named, the nodes it judged by their pairs), for the reports that show the stage."""
    named = {r.node for r in checked if r.check == "nccl" and r.node and not r.passed
             and r.name in (RESULT, BLOCK_RESULT)}
    judged = {r.node for r in checked if r.check == "nccl" and r.name == RESULT and r.node}
    return named, judged
