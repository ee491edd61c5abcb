"""checks.nccl.crossCheck: nccl-tests' output read, its binary run, and our busbw judged against its.

The binaries are stand-ins placed by the test (outside the product, like fault injection): executables that
print real nccl-tests output captured on 2x H200 (docs/benchmarks-data), as they are or with the busbw changed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_workload.checks.nccl import nccltests
from acceptance_workload.checks.nccl.spec import NcclCheck
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import ChecksSpec
from acceptance_workload.local import cpu_smoke_checks
from acceptance_workload.report.model import NcclRow, NcclSweep

from tests.workload.multiproc import REPO

DATA = REPO / "docs" / "benchmarks-data" / "h200x2-2026-11-26"
ALL_REDUCE = (DATA / "nccltests_all_reduce_perf.run1.txt").read_text()
GIB = 1 << 30


def check(**spec) -> NcclCheck:
    """The sweep of a profile run (referenceBytes 1Gi, up to 4Gi by x2)."""
    return NcclCheck.model_validate({"crossCheck": True, "thresholds": {"referenceBytes": "1Gi"}, **spec})


def scaled(text: str, factor: float) -> str:
    """nccl-tests' output with every out-of-place busbw (column 8) times `factor`."""
    lines = []
    for line in text.splitlines():
        cols = line.split()
        if not line.startswith("#") and len(cols) >= 13 and cols[0].isdigit():
            cols[7] = f"{float(cols[7]) * factor:.2f}"
            line = "  ".join(cols)
        lines.append(line)
    return "\n".join(lines) + "\n"


def fake_binary(folder: Path, name: str, output: str, code: int = 0) -> Path:
    """An executable `name` that records its arguments and environment and prints `output`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.out").write_text(output)
    path = folder / name
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" > '{folder}/{name}.args'\n"
                    f"echo \"NCCL_DEBUG=${{NCCL_DEBUG:-}} NCCL_IB_HCA=${{NCCL_IB_HCA:-}}\" > '{folder}/{name}.env'\n"
                    f"if [ \"$1\" = -h ]; then echo 'USAGE: {name}'; exit 0; fi\n"
                    f"cat '{folder}/{name}.out'\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def ours_from(text: str, factor: float = 1.0, collective: str = "all_reduce") -> NcclSweep:
    """Our job-wide sweep with nccl-tests' rows, busbw times `factor`."""
    rows = [NcclRow(size=r.size, count=r.count, time_us=r.time_us, algbw_gbps=r.algbw_gbps,
                    busbw_gbps=round(r.busbw_gbps * factor, 2), wrong=0)
            for r in nccltests.parse(text).rows.values()]
    return NcclSweep(collective=collective, scope="job", ranks=2, dtype="float32", rows=rows)


# ----------------------------------------------------------------------------- reading real output


def test_reads_the_out_of_place_columns_and_the_summary_of_real_output() -> None:
    out = nccltests.parse(ALL_REDUCE)
    assert (out.collective, out.version, len(out.rows)) == ("all_reduce", "2.19.0", 13)
    four = out.rows[4 * GIB]
    assert (four.count, four.time_us, four.algbw_gbps, four.busbw_gbps, four.wrong) == (
        1073741824, 12352.8, 347.69, 347.69, 0)  # out-of-place; in-place (344.34) is ignored
    assert out.avg_busbw_gbps == 235.115 and out.out_of_bounds == 0 and out.wrong() == 0


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"])
def test_reads_every_collectives_real_output(collective: str) -> None:
    out = nccltests.parse((DATA / f"nccltests_{collective}_perf.run1.txt").read_text())
    assert out.collective == collective and len(out.rows) == 13 and out.avg_busbw_gbps and out.wrong() == 0
    assert min(out.rows) == 1 << 20 and max(out.rows) == 4 * GIB
    # alltoall: algbw 71.00, busbw 35.50 at 1 MiB on two GPUs ((n-1)/n): the busbw column, not algbw
    if collective == "alltoall":
        assert (out.rows[1 << 20].algbw_gbps, out.rows[1 << 20].busbw_gbps) == (71.00, 35.50)


def test_nccl_log_lines_and_a_version_without_the_root_column_do_not_confuse_it() -> None:
    noisy = ALL_REDUCE.replace(
        "     1048576 ", "gpu-box:1303:1303 [0] NCCL INFO Channel 00/24 :    0   1\n"
        "1303:1303 [1] NCCL INFO comm 0x5612 rank 1 nranks 2 - Init COMPLETE\n     1048576 ", 1)
    assert nccltests.parse(noisy).busbw() == nccltests.parse(ALL_REDUCE).busbw()
    old = ("   268435456      67108864     float     sum    745.1  360.27  360.27      0"
           "    744.9  360.37  360.37      0\n")
    assert nccltests.parse(old).busbw() == {268435456: 360.27}


def test_wrong_elements_and_out_of_bounds_values_are_counted() -> None:
    bad = ALL_REDUCE.replace("347.69       0", "347.69       3").replace("Out of bounds values : 0 OK",
                                                                          "Out of bounds values : 1 FAILED")
    assert nccltests.parse(bad).wrong() == 4


# ----------------------------------------------------------------------------- running a binary


def test_runs_the_binary_over_the_nodes_gpus_at_the_compared_sizes(tmp_path: Path) -> None:
    fake_binary(tmp_path, "all_reduce_perf", ALL_REDUCE)
    env = {**os.environ, nccltests.DIR_ENV: str(tmp_path), "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0"}
    run = nccltests.run_one("all_reduce", check(), 8, 60, env)
    assert run.error is None and run.rows[4 * GIB] == 347.69
    assert (tmp_path / "all_reduce_perf.args").read_text().split() == [
        "-g", "8", "-b", str(GIB), "-e", str(4 * GIB), "-f", "2", "-n", "30", "-w", "5", "-c", "1", "-d", "float"]
    # NCCL's settings reach it, NCCL's log (ours goes to a file we parse) does not
    assert (tmp_path / "all_reduce_perf.env").read_text().split() == ["NCCL_DEBUG=", "NCCL_IB_HCA=mlx5_0"]


def test_a_binary_that_fails_or_stops_early_is_an_error(tmp_path: Path) -> None:
    env = {**os.environ, nccltests.DIR_ENV: str(tmp_path)}
    fake_binary(tmp_path, "all_reduce_perf", "# nccl-tests version 2.19.0\nTest NCCL failure common.cu:1279\n", 3)
    assert "exit code 3" in nccltests.run_one("all_reduce", check(), 2, 60, env).error
    truncated = ALL_REDUCE[:ALL_REDUCE.index("  2147483648")]  # killed mid-table: no summary line
    fake_binary(tmp_path, "all_reduce_perf", truncated)
    run = nccltests.run_one("all_reduce", check(), 2, 60, env)
    assert "did not conclude" in run.error and run.rows[GIB] == 328.31


def test_the_directory_variable_is_the_only_place_looked_in_when_set(tmp_path: Path) -> None:
    on_path = tmp_path / "on-path"
    fake_binary(on_path, "all_reduce_perf", ALL_REDUCE)
    env = {**os.environ, "PATH": f"{on_path}:{os.environ['PATH']}"}
    assert nccltests.find_binary("all_reduce", env) == on_path / "all_reduce_perf"  # unset: /opt/..., then PATH
    with pytest.raises(nccltests.MissingBinary, match=rf"all_reduce_perf not found in {tmp_path}/empty "
                                                       rf"\({nccltests.DIR_ENV}\)"):
        nccltests.find_binary("all_reduce", {**env, nccltests.DIR_ENV: str(tmp_path / "empty")})


# ----------------------------------------------------------------------------- the judgement


def judged(tmp_path: Path, printed: str, ours: NcclSweep | None, **spec) -> object:
    env = {**os.environ, nccltests.DIR_ENV: str(tmp_path)}
    c = check(**spec)
    runs = {"node-a": {"all_reduce": nccltests.run_one("all_reduce", c, 2, 60, env).to_json()}}
    [result] = nccltests.judge(c.model_copy(update={"collectives": ["all_reduce"]}), [ours] if ours else [], runs,
                               ["node-a"])
    return result


def test_within_the_tolerance_passes_with_both_numbers_and_the_ratio(tmp_path: Path) -> None:
    fake_binary(tmp_path, "all_reduce_perf", ALL_REDUCE)
    r = judged(tmp_path, ALL_REDUCE, ours_from(ALL_REDUCE, 1.03))
    assert r.passed and (r.name, r.node, r.threshold, r.comparison) == ("all_reduce_cross_check", "node-a", 0.1, "le")
    assert r.value == pytest.approx(0.03, abs=1e-3)
    assert r.observed == "ours 358.12 GB/s at 4Gi, nccl-tests 347.69 GB/s at 4Gi, ratio 1.030"


def test_nccl_tests_thirty_percent_lower_fails(tmp_path: Path) -> None:
    fake_binary(tmp_path, "all_reduce_perf", scaled(ALL_REDUCE, 0.7))
    r = judged(tmp_path, ALL_REDUCE, ours_from(ALL_REDUCE))
    assert not r.passed and r.value == pytest.approx(1 / 0.7 - 1, abs=1e-3)
    assert "nccl-tests 243.38 GB/s at 4Gi, ratio 1.429" in r.observed and "42.9% apart" in r.message
    assert "more than 10%" in r.message


def test_ours_lower_fails_too_and_the_spec_sets_the_tolerance(tmp_path: Path) -> None:
    fake_binary(tmp_path, "all_reduce_perf", ALL_REDUCE)
    assert not judged(tmp_path, ALL_REDUCE, ours_from(ALL_REDUCE, 0.85)).passed
    loose = judged(tmp_path, ALL_REDUCE, ours_from(ALL_REDUCE, 0.85), thresholds={"referenceBytes": "1Gi",
                                                                                   "crossCheckTolerance": 0.2})
    assert loose.passed and loose.threshold == 0.2


def test_a_missing_binary_fails_closed(tmp_path: Path) -> None:
    r = judged(tmp_path, ALL_REDUCE, ours_from(ALL_REDUCE))
    assert not r.passed and r.value is None and "all_reduce_perf not found" in r.message


def test_wrong_elements_from_nccl_tests_fail(tmp_path: Path) -> None:
    fake_binary(tmp_path, "all_reduce_perf", ALL_REDUCE.replace("347.69       0", "347.69       3"))
    r = judged(tmp_path, ALL_REDUCE, ours_from(ALL_REDUCE))
    assert not r.passed and "3 wrong elements" in r.message


def test_our_sweep_missing_or_too_small_fails(tmp_path: Path) -> None:
    fake_binary(tmp_path, "all_reduce_perf", ALL_REDUCE)
    assert "our sweep over this node's GPUs is missing" in judged(tmp_path, ALL_REDUCE, None).message
    small = check(maxBytes="512Mi")
    assert small.cross_check_sizes() == []
    assert "raise maxBytes" in nccltests.run_one("all_reduce", small, 2, 60, os.environ).error


def test_with_several_nodes_each_node_is_compared_with_its_own_sweep() -> None:
    run = nccltests.Run(command="x", rows={GIB: 100.0}).to_json()
    mine = [NcclSweep(collective="all_reduce", scope="node", node=n, ranks=2, dtype="float32",
                      rows=[NcclRow(size=GIB, count=1, time_us=1, algbw_gbps=1, busbw_gbps=bw, wrong=0)])
            for n, bw in (("a", 101), ("b", 50))]
    job = ours_from(ALL_REDUCE)  # the job-wide sweep crosses nodes: never compared with one node's nccl-tests
    results = nccltests.judge(check(collectives=["all_reduce"]), [job, *mine], {"a": {"all_reduce": run},
                                                                                 "b": {"all_reduce": run}}, ["a", "b"])
    assert [(r.node, r.passed) for r in results] == [("a", True), ("b", False)]
    off = nccltests.judge(check(collectives=["all_reduce"], perNode=False), [job], {"a": {"all_reduce": run}},
                          ["a", "b"])
    assert all(not r.passed for r in off) and "perNode is off" in off[0].message
    assert "nccl-tests was not run" in off[1].message


def test_the_bench_comparison_reads_nccl_tests_with_the_workloads_reader() -> None:
    text = (REPO / "bench" / "compare_nccl_tests.py").read_text()
    assert "from acceptance_workload.checks.nccl.nccltests import parse" in text and "re.compile" not in text


# ----------------------------------------------------------------------------- the mode end to end on CPU


def test_a_cpu_smoke_run_compares_at_its_largest_size() -> None:
    smoke = cpu_smoke_checks(ChecksSpec.model_validate({"nccl": {"crossCheck": True}}))
    assert smoke.nccl.cross_check and smoke.nccl.cross_check_sizes() == [1 << 20]
    assert cpu_smoke_checks(ChecksSpec()).nccl.thresholds.reference_bytes is None


def test_local_takes_the_mode_from_the_flag_or_the_example() -> None:
    import argparse

    from acceptance_operator.manifest_file import manifest_spec
    from acceptance_workload.local import build_config, read_manifest

    def args(**kw) -> argparse.Namespace:
        return argparse.Namespace(**{"cpu": False, "json": None, "file": None, "profile": "h100-sxm", "gpus": None,
                                     "quick": False, "simulate_nodes": None, "nccl_tests": None, **kw})

    assert not build_config(args(), 4).checks.nccl.cross_check
    assert build_config(args(nccl_tests="build"), 4).checks.nccl.cross_check
    path = str(REPO / "examples" / "cross-check.yaml")  # read as `gpu-acceptance local -f` reads it
    example = build_config(args(file=path, quick=True), 4, manifest=read_manifest(path, manifest_spec)).checks
    assert example.nccl.cross_check and not example.gpu.enabled and not example.ddp.enabled
    assert example.nccl.cross_check_sizes() == [GIB]  # --quick: its sweep stops at the 1 GiB reference size
    assert example.nccl.thresholds.cross_check_limit() == 0.1


def local(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    manifest = tmp_path / "t.yaml"
    manifest.write_text("apiVersion: gpu-acceptance.io/v1alpha1\nkind: AcceptanceTest\nmetadata: {name: t}\n"
                        "spec:\n  checks:\n    preflight: {enabled: false}\n"
                        "    gpu: {enabled: false}\n    p2p: {enabled: false}\n    ddp: {enabled: false}\n"
                        "    nccl: {collectives: [all_reduce]}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", nccltests.DIR_ENV))}
    return subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "local", "--cpu", "-f", str(manifest),
                           "--json", "r.json", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)


@pytest.mark.timeout(300)
def test_local_with_nccl_tests_puts_their_busbw_beside_ours_and_fails_closed_without_them(tmp_path: Path) -> None:
    """gloo on CPU reaches a few GB/s at 1 MiB, the H200s' nccl-tests 45.88: the run fails naming the node."""
    bins = tmp_path / "bins"
    fake_binary(bins, "all_reduce_perf", ALL_REDUCE)
    proc = local(tmp_path, "--nccl-tests", str(bins))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    [r] = [r for r in report.results if r.name == "all_reduce_cross_check"]
    assert not r.passed and r.node in report.failed_nodes and r.threshold == 0.1
    assert re.search(r"ours [\d.]+ GB/s at 1Mi, nccl-tests 45.88 GB/s at 1Mi, ratio [\d.]+$", r.observed)
    assert (bins / "all_reduce_perf.args").read_text().split()[:8] == ["-g", "2", "-b", "1048576", "-e", "1048576",
                                                                       "-f", "4"]
    assert "nccl cross-check: 0/1 within 10% of nccl-tests" in proc.stderr

    (bins / "all_reduce_perf").unlink()  # the binary absent: fails closed
    proc = local(tmp_path, "--nccl-tests", str(bins))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    [r] = [r for r in report.results if r.name == "all_reduce_cross_check"]
    assert not r.passed and r.value is None and "all_reduce_perf not found" in r.message

    proc = local(tmp_path, "--nccl-tests", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "--nccl-tests" in proc.stderr and "no such directory" in proc.stderr


def test_the_install_check_reports_absent_and_present_binaries(tmp_path: Path) -> None:
    def check_install(folder: Path) -> str:
        env = {**os.environ, nccltests.DIR_ENV: str(folder)}
        return subprocess.run([sys.executable, "-m", "acceptance_workload", "--check-install", "--nccl-tests"],
                              env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path).stdout

    absent = check_install(tmp_path / "empty")
    assert re.search(r"^MISSING\s+nccl-tests all_reduce_perf\s+.*not found", absent, flags=re.M), absent
    for c in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"):
        fake_binary(tmp_path / "bins", f"{c}_perf", "")
    present = check_install(tmp_path / "bins")
    assert len(re.findall(r"^ok\s+nccl-tests \w+_perf\s+\S+_perf$", present, flags=re.M)) == 6, present
    (tmp_path / "bins" / "sendrecv_perf").write_text("#!/bin/sh\necho 'error while loading shared libraries' >&2\n"
                                                     "exit 127\n")
    broken = check_install(tmp_path / "bins")
    assert re.search(r"^MISSING\s+nccl-tests sendrecv_perf\s+.*exit code 127", broken, flags=re.M), broken


def test_an_image_built_without_nccl_tests_says_why_in_the_install_check(tmp_path: Path) -> None:
    """A workload image built with no nccl-tests source tree has only bin/SKIPPED (Dockerfile.workload's
    nccl-tests-skip stage) with the build's reason: the install check and the cross-check's error say that reason,
    not a bare "not found"."""
    dockerfile = (REPO / "Dockerfile.workload").read_text()
    (reason,) = re.findall(r'^ARG NCCL_TESTS_SKIPPED="([^"]+)"$', dockerfile, flags=re.M)
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / nccltests.SKIPPED_FILE).write_text(reason + "\n")  # as the stage's `echo` writes it
    env = {**os.environ, nccltests.DIR_ENV: str(folder)}
    done = subprocess.run([sys.executable, "-m", "acceptance_workload", "--check-install", "--nccl-tests"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0, done.stdout
    missing = re.findall(r"^MISSING\s+nccl-tests (\w+_perf)\s+(.*)$", done.stdout, flags=re.M)
    assert len(missing) == 6, done.stdout
    for name, why in missing:
        assert why.endswith(f"nccl-tests' {name} is not in this image: {reason}"), done.stdout
    with pytest.raises(nccltests.MissingBinary, match=re.escape(f"is not in this image: {reason}")):
        nccltests.find_binary("all_reduce", env)
