"""The control plane's exchanges over a real TCPStore: a long run's gathers must not grow the store.

A burn-in gathers every rank's latest minute every 30 s for hours; the store lives in the memory of the job's
rendezvous (rank 0's process, or torchrun's agent), so its key count must not grow with the duration.
"""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

import torch.distributed as dist
from acceptance_workload.runtime.control import Control

WORLD = 3
ROUNDS = 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_gathers_leave_no_keys_behind_and_still_deliver_every_rank_in_order() -> None:
    port = _free_port()
    server = dist.TCPStore("127.0.0.1", port, None, True, timedelta(seconds=30))
    clients = [dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=30)) for _ in range(1, WORLD)]
    stores = [server, *clients]
    controls = [Control(dist.PrefixStore("gpu-acceptance", s), r, WORLD, timeout=30) for r, s in enumerate(stores)]
    gathered: list[list[int] | None] = []
    before = server.num_keys()

    def rank(r: int) -> None:
        for k in range(ROUNDS):
            out = controls[r].gather(f"soak window {k} done", r * 1000 + k)
            if r == 0:
                gathered.append(out)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(1, WORLD)]
    for t in threads:
        t.start()
    rank(0)
    for t in threads:
        t.join(timeout=30)
    assert gathered == [[r * 1000 + k for r in range(WORLD)] for k in range(ROUNDS)]
    # Every round read: nothing of the 200 rounds (600 keys) is left in the store.
    assert server.num_keys() == before


def test_broadcast_and_allgather_still_reach_every_rank() -> None:
    port = _free_port()
    server = dist.TCPStore("127.0.0.1", port, None, True, timedelta(seconds=30))
    client = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=30))
    controls = [Control(s, r, 2, timeout=30) for r, s in enumerate([server, client])]
    seen: dict[int, list[str]] = {}
    t = threading.Thread(target=lambda: seen.__setitem__(1, controls[1].allgather("rank-info", "b")))
    t.start()
    seen[0] = controls[0].allgather("rank-info", "a")
    t.join(timeout=30)
    assert seen == {0: ["a", "b"], 1: ["a", "b"]}
