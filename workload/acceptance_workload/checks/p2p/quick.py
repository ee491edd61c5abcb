"""checks.p2p under `local --quick`: smaller copies, fewer of them (the ratios hold at any size)."""

from __future__ import annotations

from acceptance_workload.checks.p2p.spec import P2pCheck
from acceptance_workload.contract.wire import parse_bytes

QUICK_BYTES, QUICK_ITERS, QUICK_LATENCY_ITERS = 64 << 20, 3, 20


def quick(p2p: P2pCheck) -> P2pCheck:
    return p2p.model_copy(update={"bytes": min(parse_bytes(p2p.bytes), QUICK_BYTES),
                                  "iters": min(p2p.iters, QUICK_ITERS), "warmup_iters": min(p2p.warmup_iters, 1),
                                  "latency_iters": min(p2p.latency_iters, QUICK_LATENCY_ITERS)})
