"""The correctness check's expected values, against a brute-force simulation of each collective."""

from __future__ import annotations

import pytest
import torch
from acceptance_workload.checks.nccl.nccl import count_wrong, expected_chunk, fill, period


def _inputs(n: int, elems: int, collective: str = "all_reduce") -> list:
    bufs = []
    for r in range(n):
        b = torch.empty(elems, dtype=torch.float32)
        fill(torch, b, r, period(collective))
        bufs.append(b)
    return bufs


def _simulate(collective: str, n: int, count: int) -> list:
    """What every rank's receive buffer must hold, computed the slow way from the filled inputs."""
    if collective in ("all_reduce", "broadcast", "sendrecv"):
        ins = _inputs(n, count, collective)
        if collective == "all_reduce":
            return [sum(ins)] * n
        if collective == "broadcast":
            return [ins[0]] * n
        return [ins[(r - 1) % n] for r in range(n)]
    if collective == "all_gather":
        ins = _inputs(n, count, collective)
        return [torch.cat(ins)] * n
    ins = _inputs(n, count * n, collective)
    if collective == "reduce_scatter":
        total = sum(ins)
        return [total[r * count:(r + 1) * count] for r in range(n)]
    if collective == "alltoall":
        return [torch.cat([ins[k][r * count:(r + 1) * count] for k in range(n)]) for r in range(n)]
    raise AssertionError(collective)


CASES = [(c, n) for c in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")
         for n in (1, 2, 3, 5, 8) if not (c == "sendrecv" and n == 1)]  # sendrecv needs 2 ranks (skipped then)


@pytest.mark.parametrize(("collective", "n"), CASES)
def test_expected_values_match_a_simulation(collective: str, n: int) -> None:
    count = 7
    for r, want in enumerate(_simulate(collective, n, count)):
        idx = torch.arange(want.numel())
        got = expected_chunk(torch, collective, r, n, count, 0, idx).to(torch.float32)
        assert torch.equal(got, want), (collective, n, r)
        assert count_wrong(torch, collective, want.clone(), r, n, count, 0, 0.0) == 0


def test_fill_differs_between_ranks_and_positions() -> None:
    a, b = _inputs(2, 8)
    assert not torch.equal(a, b)
    assert a.tolist() == [1, 2, 3, 4, 1, 2, 3, 4]


def test_count_wrong_counts_misplaced_and_nan_elements() -> None:
    out = _simulate("all_gather", 4, 5)[0].clone()
    out[3] += 1
    out[7] = float("nan")
    out[10], out[11] = out[11].item(), out[10].item()  # two elements swapped (3 and 4): both wrong
    assert count_wrong(torch, "all_gather", out, 0, 4, 5, 0, 0.0) == 4


def test_bfloat16_sums_beyond_exact_range_pass_within_tolerance() -> None:
    from acceptance_workload.checks.nccl.nccl import tolerance

    n = 100  # sums up to 250: beyond bf16's exact integers in places
    exact = _simulate("all_reduce", n, 16)[0]
    rounded = exact.to(torch.bfloat16)
    assert count_wrong(torch, "all_reduce", rounded, 0, n, 16, 0, tolerance("bfloat16", n)) == 0
    rounded[0] = rounded[0] * 2
    assert count_wrong(torch, "all_reduce", rounded, 0, n, 16, 0, tolerance("bfloat16", n)) == 1


def test_all_gather_on_eight_ranks_sees_blocks_of_ranks_four_apart_swapped() -> None:
    count = 8
    out = _simulate("all_gather", 8, count)[0].clone()
    out[0:count], out[4 * count:5 * count] = out[4 * count:5 * count].clone(), out[0:count].clone()
    assert count_wrong(torch, "all_gather", out, 0, 8, count, 0, 0.0) == 2 * count
