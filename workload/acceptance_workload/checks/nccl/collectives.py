"""The collectives as nccl-tests defines them: one record per collective, and the arithmetic every sweep shares.

Definitions (nccl-tests' PERFORMANCE.md): GB = 1e9 bytes; algbw = size / time;
busbw = algbw x factor, factor 2(n-1)/n for all_reduce, (n-1)/n for
all_gather, reduce_scatter and alltoall (size = the total buffer), 1 for
broadcast and sendrecv. Each collective is one record in COLLS (its op, busbw
factor, buffer layout, fill period, expected output and minimum ranks), as
nccl-tests keeps one `struct testColl` per collective; its results are rows of
the check's RULES (rules.py). A new collective is one record here (plus its op and expectation)
and its name in checks.Collective. torch is imported only inside the ops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from acceptance_workload.contract.terms import Collective

if TYPE_CHECKING:
    import torch

    from acceptance_workload.runtime.launch import Group

GB = 1e9
CHUNK_ELEMENTS = 1 << 24  # correctness check in slices, so it needs little memory beside the buffers


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
    and its name in checks.Collective; its results are rows of the check's RULES (rules.py).
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
