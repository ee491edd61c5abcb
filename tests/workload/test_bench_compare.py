"""bench/compare_nccl_tests.py: reading nccl-tests' output and judging the 3% accuracy target."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from acceptance_workload.checks.report_model import Report
from acceptance_workload.report.model import NcclRow, NcclSweep

from tests.workload.multiproc import REPO

spec = importlib.util.spec_from_file_location("compare_nccl_tests", REPO / "bench" / "compare_nccl_tests.py")
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)

# The shape of all_reduce_perf's output (nccl-tests 2.13), two GPUs.
NCCL_TESTS = """\
# nThread 1 nGpus 2 minBytes 1048576 maxBytes 268435456 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1
#
# Using devices
#  Rank  0 Group  0 Pid  41 on gpu-box device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41 on gpu-box device  1 [0x2a] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    14.94   70.18   70.18      0    14.51   72.27   72.27      0
     4194304       1048576     float     sum      -1    29.87  140.42  140.42      0    29.11  144.09  144.09      0
    67108864      16777216     float     sum      -1    196.2  342.03  342.03      0    195.8  342.74  342.74      0
   268435456      67108864     float     sum      -1    745.1  360.27  360.27      0    744.9  360.37  360.37      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 228.22
"""


def ours(rows: dict[int, float]) -> dict:
    sweep = NcclSweep(collective="all_reduce", scope="job", ranks=2, dtype="float32", rows=[
        NcclRow(size=s, count=s // 4, time_us=1, algbw_gbps=b, busbw_gbps=b, wrong=0) for s, b in rows.items()])
    return {"meta": {}, "report": Report(nccl=[sweep]).to_wire()}


def test_parses_out_of_place_busbw() -> None:
    collective, rows = compare.parse_nccl_tests(NCCL_TESTS)
    assert rows == {1048576: 70.18, 4194304: 140.42, 67108864: 342.03, 268435456: 360.27}
    assert collective is None  # this capture lacks the "Collective test starting" line: --collective or file name


def test_within_three_percent_at_64_mib_and_above_passes(tmp_path: Path, capsys) -> None:
    (tmp_path / "all_reduce_perf.txt").write_text(NCCL_TESTS)
    # 1 MiB at 95% of nccl-tests (>= 90%); 64 MiB -2.0%, 256 MiB +1.0%; 4 MiB not judged
    (tmp_path / "ours.json").write_text(json.dumps(ours({1048576: 66.67, 4194304: 100.0, 67108864: 335.19,
                                                         268435456: 363.87})))
    code = compare.main([str(tmp_path / "all_reduce_perf.txt"), str(tmp_path / "ours.json")])
    out = capsys.readouterr().out
    assert code == 0 and "2/2 sizes >= 67108864 B within 3%" in out
    assert "-2.00  ok" in out and "ok (>= 90%)" in out


def test_more_than_three_percent_fails(tmp_path: Path, capsys) -> None:
    (tmp_path / "nt.txt").write_text(NCCL_TESTS)
    (tmp_path / "ours.json").write_text(json.dumps(ours({67108864: 320.0, 268435456: 360.0})))
    assert compare.main([str(tmp_path / "nt.txt"), str(tmp_path / "ours.json"), "--collective", "all_reduce"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_one_mib_under_ninety_percent_of_nccl_tests_fails(tmp_path: Path, capsys) -> None:
    (tmp_path / "nt.txt").write_text(NCCL_TESTS)
    (tmp_path / "ours.json").write_text(json.dumps(ours({1048576: 56.0, 67108864: 342.0})))
    assert compare.main([str(tmp_path / "nt.txt"), str(tmp_path / "ours.json"), "--collective", "all_reduce"]) == 1
    assert "FAIL (>= 90%)" in capsys.readouterr().out


def test_several_runs_are_compared_at_their_medians(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.txt").write_text(NCCL_TESTS)
    (tmp_path / "b.txt").write_text(NCCL_TESTS.replace("342.03", "300.00"))  # one slow nccl-tests run
    (tmp_path / "c.txt").write_text(NCCL_TESTS)
    for i, busbw in enumerate((341.0, 250.0, 343.0)):  # one disturbed run of ours
        (tmp_path / f"ours{i}.json").write_text(json.dumps(ours({67108864: busbw})))
    files = [str(tmp_path / n) for n in ("a.txt", "b.txt", "c.txt", "ours0.json", "ours1.json", "ours2.json")]
    assert compare.main([*files, "--collective", "all_reduce"]) == 0
    out = capsys.readouterr().out
    assert "median of 3 nccl-tests and 3 of our runs" in out and "342.03    341.00" in out


def test_nothing_judged_is_a_failure_not_a_pass(tmp_path: Path, capsys) -> None:
    """Sizes only under 64 MiB in common: no accuracy was shown, so the comparison fails closed."""
    (tmp_path / "nt.txt").write_text(NCCL_TESTS)
    (tmp_path / "ours.json").write_text(json.dumps(ours({4194304: 140.0})))
    assert compare.main([str(tmp_path / "nt.txt"), str(tmp_path / "ours.json"), "--collective", "all_reduce"]) == 1
    assert "nothing was judged" in capsys.readouterr().err
