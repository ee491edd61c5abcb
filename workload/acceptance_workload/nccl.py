"""The collective sweep, measured and checked the way NVIDIA's nccl-tests do it.

Definitions (nccl-tests' PERFORMANCE.md): GB = 1e9 bytes; algbw = size / time;
busbw = algbw x factor, factor 2(n-1)/n for all_reduce, (n-1)/n for
all_gather, reduce_scatter and alltoall (size = the total buffer), 1 for
broadcast and sendrecv. time = wall clock of `iters` back-to-back operations
after a barrier, divided by iters, averaged over the ranks (nccl-tests' -a 1).
Every element of the result of one more operation is checked against values
computed from the deterministic per-rank fill; any wrong element fails.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from acceptance_workload import rules
from acceptance_workload.checks import COLLECTIVES, Collective, NcclCheck
from acceptance_workload.report import CheckResult, NcclRow, NcclSweep, Skip
from acceptance_workload.wire import format_bytes, parse_bytes

if TYPE_CHECKING:
    import torch

    from acceptance_workload.control import Watchdog
    from acceptance_workload.launch import Group, Session

GB = 1e9
CHUNK_ELEMENTS = 1 << 24  # correctness check in slices, so it needs little memory beside the buffers
UNSUPPORTED_MARKERS = ("not supported", "unsupported", "not implemented", "no support", "does not support")


# ----------------------------------------------------------------------------- fill values and expectations
# Rank r's element j holds f(r, j) = (r + j) % P + 1: small integers, exact in every dtype.
# P = 4 for the reductions, so sums over many ranks stay small and exact; P = 251 for the
# collectives that only move data, so every rank's block differs (up to 251 ranks) and a
# misplaced or dropped block shows up (with P = 4, ranks r and r + 4 would hold the same data).
REDUCE_PERIOD = 4
MOVE_PERIOD = 251  # the largest prime whose values are all exact integers in bfloat16


def fill_value(torch_mod: Any, rank: Any, index: torch.Tensor, p: int = REDUCE_PERIOD) -> torch.Tensor:
    return (index + rank).remainder_(p).add_(1)


def sum_over_ranks(torch_mod: Any, n: int, index: torch.Tensor) -> torch.Tensor:
    """sum_{r<n} f(r, j) without looping over n: every 4 ranks add 1+2+3+4."""
    q, m = divmod(n, 4)
    total = torch_mod.full_like(index, 10 * q)
    for t in range(m):
        total += (index + t).remainder_(4).add_(1)
    return total


# Expected output elements at positions `index` of group rank `grank`'s receive buffer:
# f(torch, grank, n, count, root, index, P), one per collective.
Expect = Callable[[Any, int, int, int, int, "torch.Tensor", int], "torch.Tensor"]


def _expect_all_reduce(t: Any, grank: int, n: int, count: int, root: int, index: torch.Tensor,
                       p: int) -> torch.Tensor:
    return sum_over_ranks(t, n, index)


def _expect_reduce_scatter(t: Any, grank: int, n: int, count: int, root: int, index: torch.Tensor,
                           p: int) -> torch.Tensor:
    return sum_over_ranks(t, n, index + grank * count)


def _expect_all_gather(t: Any, grank: int, n: int, count: int, root: int, index: torch.Tensor,
                       p: int) -> torch.Tensor:
    return fill_value(t, index // count, index % count, p)


def _expect_alltoall(t: Any, grank: int, n: int, count: int, root: int, index: torch.Tensor,
                     p: int) -> torch.Tensor:
    return fill_value(t, index // count, index % count + grank * count, p)


def _expect_broadcast(t: Any, grank: int, n: int, count: int, root: int, index: torch.Tensor,
                      p: int) -> torch.Tensor:
    return fill_value(t, root, index, p)


def _expect_sendrecv(t: Any, grank: int, n: int, count: int, root: int, index: torch.Tensor,
                     p: int) -> torch.Tensor:
    return fill_value(t, (grank - 1) % n, index, p)


# ----------------------------------------------------------------------------- the operations

OpFn = Callable[["torch.Tensor | None", "torch.Tensor", "Group"], None]


def _op_all_reduce(send: Any, recv: Any, g: Group) -> None:
    import torch.distributed as dist

    dist.all_reduce(recv, group=g.pg)


def _op_all_gather(send: Any, recv: Any, g: Group) -> None:
    import torch.distributed as dist

    dist.all_gather_into_tensor(recv, send, group=g.pg)


def _op_reduce_scatter(send: Any, recv: Any, g: Group) -> None:
    import torch.distributed as dist

    dist.reduce_scatter_tensor(recv, send, group=g.pg)


def _op_alltoall(send: Any, recv: Any, g: Group) -> None:
    import torch.distributed as dist

    dist.all_to_all_single(recv, send, group=g.pg)


def _op_broadcast(send: Any, recv: Any, g: Group) -> None:
    import torch.distributed as dist

    dist.broadcast(recv, src=g.ranks[0], group=g.pg)


def _op_sendrecv(send: Any, recv: Any, g: Group) -> None:
    import torch.distributed as dist

    nxt, prv = g.ranks[(g.rank + 1) % g.size], g.ranks[(g.rank - 1) % g.size]
    ops = [dist.P2POp(dist.isend, send, nxt, group=g.pg), dist.P2POp(dist.irecv, recv, prv, group=g.pg)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


# ----------------------------------------------------------------------------- one record per collective

Elements = Literal["none", "count", "total"]  # a buffer of no elements (in place), `count`, or count x ranks


@dataclass(frozen=True)
class Coll:
    """One collective, as nccl-tests keeps it in `struct testColl`: everything the sweep needs to know of it.

    A new collective is one record in COLLS (plus its op and expectation above)
    and its name in checks.Collective; its results are rows of rules.RULES.
    """

    op: OpFn
    bus_factor: Callable[[int], float]  # busbw = algbw x this, for n ranks (nccl-tests' PERFORMANCE.md)
    split: bool  # the nominal size is the total over the ranks: count = size / n (gather, scatter, alltoall)
    send: Elements  # elements of the send buffer ("none": in place in the receive buffer)
    recv: Elements
    period: int  # P of the fill values: REDUCE_PERIOD for reductions, MOVE_PERIOD for data movement
    expect: Expect
    min_ranks: int = 1


def _ring_reduce(n: int) -> float:
    return 2 * (n - 1) / n


def _ring_move(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


COLLS: dict[Collective, Coll] = {
    "all_reduce": Coll(_op_all_reduce, _ring_reduce, False, "none", "count", REDUCE_PERIOD, _expect_all_reduce),
    "all_gather": Coll(_op_all_gather, _ring_move, True, "count", "total", MOVE_PERIOD, _expect_all_gather),
    "reduce_scatter": Coll(_op_reduce_scatter, _ring_move, True, "total", "count", REDUCE_PERIOD,
                           _expect_reduce_scatter),
    "alltoall": Coll(_op_alltoall, _ring_move, True, "total", "total", MOVE_PERIOD, _expect_alltoall),
    "broadcast": Coll(_op_broadcast, _one, False, "none", "count", MOVE_PERIOD, _expect_broadcast),
    "sendrecv": Coll(_op_sendrecv, _one, False, "count", "count", MOVE_PERIOD, _expect_sendrecv, min_ranks=2),
}
OPS: dict[Collective, OpFn] = {c: rec.op for c, rec in COLLS.items()}


def busbw_factor(collective: Collective, n: int) -> float:
    """nccl-tests' bus bandwidth factor for `n` ranks."""
    return COLLS[collective].bus_factor(n)


def bandwidths(collective: Collective, size_bytes: int, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one operation of `size_bytes` taking `seconds` on `n` ranks."""
    algbw = size_bytes / seconds / GB
    return algbw, algbw * busbw_factor(collective, n)


@dataclass(frozen=True)
class Layout:
    """Buffers of one operation as nccl-tests sizes them."""

    count: int  # nccl-tests' "count" column: elements per rank (per peer for alltoall)
    send: int  # elements in the send buffer (0: in place in the receive buffer)
    recv: int
    size: int  # bytes, nccl-tests' "size" column (the total for gather/scatter/alltoall)


def layout(collective: Collective, size_bytes: int, n: int, elem_size: int) -> Layout | None:
    """The buffers for a nominal message size, rounded down like nccl-tests; None when it rounds to nothing."""
    rec = COLLS[collective]
    count = size_bytes // elem_size // (n if rec.split else 1)
    total = count * n if rec.split else count
    elements = {"none": 0, "count": count, "total": total}
    lay = Layout(count, elements[rec.send], elements[rec.recv], total * elem_size)
    return lay if lay.count > 0 else None


def period(collective: Collective) -> int:
    return COLLS[collective].period


def expected_chunk(torch_mod: Any, collective: Collective, grank: int, n: int, count: int,
                   root: int, index: torch.Tensor) -> torch.Tensor:
    """Expected output elements at positions `index` of group rank `grank`'s receive buffer."""
    if collective not in COLLS:
        raise ValueError(f"unknown collective {collective}")
    rec = COLLS[collective]
    return rec.expect(torch_mod, grank, n, count, root, index, rec.period)


def tolerance(dtype_name: str, n: int) -> float:
    """Relative error allowed: none in float32 (integer sums are exact); n roundings in 16-bit types."""
    eps = {"float32": 0.0, "bfloat16": 2.0**-8, "float16": 2.0**-11}[dtype_name]
    return eps * max(n - 1, 0)


def fill(torch_mod: Any, buf: torch.Tensor, grank: int, p: int = REDUCE_PERIOD) -> None:
    for start in range(0, buf.numel(), CHUNK_ELEMENTS):
        end = min(start + CHUNK_ELEMENTS, buf.numel())
        idx = torch_mod.arange(start, end, device=buf.device, dtype=torch_mod.int64)
        buf[start:end] = fill_value(torch_mod, grank, idx, p).to(buf.dtype)


def count_wrong(torch_mod: Any, collective: Collective, out: torch.Tensor, grank: int, n: int, count: int,
                root: int, rel_tol: float) -> int:
    wrong = 0
    for start in range(0, out.numel(), CHUNK_ELEMENTS):
        end = min(start + CHUNK_ELEMENTS, out.numel())
        idx = torch_mod.arange(start, end, device=out.device, dtype=torch_mod.int64)
        want = expected_chunk(torch_mod, collective, grank, n, count, root, idx).to(torch_mod.float64)
        got = out[start:end].to(torch_mod.float64)
        ok = (got - want).abs() <= want.abs() * rel_tol  # NaN compares False: counted wrong
        wrong += int((~ok).sum().item())
    return wrong


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
    return rules.result("nccl", f"{sweep.collective}_correctness", float(wrong), None, message=msg,
                        node=sweep.node if sweep.scope == "node" else None)


def busbw_result(name: str, sweep: NcclSweep, threshold: float | None, reference_bytes: int,
                 max_bytes: int) -> CheckResult:
    """Best busbw at or above the reference size, judged against the threshold (missing fails)."""
    best = best_busbw(sweep.rows, reference_bytes)
    node = sweep.node if sweep.scope == "node" else None
    if best is None:
        msg = (f"no message size >= {format_bytes(reference_bytes)} in the sweep (maxBytes "
               f"{format_bytes(max_bytes)}): raise maxBytes or lower thresholds.referenceBytes")
        return rules.judged("nccl", name, None, threshold, message=msg, node=node)
    out = rules.judged("nccl", name, best.busbw_gbps, threshold, node=node, observed=f"{format_bytes(best.size)}")
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
    out.results = [rules.mark_estimate(r, estimated) for r in out.results]
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
        threshold = rules.threshold("nccl", f"{collective}_busbw", th)
        sweep = by_key.get((collective, None))
        if sweep is None:
            if threshold is not None:
                why = skipped.get((collective, None), "not measured")
                out.results.append(rules.judged(
                    "nccl", f"{collective}_busbw", None, threshold,
                    message=f"{collective} was not measured ({why}); its threshold cannot pass"))
            continue
        out.results.append(busbw_result(f"{collective}_busbw", sweep, threshold, reference, max_bytes))
    if "all_reduce" in check.collectives and not check.per_node and len(nodes) > 1:
        # perNode off asks for no sweep inside each node: its floor is not judged (nothing is missing), said once.
        out.skipped.append(Skip(check="nccl", name="all_reduce on each node",
                                reason="checks.nccl.perNode is false: no node's sweep was asked for"))
    elif "all_reduce" in check.collectives:
        node_threshold = rules.threshold("nccl", "node_all_reduce_busbw", th)
        for node in nodes:
            sweep = by_key.get(("all_reduce", node))
            if sweep is None and len(nodes) == 1:
                job = by_key.get(("all_reduce", None))
                sweep = job.model_copy(update={"scope": "node", "node": node}) if job else None
            if sweep is None:
                if node_threshold is not None:
                    why = skipped.get(("all_reduce", node), "not measured")
                    out.results.append(rules.judged(
                        "nccl", "node_all_reduce_busbw", None, node_threshold, node=node,
                        message=f"all_reduce inside node {node} was not measured ({why})"))
                continue
            out.results.append(busbw_result("node_all_reduce_busbw", sweep, node_threshold, reference, max_bytes))
    return out


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
