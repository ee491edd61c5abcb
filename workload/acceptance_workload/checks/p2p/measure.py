"""The copies between a node's GPUs: every ordered pair one way, every pair both ways at once, a small copy's latency.

On GPUs, one process of the node (its local rank 0, which sees every GPU of the node) copies between them with the
copy engines, as nvbandwidth's memcpy_ce tests and p2pBandwidthLatencyTest do: each direction on streams of its own,
so both directions of a pair run at once. On a CPU smoke run there is no copy engine: the node's processes take turns
in pairs and send the same sizes to each other over gloo, so the stage, the matrix and its judging run in CI.

Each measurement is an entry {src, dst, <figure>: value} (or "error"); entries of one pair from several processes are
merged on rank 0 (stage.py). torch is imported inside functions only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.p2p.spec import P2pCheck
from acceptance_workload.contract.wire import parse_bytes
from acceptance_workload.runtime.stages import first_line

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.watchdog import Watchdog

SMALL = 4  # bytes of the latency's copy
Entry = dict[str, Any]


def timed(op: Callable[[], Any], sync: Callable[[], Any], iters: int, warmup: int) -> float:
    """Seconds per `op`, over `iters` runs after `warmup` untimed ones, the device(s) idle before and after."""
    for _ in range(warmup):
        op()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        op()
    sync()
    return (time.perf_counter() - t0) / iters


def gbps(nbytes: int, seconds: float) -> float:
    return round(nbytes / seconds / 1e9, 3) if seconds > 0 else 0.0


def gpu_pairs(check: P2pCheck, devices: list[int], watchdog: Watchdog) -> list[Entry]:
    """Every ordered pair of the node's GPUs, measured here: `devices[k]` is the CUDA device of the node's GPU k
    (cuda:0 .. cuda:n-1 where this process sees the node's GPUs, as a pod's and `local`'s ranks do)."""
    import torch

    size, gpus = parse_bytes(check.bytes), len(devices)
    entries: list[Entry] = []
    try:
        src = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{d}") for d in devices]
        dst = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{d}") for d in devices]
        small = [torch.zeros(SMALL, dtype=torch.uint8, device=f"cuda:{d}") for d in devices]
        streams = [(torch.cuda.Stream(device=d), torch.cuda.Stream(device=d)) for d in devices]
    except Exception as e:  # a GPU this process cannot use: every pair fails, saying why
        why = f"the node's GPUs could not all be used by one process: {first_line(e)}"
        return [{"src": i, "dst": j, "error": why} for i in range(gpus) for j in range(gpus) if i != j]

    def copy(i: int, j: int, lane: int, a: Any, b: Any) -> None:
        with torch.cuda.stream(streams[i][lane]), torch.cuda.stream(streams[j][lane]):
            b.copy_(a, non_blocking=True)

    for i in range(gpus):
        for j in range(gpus):
            if i == j:
                continue
            def sync(i: int = i, j: int = j) -> None:
                torch.cuda.synchronize(devices[i])
                torch.cuda.synchronize(devices[j])
            with watchdog.step(f"p2p GPU {i} -> GPU {j}"):
                entries.append(_measure_pair(i, j, check, size, sync, {
                    "copy_gbps": lambda i=i, j=j: copy(i, j, 0, src[i], dst[j]),
                    "latency_us": lambda i=i, j=j: copy(i, j, 0, small[i], small[j]),
                    "bidir_gbps": None if i > j else lambda i=i, j=j: (copy(i, j, 0, src[i], dst[j]),
                                                                        copy(j, i, 1, src[j], dst[i]))}))
    for buffers in (src, dst, small):
        buffers.clear()
    torch.cuda.empty_cache()
    return entries


def _measure_pair(i: int, j: int, check: P2pCheck, size: int, sync: Callable[[], None],
                  ops: dict[str, Callable[[], Any] | None]) -> Entry:
    """One pair's figures; an error is the pair's (it fails, named), not the run's."""
    entry: Entry = {"src": i, "dst": j}
    try:
        for name, op in ops.items():
            if op is None:
                continue
            if name == "latency_us":
                entry[name] = round(timed(op, sync, check.latency_iters, max(1, check.warmup_iters)) * 1e6, 3)
            else:
                per = timed(op, sync, check.iters, check.warmup_iters)
                entry[name] = gbps(size * (2 if name == "bidir_gbps" else 1), per)
    except Exception as e:
        entry["error"] = first_line(e)
    return entry


def cpu_pairs(session: Session, check: P2pCheck, watchdog: Watchdog, node_ranks: dict[str, list[int]]) -> list[Entry]:
    """A CPU smoke run: each node's processes in turns of one ordered pair (every node's pairs side by side), each
    pair sending the copy's size over gloo; the receiver times the one-way copy, the sender the latency (half a
    round trip) and both directions at once (with the first of the pair's two turns)."""
    import torch

    size = parse_bytes(check.bytes)
    local = {r: k for ranks in node_ranks.values() for k, r in enumerate(ranks)}
    mine = next(ranks for ranks in node_ranks.values() if session.rank in ranks)
    turns = [(a, b) for a in mine for b in mine if a != b]
    entries: list[Entry] = []
    big, small = torch.zeros(size, dtype=torch.uint8), torch.zeros(SMALL, dtype=torch.uint8)
    for turn in range(max(len(r) * (len(r) - 1) for r in node_ranks.values())):
        session.control.allgather(f"p2p turn {turn}", None)
        if turn >= len(turns) or session.rank not in turns[turn]:
            continue
        a, b = turns[turn]
        with watchdog.step(f"p2p process {local[a]} -> process {local[b]}"):
            entries += _gloo_pair(session.rank, a, b, local, check, big, small)
    return entries


def _gloo_pair(me: int, a: int, b: int, local: dict[int, int], check: P2pCheck, big: Any, small: Any) -> list[Entry]:
    import torch.distributed as dist

    peer, src, dst = (b if me == a else a), local[a], local[b]
    out: list[Entry] = []
    try:
        if me == b:  # the receiver times the one-way copy
            per = timed(lambda: dist.recv(big, src=a), lambda: None, check.iters, check.warmup_iters)
            out.append({"src": src, "dst": dst, "copy_gbps": gbps(big.numel(), per)})
        else:
            for _ in range(check.warmup_iters + check.iters):
                dist.send(big, dst=b)
        if me == a:  # the sender times a round trip of the small copy
            def ping() -> None:
                dist.send(small, dst=b)
                dist.recv(small, src=b)
            out.append({"src": src, "dst": dst, "latency_us": round(
                timed(ping, lambda: None, check.latency_iters, 1) / 2 * 1e6, 3)})
        else:
            for _ in range(check.latency_iters + 1):
                dist.recv(small, src=a)
                dist.send(small, dst=a)
        if src < dst:  # both ways at once, with the pair's first turn
            other = big.clone()

            def both() -> None:
                for w in (dist.isend(big, dst=peer), dist.irecv(other, src=peer)):
                    w.wait()
            per = timed(both, lambda: None, check.iters, check.warmup_iters)
            if me == a:
                out += [{"src": src, "dst": dst, "bidir_gbps": gbps(2 * big.numel(), per)},
                        {"src": dst, "dst": src, "bidir_gbps": gbps(2 * big.numel(), per)}]
    except Exception as e:
        out.append({"src": src, "dst": dst, "error": first_line(e)})
    return out
