"""Who the Blamer names, over a real c10d store (HashStore, in process): stopped, then failed, then lagging ranks."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist
from acceptance_workload.checks.report_model import Report
from acceptance_workload.runtime.bounded_store import BoundedStore
from acceptance_workload.runtime.control import (
    Blamer,
    Control,
    RankInfo,
    culprit_results,
)
from acceptance_workload.runtime.watchdog import Heartbeat

WATCH = 0.6  # the Blamer's watch window; heartbeats below beat every 0.1 s


def _world(n: int = 4) -> tuple[Control, Blamer, dict[int, Heartbeat]]:
    store = dist.HashStore()
    control = Control(store, 0, n, timeout=5)
    control.set_ranks([RankInfo(rank=r, node=f"node-{'ab'[r // 2]}", gpu=r % 2, host="h", pid=r) for r in range(n)])
    beats = {r: Heartbeat(store, r, interval=0.1).start() for r in range(1, n)}
    return control, Blamer(control, store, watch_seconds=WATCH), beats


def _stop_all(beats: dict[int, Heartbeat]) -> None:
    for b in beats.values():
        b.stop()


def test_a_rank_whose_heartbeat_stopped_is_blamed_before_any_error() -> None:
    control, blamer, beats = _world()
    try:
        beats[3].stop()
        time.sleep(0.3)
        control.store.set("error/2", "RuntimeError: Connection closed by peer")  # a consequence of rank 3
        control.store.add("errors", 1)
        culprits = blamer.blame()
        assert [(c.rank, c.kind) for c in culprits] == [(3, "stopped")]
        assert culprits[0].detail.startswith("last heartbeat ") and culprits[0].detail.endswith("s ago")
        results = culprit_results(control, "nccl", culprits)
        assert [(r.check, r.name, r.node, r.gpu, r.passed) for r in results] == [
            ("nccl", "rank_responding", "node-b", 1, False)]
        assert results[0].message.startswith("rank 3 on node node-b, GPU 1, stopped responding (last heartbeat")
        report = Report(checks_run=["nccl"], results=results, error="x").finalize()
        assert report.failed_nodes == ["node-b"]  # a culprit needs no special case to reach failedNodes
    finally:
        _stop_all(beats)


def test_with_every_rank_beating_an_error_is_blamed_but_a_timeout_of_waiting_is_not() -> None:
    control, blamer, beats = _world()
    try:
        control.store.set("error/1", "torch.OutOfMemoryError: CUDA out of memory")
        control.store.set("waited/2", "1")
        control.store.set("error/2", "rank 1 did not deliver 'x' within 5s")
        control.store.add("errors", 2)
        assert [(c.rank, c.kind, c.detail) for c in blamer.blame()] == [
            (1, "failed", "torch.OutOfMemoryError: CUDA out of memory")]
    finally:
        _stop_all(beats)


def test_alive_ranks_behind_the_others_are_blamed_and_none_when_all_are_level() -> None:
    control, blamer, beats = _world()
    try:
        for r in (0, 1, 3):
            control.store.add(f"progress/{r}", 5)
        control.store.add("progress/2", 4)
        control.store.set("step/2", "nccl job all_reduce 1Mi")
        assert [(c.rank, c.kind, c.detail) for c in blamer.blame()] == [
            (2, "behind", "still at 'nccl job all_reduce 1Mi'")]
        control.store.add("progress/2", 1)
        assert blamer.blame() == []  # every rank alive and level: the collective itself hung
        assert "the collective itself hung" in blamer.explain("x", 5).message
    finally:
        _stop_all(beats)


class _Silent:
    """What a client of a SIGSTOPped rank 0's store looks like: every call blocks, whatever its timeout."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def add(self, key: str, amount: int) -> int:
        self.release.wait(30)
        return 0

    def check(self, keys: list[str]) -> bool:
        self.release.wait(30)
        return False


def test_a_store_that_never_answers_times_out_instead_of_blocking() -> None:
    silent = _Silent()
    bounded = BoundedStore(silent, seconds=0.2)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="did not answer 'add' within 0s"):
        bounded.add("errors", 0)
    with pytest.raises(TimeoutError):  # the next call queues behind the stuck one: also unreachable
        bounded.check(["final"])
    assert time.monotonic() - t0 < 5
    silent.release.set()


def test_an_unreachable_store_blames_rank_0_which_hosts_it() -> None:
    silent = _Silent()
    control = Control(dist.HashStore(), 1, 2, timeout=5)
    control.set_ranks([RankInfo(rank=r, node=f"n{r}", gpu=0, host="h", pid=r) for r in range(2)])
    try:
        blame = Blamer(control, BoundedStore(silent, seconds=0.2)).explain("nccl job all_reduce 1Mi", 5)
    finally:
        silent.release.set()
    assert not blame.store_reachable and [(c.rank, c.kind) for c in blame.culprits] == [(0, "stopped")]
    assert "(hosted by rank 0 (node n0, GPU 0)) is unreachable" in blame.message
    assert [(r.node, r.gpu) for r in culprit_results(control, "ddp", blame.culprits)] == [("n0", 0)]


def test_bounded_store_passes_calls_and_errors_through() -> None:
    store = BoundedStore(dist.HashStore(), seconds=5)
    store.set("k", "v")
    assert store.get("k") == b"v" and store.check(["k"]) and store.add("n", 2) == 2
    with pytest.raises(Exception, match=r"(?i)timeout"):
        store.wait(["missing"], timedelta(seconds=0.1))


def test_a_rank_whose_process_ended_is_named_with_its_launchers_words_before_its_silence(tmp_path) -> None:
    """Its launcher or guard wrote its end (deaths.py): named at once, not after watching heartbeats; and the
    node's directory is passed into the store, where a rank 0 on another node reads it."""
    from acceptance_workload.runtime import deaths

    control, _, beats = _world()
    try:
        beats[3].stop()
        control.mark("ddp")  # rank 0's step; rank 3's own
        control.store.set("step/3", "ddp window 2")
        deaths.record(tmp_path, 3, "killed by SIGKILL (signal 9); pid 77")
        started = time.monotonic()
        culprits = Blamer(control, control.store, watch_seconds=WATCH, deaths_dir=str(tmp_path)).blame()
        assert time.monotonic() - started < WATCH  # no heartbeat watch needed
        assert [(c.rank, c.kind) for c in culprits] == [(3, "died")]
        results = culprit_results(control, "ddp", culprits)
        assert [(r.check, r.name, r.node, r.gpu) for r in results] == [("ddp", "rank_exited", "node-b", 1)]
        assert results[0].message == ("rank 3 on node node-b, GPU 1, died: killed by SIGKILL (signal 9); pid 77, "
                                      "at step 'ddp window 2'")
        elsewhere = Blamer(control, control.store, watch_seconds=WATCH, deaths_dir="")  # rank 0 on another node
        assert [(c.rank, c.kind) for c in elsewhere.died()] == [(3, "died")]
    finally:
        _stop_all(beats)
