"""The collective sweep, measured and checked the way NVIDIA's nccl-tests do it.

Definitions (nccl-tests' PERFORMANCE.md): GB = 1e9 bytes; algbw = size / time;
busbw = algbw x factor, factor 2(n-1)/n for all_reduce, (n-1)/n for
all_gather, reduce_scatter and alltoall (size = the total buffer), 1 for
broadcast and sendrecv. time = wall clock of `iters` back-to-back operations
after a barrier, divided by iters, averaged over the ranks (nccl-tests' -a 1).
Every element of the result of one more operation is checked against values
computed from the deterministic per-rank fill; any wrong element fails.

Each collective is one record in collectives.COLLS (its op, busbw factor,
buffer layout, fill period, expected output and minimum ranks), as nccl-tests
keeps one `struct testColl` per collective; its results are rows of the check's RULES (rules.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.nccl import latency
from acceptance_workload.checks.nccl.collectives import (  # noqa: F401  (the sweep's vocabulary, as tests and bench import it)
    COLLS,
    OPS,
    Layout,
    OpFn,
    bandwidths,
    busbw_factor,
    count_wrong,
    expected_chunk,
    fill,
    layout,
    period,
    tolerance,
)
from acceptance_workload.checks.nccl.rules import RULES
from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.terms import COLLECTIVES, Collective
from acceptance_workload.contract.wire import format_bytes, parse_bytes
from acceptance_workload.report.model import ONE_RANK_BUSBW, NcclRow, NcclSweep, Skip

if TYPE_CHECKING:

    from acceptance_workload.runtime.launch import Group, Session
    from acceptance_workload.runtime.watchdog import Watchdog

UNSUPPORTED_MARKERS = ("not supported", "unsupported", "not implemented", "no support", "does not support")


# ----------------------------------------------------------------------------- one sweep on one group


@dataclass
class Measured:
    """One rank's measurements of one collective over the sweep."""

    sizes: list[int] = field(default_factory=list)  # bytes as nccl-tests counts them
    counts: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # mean time per operation on this rank
    wrong: list[int] = field(default_factory=list)
    skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"sizes": self.sizes, "counts": self.counts, "seconds": self.seconds, "wrong": self.wrong,
                "skipped": self.skipped}


def _sync(torch_mod: Any, device: Any) -> None:
    if device.type == "cuda":
        torch_mod.cuda.synchronize(device)


def _barrier(torch_mod: Any, group: Group, device: Any) -> None:
    """A tiny all_reduce on the group: starts the timed loop on every rank at once, like nccl-tests' barrier."""
    import torch.distributed as dist

    t = torch_mod.zeros(1, device=device)
    dist.all_reduce(t, group=group.pg)
    _sync(torch_mod, device)


def unsupported_reason(error: BaseException) -> str | None:
    text = str(error)
    if isinstance(error, NotImplementedError) or any(m in text.lower() for m in UNSUPPORTED_MARKERS):
        return text.splitlines()[0][:300] if text else type(error).__name__
    return None


@dataclass
class _Sweep:
    """One collective's sweep on one group: its buffers (sized for the largest message), probe and sizes."""

    collective: Collective
    check: NcclCheck
    group: Group
    device: Any
    op: OpFn
    plan: list[Layout]
    where: str
    torch: Any = None
    send_all: Any = None
    recv_all: Any = None

    def allocate(self) -> None:
        import torch

        dtype = getattr(torch, self.check.dtype)
        self.torch = torch
        self.send_all = torch.empty(max(lay.send for lay in self.plan), dtype=dtype, device=self.device)
        self.recv_all = torch.empty(max(lay.recv for lay in self.plan), dtype=dtype, device=self.device)

    def buffers(self, lay: Layout) -> tuple[Any, Any]:
        """Views of the buffers for one size, freshly filled with this rank's values."""
        s, r = (self.send_all[: lay.send] if lay.send else None), self.recv_all[: lay.recv]
        fill(self.torch, s if s is not None else r, self.group.rank, period(self.collective))
        return s, r

    def probe(self, watchdog: Watchdog) -> str | None:
        """One operation of the smallest size: the reason gloo cannot run it (agreed by every rank), or None."""
        import torch.distributed as dist

        skipped = None
        with watchdog.step(f"nccl {self.where} {self.collective} probe"):
            s, r = self.buffers(self.plan[0])
            try:
                self.op(s, r, self.group)
                _sync(self.torch, self.device)
            except (RuntimeError, NotImplementedError, ValueError) as e:
                # NCCL runs all six: "Operation not supported" from it is a fault (RDMA registration, driver).
                skipped = None if dist.get_backend(self.group.pg) == "nccl" else unsupported_reason(e)
                if skipped is None:
                    raise
        # Every rank must agree on skipping, or some would wait in a collective the others never enter.
        verdicts = watchdog.control.allgather(f"probe {self.where} {self.collective}", skipped)
        return next((v for v in verdicts if v), None)

    def measure(self, lay: Layout, watchdog: Watchdog) -> tuple[float, int]:
        """Seconds per operation of one size, then the wrong elements of one more operation on fresh buffers."""
        g, op = self.group, self.op
        with watchdog.step(f"nccl {self.where} {self.collective} {format_bytes(lay.size)}"):
            s, r = self.buffers(lay)
            seconds = _time_op(self.torch, lambda: op(s, r, g), self.check, g, self.device,
                               self.check.uses_cuda_graph(lay.size))
            s, r = self.buffers(lay)
            if s is not None:
                r.fill_(float("nan"))
            op(s, r, g)
            _sync(self.torch, self.device)
            wrong = count_wrong(self.torch, self.collective, r, g.rank, g.size, lay.count, 0,
                                tolerance(self.check.dtype, g.size))
        return seconds, wrong


def sweep_collective(
    collective: Collective,
    check: NcclCheck,
    group: Group,
    device: Any,
    watchdog: Watchdog,
    *,
    ops: Mapping[Collective, OpFn] = OPS,
    progress: Callable[[str], None] | None = None,
) -> Measured:
    """Sweep one collective over check.sizes() on `group`; this rank's timings and wrong counts."""
    import torch

    elem = torch.tensor([], dtype=getattr(torch, check.dtype)).element_size()
    n = group.size
    out = Measured()
    where = "job" if group.scope == "job" else "node"
    if n < COLLS[collective].min_ranks:
        out.skipped = f"{collective} needs at least {COLLS[collective].min_ranks} ranks"
        return out
    plan = [lay for size in check.sizes() if (lay := layout(collective, size, n, elem)) is not None]
    if not plan:
        out.skipped = f"no size up to {format_bytes(parse_bytes(check.max_bytes))} holds one element per rank"
        # Still take part in the probe's exchange: a node with fewer GPUs may have sizes to measure and wait in it.
        watchdog.control.allgather(f"probe {where} {collective}", out.skipped)
        return out
    sweep = _Sweep(collective, check, group, device, ops[collective], plan, where)
    sweep.allocate()
    out.skipped = sweep.probe(watchdog)
    if out.skipped:
        return out
    for lay in plan:
        seconds, wrong = sweep.measure(lay, watchdog)
        out.sizes.append(lay.size)
        out.counts.append(lay.count)
        out.seconds.append(seconds)
        out.wrong.append(wrong)
    if progress:
        progress(f"{collective} ({where}, {n} ranks): {len(out.sizes)} sizes up to {format_bytes(out.sizes[-1])}")
    return out


def _time_op(torch_mod: Any, run: Callable[[], None], check: NcclCheck, group: Group, device: Any,
             cuda_graph: bool) -> float:
    """Seconds per operation: the median of `check.windows` windows of `check.iters` operations.

    Each window starts after a barrier, so every rank starts together as in
    nccl-tests. With a CUDA graph (nccl-tests' -G) the iterations are captured
    once and replayed, so Python's launch cost drops out of small sizes.
    """
    for _ in range(check.warmup_iters):
        run()
    _sync(torch_mod, device)
    graph = None
    if cuda_graph and device.type == "cuda":
        graph = torch_mod.cuda.CUDAGraph()
        with torch_mod.cuda.graph(graph):
            for _ in range(check.iters):
                run()
        graph.replay()  # one untimed replay: the graph's first launch uploads it
        _sync(torch_mod, device)
    windows = []
    for _ in range(check.windows):
        _barrier(torch_mod, group, device)
        t0 = time.perf_counter()
        if graph is not None:
            graph.replay()
        else:
            for _ in range(check.iters):
                run()
        _sync(torch_mod, device)
        windows.append((time.perf_counter() - t0) / check.iters)
    del graph
    return statistics.median(windows)


# ----------------------------------------------------------------------------- rows and judgement (rank 0)


def rows_from_ranks(collective: Collective, per_rank: list[Measured]) -> list[NcclRow]:
    """nccl-tests rows: time averaged over the group's ranks, wrong elements summed."""
    n = len(per_rank)
    first = per_rank[0]
    rows = []
    for i, size in enumerate(first.sizes):
        seconds = statistics.fmean(m.seconds[i] for m in per_rank)
        algbw, busbw = bandwidths(collective, size, seconds, n)
        rows.append(NcclRow(size=size, count=first.counts[i], time_us=round(seconds * 1e6, 2),
                            algbw_gbps=round(algbw, 3), busbw_gbps=round(busbw, 3),
                            wrong=sum(m.wrong[i] for m in per_rank)))
    return rows


def best_busbw(rows: list[NcclRow], reference_bytes: int) -> NcclRow | None:
    eligible = [r for r in rows if r.size >= reference_bytes]
    return max(eligible, key=lambda r: r.busbw_gbps) if eligible else None


def correctness_result(sweep: NcclSweep) -> CheckResult:
    wrong = sum(r.wrong for r in sweep.rows)
    bad = [r for r in sweep.rows if r.wrong]
    where = f"on node {sweep.node}" if sweep.scope == "node" else f"over the job ({sweep.ranks} ranks)"
    msg = (f"{sweep.collective} {where}: {wrong} wrong elements at "
           + ", ".join(format_bytes(r.size) for r in bad[:6]) if bad else f"{sweep.collective} {where}: all correct")
    return RULES.result(f"{sweep.collective}_correctness", float(wrong), None, message=msg,
                        node=sweep.node if sweep.scope == "node" else None)


def busbw_result(name: str, sweep: NcclSweep, threshold: float | None, reference_bytes: int,
                 max_bytes: int) -> CheckResult:
    """Best busbw at or above the reference size, judged against the threshold (missing fails)."""
    best = best_busbw(sweep.rows, reference_bytes)
    node = sweep.node if sweep.scope == "node" else None
    if best is None:
        msg = (f"no message size >= {format_bytes(reference_bytes)} in the sweep (maxBytes "
               f"{format_bytes(max_bytes)}): raise maxBytes or lower thresholds.referenceBytes")
        return RULES.judged(name, None, threshold, message=msg, node=node)
    out = RULES.judged(name, best.busbw_gbps, threshold, node=node, observed=f"{format_bytes(best.size)}")
    where = f"node {sweep.node}" if node else f"{sweep.ranks} ranks"
    out.message = f"{best.busbw_gbps:.1f} GB/s busbw at {format_bytes(best.size)} ({where})"
    if threshold is not None:
        out.message += f"; needs >= {threshold:g}" if not out.passed else f" >= {threshold:g}"
    return out


@dataclass
class NcclOutcome:
    sweeps: list[NcclSweep] = field(default_factory=list)
    results: list[CheckResult] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)


def judge_sweeps(check: NcclCheck, sweeps: list[NcclSweep], skipped: dict[tuple[str, str | None], str],
                 nodes: list[str], backend: str, estimated: Collection[str] = ()) -> NcclOutcome:
    """Every result, each marked where the threshold it was judged by is the profile's estimate."""
    out = _judge_sweeps(check, sweeps, skipped, nodes, backend)
    out.results += latency.latency_results(check, sweeps, nodes, skipped)
    out.results = [RULES.mark_estimate(r, estimated) for r in out.results]
    return out


def _judge_sweeps(check: NcclCheck, sweeps: list[NcclSweep], skipped: dict[tuple[str, str | None], str],
                  nodes: list[str], backend: str) -> NcclOutcome:
    """Results for every sweep (correctness) and every threshold; a threshold whose sweep is missing fails."""
    out = NcclOutcome(sweeps=sweeps)
    th = check.thresholds
    reference = parse_bytes(th.reference_bytes) if th.reference_bytes is not None else 0
    max_bytes = parse_bytes(check.max_bytes)
    by_key = {(s.collective, s.node if s.scope == "node" else None): s for s in sweeps}
    for s in sweeps:
        out.results.append(correctness_result(s))
    for (collective, node), reason in skipped.items():
        out.skipped.append(Skip(check="nccl", name=f"{collective}" + (f" on node {node}" if node else ""),
                                reason=f"{backend} ({check.dtype}): {reason}"))
    for collective in check.collectives:
        threshold = RULES.threshold(f"{collective}_busbw", th)
        sweep = by_key.get((collective, None))
        if sweep is None:
            if threshold is not None:
                why = skipped.get((collective, None), "not measured")
                out.results.append(RULES.judged(f"{collective}_busbw", None, threshold,
                    message=f"{collective} was not measured ({why}); its threshold cannot pass"))
            continue
        if sweep.ranks == 1:
            _one_rank(out, f"{collective}_busbw", collective, threshold, None)
            continue
        out.results.append(busbw_result(f"{collective}_busbw", sweep, threshold, reference, max_bytes))
    if "all_reduce" in check.collectives and not check.per_node and len(nodes) > 1:
        # perNode off asks for no sweep inside each node: its floor is not judged (nothing is missing), said once.
        out.skipped.append(Skip(check="nccl", name="all_reduce on each node",
                                reason="checks.nccl.perNode is false: no node's sweep was asked for"))
    elif "all_reduce" in check.collectives:
        node_threshold = RULES.threshold("node_all_reduce_busbw", th)
        for node in nodes:
            sweep = by_key.get(("all_reduce", node))
            if sweep is None and len(nodes) == 1:
                job = by_key.get(("all_reduce", None))
                sweep = job.model_copy(update={"scope": "node", "node": node}) if job else None
            if sweep is None:
                if node_threshold is not None:
                    why = skipped.get(("all_reduce", node), "not measured")
                    out.results.append(RULES.judged("node_all_reduce_busbw", None, node_threshold, node=node,
                        message=f"all_reduce inside node {node} was not measured ({why})"))
                continue
            if sweep.ranks == 1:
                _one_rank(out, "node_all_reduce_busbw", f"all_reduce on node {node}", node_threshold, node)
                continue
            out.results.append(busbw_result("node_all_reduce_busbw", sweep, node_threshold, reference, max_bytes))
    return out


def _one_rank(out: NcclOutcome, name: str, what: str, threshold: float | None, node: str | None) -> None:
    """A busbw of one rank: a skip saying why (the sweep's rows still show the operation ran, and its correctness
    is judged); where a threshold asks for it anyway (the spec set one), a missing value that fails."""
    if threshold is None:
        out.skipped.append(Skip(check="nccl", name=name + (f" on node {node}" if node else ""), reason=ONE_RANK_BUSBW))
        return
    out.results.append(RULES.judged(name, None, threshold, node=node,
                                    message=f"{what}: {ONE_RANK_BUSBW}; its threshold cannot pass"))


# ----------------------------------------------------------------------------- the check on a session


def run_sweeps(session: Session, check: NcclCheck, watchdog: Watchdog, *,
               ops: Mapping[Collective, OpFn] = OPS,
               progress: Callable[[str], None] | None = None,
               estimated: Collection[str] = ()) -> NcclOutcome | None:
    """The whole-job sweep of every collective, then each node's sweep; judged on rank 0 (None elsewhere)."""
    control = session.control
    nodes = session.nodes()
    groups = [session.job_group()]
    node_members: dict[str, list[int]] = {}
    per_node_skip: str | None = None
    if check.per_node and len(nodes) > 1:
        node_members, own = session.node_groups()
        if min(len(r) for r in node_members.values()) < 2:
            per_node_skip = "one GPU per node: nothing to measure inside a node"
        else:
            groups.append(own)
    sweeps: list[NcclSweep] = []
    skipped: dict[tuple[str, str | None], str] = {}
    for collective in [c for c in COLLECTIVES if c in check.collectives]:
        for group in groups:
            measured = sweep_collective(collective, check, group, session.device, watchdog, ops=ops,
                                        progress=progress if session.is_root else None)
            gathered = control.gather(f"nccl {group.scope} {collective}", measured.to_json())
            if gathered is None:
                continue
            per_rank = [Measured(**m) for m in gathered]
            if group.scope == "job":
                _collect(collective, per_rank, list(range(session.world_size)), None, check, sweeps, skipped)
            else:
                for node, ranks in node_members.items():
                    _collect(collective, [per_rank[r] for r in ranks], ranks, node, check, sweeps, skipped)
        if per_node_skip and session.is_root:
            for node in nodes:
                skipped[(collective, node)] = per_node_skip
    if not session.is_root:
        return None
    return judge_sweeps(check, sweeps, skipped, nodes, session.backend, estimated)


def _collect(collective: Collective, per_rank: list[Measured], ranks: list[int], node: str | None,
             check: NcclCheck, sweeps: list[NcclSweep], skipped: dict[tuple[str, str | None], str]) -> None:
    reason = next((m.skipped for m in per_rank if m.skipped), None)
    if reason:
        skipped[(collective, node)] = reason
        return
    sweeps.append(NcclSweep(collective=collective, scope="node" if node else "job", node=node, ranks=len(ranks),
                            dtype=check.dtype, timing=check.timing(), rows=rows_from_ranks(collective, per_rank)))
