"""sweep_collective on a one-rank gloo group, in this process: probe errors and edge cases."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from acceptance_workload.checks.nccl.nccl import OPS, sweep_collective
from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.runtime.launch import Group


class _Control:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def allgather(self, name: str, value: Any) -> list[Any]:
        self.calls.append(name)
        return [value]


class _Watchdog:
    def __init__(self) -> None:
        self.control = _Control()

    @contextlib.contextmanager
    def step(self, label: str, timeout: float | None = None) -> Iterator[None]:
        yield


@pytest.fixture
def one_rank_group() -> Iterator[Group]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield Group(scope="job", ranks=[0], rank=0, pg=None)
    finally:
        dist.destroy_process_group()


def _raising(message: str) -> dict:
    def op(send: Any, recv: Any, group: Group) -> None:
        raise RuntimeError(message)

    return {**OPS, "alltoall": op}


CHECK = NcclCheck.model_validate({"minBytes": 8, "maxBytes": 64, "warmupIters": 0, "iters": 1})


def test_a_backend_that_cannot_run_a_collective_skips_it(one_rank_group: Group) -> None:
    out = sweep_collective("alltoall", CHECK, one_rank_group, torch.device("cpu"), _Watchdog(),
                           ops=_raising("ProcessGroupGloo does not support alltoall"))
    assert out.skipped and out.sizes == []


def test_operation_not_supported_from_nccl_is_a_fault_not_a_skip(one_rank_group: Group,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    with pytest.raises(RuntimeError, match="Operation not supported"):
        sweep_collective("alltoall", CHECK, one_rank_group, torch.device("cpu"), _Watchdog(),
                         ops=_raising("NCCL error: unhandled system error, Last error: ibv_reg_mr: "
                                      "Operation not supported"))


def test_a_rank_with_no_size_to_measure_still_joins_the_probe_exchange(one_rank_group: Group) -> None:
    """Per-node groups differ in size: a node where no size holds one element per rank must not skip the
    exchange the other nodes wait in (every rank makes the same control calls, in the same order)."""
    wd = _Watchdog()
    check = NcclCheck.model_validate({"minBytes": 1, "maxBytes": 2, "warmupIters": 0, "iters": 1})
    out = sweep_collective("all_gather", check, one_rank_group, torch.device("cpu"), wd)
    assert out.skipped and wd.control.calls == ["probe job all_gather"]
