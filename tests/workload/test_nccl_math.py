"""Bandwidth arithmetic, buffer layout and judgement of the sweep, against nccl-tests' definitions."""

from __future__ import annotations

import pytest
from acceptance_workload.checks.nccl.nccl import (
    Layout,
    Measured,
    bandwidths,
    busbw_factor,
    judge_sweeps,
    layout,
    rows_from_ranks,
    tolerance,
)
from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.report.model import ONE_RANK_BUSBW, NcclRow, NcclSweep

GiB = 1 << 30


@pytest.mark.parametrize(("collective", "n", "factor"), [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_reduce", 16, 1.875), ("all_reduce", 1, 0.0),
    ("all_gather", 8, 0.875), ("reduce_scatter", 8, 0.875), ("alltoall", 8, 0.875), ("alltoall", 4, 0.75),
    ("broadcast", 8, 1.0), ("sendrecv", 8, 1.0),
])
def test_busbw_factors_are_nccl_tests(collective, n, factor) -> None:
    assert busbw_factor(collective, n) == pytest.approx(factor)


def test_bandwidths_hand_computed() -> None:
    # all_reduce of 1 GiB on 8 ranks in 5 ms: algbw = 1073741824 B / 0.005 s / 1e9 = 214.748 GB/s, x 14/8
    algbw, busbw = bandwidths("all_reduce", GiB, 0.005, 8)
    assert algbw == pytest.approx(214.7483648)
    assert busbw == pytest.approx(375.8096384)
    # all_gather: the size is the TOTAL gathered buffer; 256 MiB in 1 ms on 4 ranks
    algbw, busbw = bandwidths("all_gather", 256 << 20, 0.001, 4)
    assert algbw == pytest.approx(268.435456) and busbw == pytest.approx(201.326592)
    # sendrecv: busbw = algbw
    assert bandwidths("sendrecv", 10**9, 0.1, 2) == pytest.approx((10.0, 10.0))


def test_layout_rounds_like_nccl_tests() -> None:
    # 8 ranks, float32, 1 MiB: all_gather count = 1 MiB / 4 / 8 per rank, size stays the total
    assert layout("all_gather", 1 << 20, 8, 4) == Layout(count=32768, send=32768, recv=262144, size=1 << 20)
    assert layout("reduce_scatter", 1 << 20, 8, 4) == Layout(count=32768, send=262144, recv=32768, size=1 << 20)
    assert layout("alltoall", 1 << 20, 8, 4) == Layout(count=32768, send=262144, recv=262144, size=1 << 20)
    assert layout("all_reduce", 1 << 20, 8, 4) == Layout(count=262144, send=0, recv=262144, size=1 << 20)
    assert layout("broadcast", 12, 8, 4) == Layout(count=3, send=0, recv=3, size=12)
    assert layout("sendrecv", 12, 8, 2) == Layout(count=6, send=6, recv=6, size=12)
    # 100 B on 8 ranks of float32: 25 elements -> 3 per rank -> 96 B measured (rounded down)
    assert layout("all_gather", 100, 8, 4) == Layout(count=3, send=3, recv=24, size=96)
    # too small to give every rank one element: no row
    assert layout("all_gather", 8, 8, 4) is None
    assert layout("all_reduce", 2, 8, 4) is None


def test_rows_average_time_over_ranks_and_sum_wrong_elements() -> None:
    ranks = [Measured(sizes=[GiB], counts=[GiB // 4], seconds=[0.004], wrong=[0]),
             Measured(sizes=[GiB], counts=[GiB // 4], seconds=[0.006], wrong=[3])]
    [row] = rows_from_ranks("all_reduce", ranks)
    assert row.time_us == pytest.approx(5000.0)  # mean of 4 ms and 6 ms (nccl-tests -a 1)
    assert row.algbw_gbps == pytest.approx(214.748, abs=1e-3)
    assert row.busbw_gbps == pytest.approx(214.748, abs=1e-3)  # n = 2: factor 1
    assert row.wrong == 3 and row.size == GiB and row.count == GiB // 4


def test_tolerance_is_exact_for_float32_and_grows_with_ranks_for_16_bit() -> None:
    assert tolerance("float32", 1024) == 0
    assert tolerance("bfloat16", 1) == 0
    assert tolerance("bfloat16", 9) == pytest.approx(8 * 2**-8)
    assert tolerance("float16", 9) < tolerance("bfloat16", 9)


def _sweep(collective: str, rows: list[tuple[int, float]], scope: str = "job", node: str | None = None,
           wrong: int = 0) -> NcclSweep:
    return NcclSweep(collective=collective, scope=scope, node=node, ranks=8, dtype="float32",
                     rows=[NcclRow(size=s, count=s // 4, time_us=1.0, algbw_gbps=b, busbw_gbps=b, wrong=wrong)
                           for s, b in rows])


def _check(**thresholds) -> NcclCheck:
    return NcclCheck.model_validate({"collectives": ["all_reduce", "all_gather"], "maxBytes": "4Gi",
                                     "thresholds": {"referenceBytes": "1Gi", **thresholds}})


def _by_name(outcome) -> dict:
    return {(r.name, r.node): r for r in outcome.results}


def test_threshold_is_judged_on_the_best_busbw_at_or_above_the_reference_size() -> None:
    sweeps = [_sweep("all_reduce", [(512 << 20, 999.0), (GiB, 350.0), (2 * GiB, 362.0)]),
              _sweep("all_gather", [(GiB, 300.0)])]
    out = judge_sweeps(_check(allReduceBusbwGBps=360, allGatherBusbwGBps=310), sweeps, {}, ["n1"], "nccl")
    r = _by_name(out)
    # 999 GB/s at 512 MiB is below the reference size and must not count
    assert r[("all_reduce_busbw", None)].value == 362.0 and r[("all_reduce_busbw", None)].passed
    assert r[("all_reduce_busbw", None)].threshold == 360
    assert r[("all_gather_busbw", None)].value == 300.0 and not r[("all_gather_busbw", None)].passed
    assert "needs >= 310" in r[("all_gather_busbw", None)].message


def test_a_threshold_without_a_measurement_fails() -> None:
    # the sweep stopped below the reference size: nothing to judge, so it fails (fail closed)
    sweeps = [_sweep("all_reduce", [(256 << 20, 400.0)]), _sweep("all_gather", [(GiB, 400.0)])]
    check = NcclCheck.model_validate({"collectives": ["all_reduce", "all_gather"], "maxBytes": "256Mi",
                                      "thresholds": {"referenceBytes": "1Gi", "allReduceBusbwGBps": 100}})
    r = _by_name(judge_sweeps(check, sweeps, {}, ["n1"], "nccl"))
    missing = r[("all_reduce_busbw", None)]
    assert missing.value is None and not missing.passed
    assert "no message size >= 1Gi" in missing.message and "maxBytes" in missing.message
    # a collective that was not measured at all, with a threshold, fails too
    r = _by_name(judge_sweeps(_check(allGatherBusbwGBps=1), [sweeps[0]], {("all_gather", None): "boom"}, ["n1"],
                              "gloo"))
    assert not r[("all_gather_busbw", None)].passed and "boom" in r[("all_gather_busbw", None)].message


def test_without_thresholds_results_are_informative_but_still_need_a_value() -> None:
    out = judge_sweeps(_check(), [_sweep("all_reduce", [(GiB, 10.0)]), _sweep("all_gather", [(8, 1.0)])], {},
                       ["n1"], "gloo")
    r = _by_name(out)
    assert r[("all_reduce_busbw", None)].comparison == "info" and r[("all_reduce_busbw", None)].passed
    assert not r[("all_gather_busbw", None)].passed  # no size >= 1 GiB: still a missing measurement


def test_wrong_elements_fail_the_correctness_result_and_name_the_node() -> None:
    sweeps = [_sweep("all_reduce", [(GiB, 400.0)]),
              _sweep("all_reduce", [(GiB, 400.0)], scope="node", node="gpu-7", wrong=2)]
    r = _by_name(judge_sweeps(_check(), sweeps, {}, ["gpu-7"], "nccl"))
    assert r[("all_reduce_correctness", None)].passed
    bad = r[("all_reduce_correctness", "gpu-7")]
    assert not bad.passed and bad.value == 2 and bad.node == "gpu-7"


def test_node_threshold_uses_each_nodes_sweep_and_names_the_slow_node() -> None:
    sweeps = [_sweep("all_reduce", [(GiB, 380.0)]), _sweep("all_gather", [(GiB, 380.0)]),
              _sweep("all_reduce", [(GiB, 370.0)], scope="node", node="a"),
              _sweep("all_reduce", [(GiB, 200.0)], scope="node", node="b")]
    out = judge_sweeps(_check(nodeAllReduceBusbwGBps=340), sweeps, {}, ["a", "b"], "nccl")
    r = _by_name(out)
    assert r[("node_all_reduce_busbw", "a")].passed
    slow = r[("node_all_reduce_busbw", "b")]
    assert not slow.passed and slow.value == 200.0
    # a single node: the job sweep is that node's sweep
    single = _by_name(judge_sweeps(_check(nodeAllReduceBusbwGBps=340), sweeps[:2], {}, ["only"], "nccl"))
    assert single[("node_all_reduce_busbw", "only")].value == 380.0


def test_per_node_off_judges_no_node_floor_and_says_so() -> None:
    sweeps = [_sweep("all_reduce", [(GiB, 380.0)]), _sweep("all_gather", [(GiB, 380.0)])]
    check = _check(nodeAllReduceBusbwGBps=340).model_copy(update={"per_node": False})
    out = judge_sweeps(check, sweeps, {}, ["a", "b"], "nccl")
    assert not [r for r in out.results if r.name == "node_all_reduce_busbw"]
    assert [s.name for s in out.skipped] == ["all_reduce on each node"]
    assert all(r.passed for r in out.results)
    # with perNode on, the same sweeps lack each node's: a failure per node (fail closed)
    on = _by_name(judge_sweeps(_check(nodeAllReduceBusbwGBps=340), sweeps, {}, ["a", "b"], "nccl"))
    assert not on[("node_all_reduce_busbw", "a")].passed and not on[("node_all_reduce_busbw", "b")].passed


def test_a_result_judged_by_an_estimated_floor_says_so() -> None:
    sweeps = [_sweep("all_reduce", [(GiB, 350.0)]), _sweep("all_gather", [(GiB, 300.0)])]
    out = judge_sweeps(_check(allReduceBusbwGBps=340, allGatherBusbwGBps=290), sweeps, {}, ["n1"], "nccl",
                       estimated={"nccl.allReduceBusbwGBps"})
    r = _by_name(out)
    assert r[("all_reduce_busbw", None)].estimated and r[("all_reduce_busbw", None)].message.endswith(
        "[estimated threshold]")
    assert r[("all_gather_busbw", None)].estimated is None  # its floor is not an estimate
    assert r[("all_reduce_correctness", None)].estimated is None  # correctness is never estimated


def test_one_rank_has_no_busbw_a_skip_saying_why_and_a_floor_set_anyway_fails() -> None:
    """One rank moves no bytes: its busbw is a skip with the reason (sendrecv's way), never a 0.0 that looks
    measured; the sweep's correctness is still judged. A floor the spec sets anyway cannot pass."""
    one = [s.model_copy(update={"ranks": 1}) for s in (_sweep("all_reduce", [(GiB, 0.0)]),
                                                       _sweep("all_gather", [(GiB, 0.0)]))]
    out = judge_sweeps(_check(), one, {}, ["n1"], "nccl")
    assert {(r.name, r.node) for r in out.results} == {("all_reduce_correctness", None),
                                                       ("all_gather_correctness", None)}
    assert {(s.name, s.reason) for s in out.skipped} == {
        ("all_reduce_busbw", ONE_RANK_BUSBW), ("all_gather_busbw", ONE_RANK_BUSBW),
        ("node_all_reduce_busbw on node n1", ONE_RANK_BUSBW)}
    r = _by_name(judge_sweeps(_check(allReduceBusbwGBps=100), one, {}, ["n1"], "nccl"))
    floor = r[("all_reduce_busbw", None)]
    assert floor.value is None and not floor.passed and ONE_RANK_BUSBW in floor.message
