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
from typing import TYPE_CHECKING, Any

from acceptance_workload import latency
from acceptance_workload.checks import COLLECTIVES, Collective, NcclCheck, NcclThresholds
from acceptance_workload.report import CheckResult, NcclRow, NcclSweep, Skip, with_estimate
from acceptance_workload.wire import format_bytes, parse_bytes

if TYPE_CHECKING:
    import torch

    from acceptance_workload.control import Watchdog
    from acceptance_workload.launch import Group, Session

GB = 1e9
CHUNK_ELEMENTS = 1 << 24  # correctness check in slices, so it needs little memory beside the buffers
UNSUPPORTED_MARKERS = ("not supported", "unsupported", "not implemented", "no support", "does not support")


def busbw_factor(collective: Collective, n: int) -> float:
    """nccl-tests' bus bandwidth factor for `n` ranks."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


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
    if collective in ("all_reduce", "broadcast"):
        count = size_bytes // elem_size
        lay = Layout(count, 0, count, count * elem_size)
    elif collective == "sendrecv":
        count = size_bytes // elem_size
        lay = Layout(count, count, count, count * elem_size)
    else:
        count = size_bytes // elem_size // n
        total = count * n
        send = {"all_gather": count, "reduce_scatter": total, "alltoall": total}[collective]
        recv = {"all_gather": total, "reduce_scatter": count, "alltoall": total}[collective]
        lay = Layout(count, send, recv, total * elem_size)
    return lay if lay.count > 0 else None


# ----------------------------------------------------------------------------- fill values and expectations
# Rank r's element j holds f(r, j) = (r + j) % P + 1: small integers, exact in every dtype.
# P = 4 for the reductions, so sums over many ranks stay small and exact; P = 251 for the
# collectives that only move data, so every rank's block differs (up to 251 ranks) and a
# misplaced or dropped block shows up (with P = 4, ranks r and r + 4 would hold the same data).
REDUCE_PERIOD = 4
MOVE_PERIOD = 251  # the largest prime whose values are all exact integers in bfloat16


def period(collective: Collective) -> int:
    return REDUCE_PERIOD if collective in ("all_reduce", "reduce_scatter") else MOVE_PERIOD


def fill_value(torch_mod: Any, rank: Any, index: torch.Tensor, p: int = REDUCE_PERIOD) -> torch.Tensor:
    return (index + rank).remainder_(p).add_(1)


def sum_over_ranks(torch_mod: Any, n: int, index: torch.Tensor) -> torch.Tensor:
    """sum_{r<n} f(r, j) without looping over n: every 4 ranks add 1+2+3+4."""
    q, m = divmod(n, 4)
    total = torch_mod.full_like(index, 10 * q)
    for t in range(m):
        total += (index + t).remainder_(4).add_(1)
    return total


def expected_chunk(torch_mod: Any, collective: Collective, grank: int, n: int, count: int,
                   root: int, index: torch.Tensor) -> torch.Tensor:
    """Expected output elements at positions `index` of group rank `grank`'s receive buffer."""
    if collective == "all_reduce":
        return sum_over_ranks(torch_mod, n, index)
    if collective == "reduce_scatter":
        return sum_over_ranks(torch_mod, n, index + grank * count)
    p = period(collective)
    if collective == "all_gather":
        return fill_value(torch_mod, index // count, index % count, p)
    if collective == "alltoall":
        return fill_value(torch_mod, index // count, index % count + grank * count, p)
    if collective == "broadcast":
        return fill_value(torch_mod, root, index, p)
    if collective == "sendrecv":
        return fill_value(torch_mod, (grank - 1) % n, index, p)
    raise ValueError(f"unknown collective {collective}")


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


OPS: dict[Collective, OpFn] = {
    "all_reduce": _op_all_reduce,
    "all_gather": _op_all_gather,
    "reduce_scatter": _op_reduce_scatter,
    "alltoall": _op_alltoall,
    "broadcast": _op_broadcast,
    "sendrecv": _op_sendrecv,
}


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
    import torch.distributed as dist

    dtype = getattr(torch, check.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    n = group.size
    op = ops[collective]
    out = Measured()
    where = "job" if group.scope == "job" else "node"
    if collective == "sendrecv" and n < 2:
        out.skipped = "sendrecv needs at least 2 ranks"
        return out
    plan = [(size, lay) for size in check.sizes() if (lay := layout(collective, size, n, elem)) is not None]
    if not plan:
        out.skipped = f"no size up to {format_bytes(parse_bytes(check.max_bytes))} holds one element per rank"
        # Still take part in the probe's exchange: a node with fewer GPUs may have sizes to measure and wait in it.
        watchdog.control.allgather(f"probe {where} {collective}", out.skipped)
        return out
    largest = max(plan, key=lambda p: p[1].recv)[1]
    send_all = torch.empty(max(lay.send for _, lay in plan), dtype=dtype, device=device)
    recv_all = torch.empty(largest.recv, dtype=dtype, device=device)
    rel_tol = tolerance(check.dtype, n)

    def buffers(lay: Layout) -> tuple[Any, Any]:
        return (send_all[: lay.send] if lay.send else None), recv_all[: lay.recv]

    with watchdog.step(f"nccl {where} {collective} probe"):
        s, r = buffers(plan[0][1])
        fill(torch, s if s is not None else r, group.rank, period(collective))
        try:
            op(s, r, group)
            _sync(torch, device)
        except (RuntimeError, NotImplementedError, ValueError) as e:
            # NCCL runs all six: "Operation not supported" from it is a fault (RDMA registration, driver), not a gap.
            reason = None if dist.get_backend(group.pg) == "nccl" else unsupported_reason(e)
            if reason is None:
                raise
            out.skipped = f"{reason}"
    # Every rank must agree on skipping, or some would wait in a collective the others never enter.
    verdicts = watchdog.control.allgather(f"probe {where} {collective}", out.skipped)
    reasons = [v for v in verdicts if v]
    if reasons:
        out.skipped = reasons[0]
        return out

    for _, lay in plan:
        label = f"nccl {where} {collective} {format_bytes(lay.size)}"
        with watchdog.step(label):
            s, r = buffers(lay)
            fill(torch, s if s is not None else r, group.rank, period(collective))
            seconds = _time_op(torch, lambda s=s, r=r: op(s, r, group), check, group, device,
                               check.uses_cuda_graph(lay.size))
            # One more operation on freshly filled buffers, then every element is checked.
            fill(torch, s if s is not None else r, group.rank, period(collective))
            if s is not None:
                r.fill_(float("nan"))
            op(s, r, group)
            _sync(torch, device)
            wrong = count_wrong(torch, collective, r, group.rank, n, lay.count, 0, rel_tol)
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
    return CheckResult(check="nccl", name=f"{sweep.collective}_correctness", value=wrong, unit="elements",
                       threshold=0, comparison="le", passed=wrong == 0, message=msg,
                       node=sweep.node if sweep.scope == "node" else None)


def busbw_result(name: str, sweep: NcclSweep, threshold: float | None, reference_bytes: int,
                 max_bytes: int) -> CheckResult:
    """Best busbw at or above the reference size, judged against the threshold (missing fails)."""
    best = best_busbw(sweep.rows, reference_bytes)
    node = sweep.node if sweep.scope == "node" else None
    comparison = "info" if threshold is None else "ge"
    if best is None:
        msg = (f"no message size >= {format_bytes(reference_bytes)} in the sweep (maxBytes "
               f"{format_bytes(max_bytes)}): raise maxBytes or lower thresholds.referenceBytes")
        return CheckResult(check="nccl", name=name, value=None, unit="GB/s", threshold=threshold,
                           comparison=comparison, passed=False, message=msg, node=node)
    passed = threshold is None or best.busbw_gbps >= threshold
    where = f"node {sweep.node}" if node else f"{sweep.ranks} ranks"
    msg = f"{best.busbw_gbps:.1f} GB/s busbw at {format_bytes(best.size)} ({where})"
    if threshold is not None:
        msg += f"; needs >= {threshold:g}" if not passed else f" >= {threshold:g}"
    return CheckResult(check="nccl", name=name, value=best.busbw_gbps, unit="GB/s", threshold=threshold,
                       comparison=comparison, passed=passed, message=msg, node=node,
                       observed=f"{format_bytes(best.size)}")


@dataclass
class NcclOutcome:
    sweeps: list[NcclSweep] = field(default_factory=list)
    results: list[CheckResult] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)


def threshold_key(result_name: str) -> str:
    """The wire name of the threshold a busbw or latency result is judged by ("nccl.allReduceBusbwGBps")."""
    if result_name in latency.THRESHOLD_KEYS:
        return latency.THRESHOLD_KEYS[result_name]
    attr = "node_all_reduce_busbw_gbps" if result_name == "node_all_reduce_busbw" else f"{result_name}_gbps"
    field = NcclThresholds.model_fields.get(attr)
    return f"nccl.{field.alias or attr}" if field else f"nccl.{result_name}"


def judge_sweeps(check: NcclCheck, sweeps: list[NcclSweep], skipped: dict[tuple[str, str | None], str],
                 nodes: list[str], backend: str, estimated: Collection[str] = ()) -> NcclOutcome:
    """Every result, each marked where the threshold it was judged by is the profile's estimate."""
    out = _judge_sweeps(check, sweeps, skipped, nodes, backend)
    out.results += latency.latency_results(check, sweeps, nodes, skipped)
    out.results = [with_estimate(r, threshold_key(r.name), estimated) for r in out.results]
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
        threshold = th.busbw_threshold(collective)
        sweep = by_key.get((collective, None))
        if sweep is None:
            if threshold is not None:
                why = skipped.get((collective, None), "not measured")
                out.results.append(CheckResult(
                    check="nccl", name=f"{collective}_busbw", value=None, unit="GB/s", threshold=threshold,
                    passed=False, message=f"{collective} was not measured ({why}); its threshold cannot pass"))
            continue
        out.results.append(busbw_result(f"{collective}_busbw", sweep, threshold, reference, max_bytes))
    if "all_reduce" in check.collectives and not check.per_node and len(nodes) > 1:
        # perNode off asks for no sweep inside each node: its floor is not judged (nothing is missing), said once.
        out.skipped.append(Skip(check="nccl", name="all_reduce on each node",
                                reason="checks.nccl.perNode is false: no node's sweep was asked for"))
    elif "all_reduce" in check.collectives:
        node_threshold = th.node_all_reduce_busbw_gbps
        for node in nodes:
            sweep = by_key.get(("all_reduce", node))
            if sweep is None and len(nodes) == 1:
                job = by_key.get(("all_reduce", None))
                sweep = job.model_copy(update={"scope": "node", "node": node}) if job else None
            if sweep is None:
                if node_threshold is not None:
                    why = skipped.get(("all_reduce", node), "not measured")
                    out.results.append(CheckResult(
                        check="nccl", name="node_all_reduce_busbw", value=None, unit="GB/s",
                        threshold=node_threshold, passed=False, node=node,
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
