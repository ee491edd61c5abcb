"""CPU/GPU binding (issue 21 item 3): the launcher pins each rank, the preflight judges where it really runs,
and the pod's cgroup limits against spec.resources. The fault is injected from outside: bench/repin.py re-pins a
live rank (found through /proc) after the launcher pinned it, as a stray taskset or node agent would."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_workload.checks.preflight import binding
from acceptance_workload.checks.preflight.spec import PreflightThresholds
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import PodLimits
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.runtime import pinning

REPO = Path(__file__).resolve().parents[2]
TWO_CPUS = len(os.sched_getaffinity(0)) >= 2


def _local(tmp_path: Path, *prefix: str) -> tuple[subprocess.CompletedProcess, Report]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "OMPI_", "PMI_"))}
    proc = subprocess.run([*prefix, sys.executable, "-m", "acceptance_operator.cli", "local", "--cpu", "--json",
                           "r.json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    return proc, Report.model_validate(json.loads((tmp_path / "r.json").read_text()))


def _named(report: Report, name: str) -> list[CheckResult]:
    return sorted((r for r in report.results if r.name == name), key=lambda r: (r.node or "", r.gpu or 0))


@pytest.mark.skipif(not TWO_CPUS, reason="needs 2 CPUs to give each rank its own")
def test_smoke_run_pins_each_rank_to_its_share_and_judges_binding_and_latency(cpu_smoke_run) -> None:
    """The default `local --cpu` run (conftest.py)."""
    proc = cpu_smoke_run.proc
    report = Report.model_validate(json.loads((cpu_smoke_run.dir / "r.json").read_text()))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    affinity = _named(report, "cpu_affinity")
    assert [(r.gpu, r.value, r.threshold, r.passed) for r in affinity] == [(0, 1.0, 1.0, True), (1, 1.0, 1.0, True)]
    assert affinity[0].observed != affinity[1].observed  # two ranks, two different CPUs
    assert "pinned to CPUs" in proc.stderr
    latency = _named(report, "all_reduce_latency") + _named(report, "node_all_reduce_latency")
    assert [(r.node is None, r.unit, r.comparison, r.threshold) for r in latency] == [
        (True, "us", "le", 200_000.0), (False, "us", "le", 200_000.0)]
    assert all(r.passed and r.value and r.value > 0 for r in latency)


@pytest.mark.skipif(not TWO_CPUS, reason="needs 2 CPUs to pin a rank to the wrong one")
def test_a_rank_re_pinned_from_outside_fails_naming_node_gpu_and_cpus(tmp_path: Path) -> None:
    share = sorted(os.sched_getaffinity(0))
    wrong = share[0]  # rank 1's share is the upper half: CPU `wrong` belongs to rank 0
    proc, report = _local(tmp_path, sys.executable, str(REPO / "bench" / "repin.py"), "--rank", "1",
                          "--cpus", str(wrong), "--")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "re-pinning" in proc.stderr  # the injector saw the launcher pin the rank first
    bad = [r for r in _named(report, "cpu_affinity") if not r.passed]
    assert [(r.gpu, r.value) for r in bad] == [(1, 0.0)]
    node = bad[0].node
    assert node and node in report.failed_nodes
    assert f"GPU 1 on node {node}: the rank ran on CPUs {wrong}" in bad[0].message
    assert bad[0].observed == f"CPUs {wrong}" and "outside local rank 1's share" in bad[0].message


def test_cpu_lists_and_nvml_masks() -> None:
    assert pinning.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert pinning.cpulist({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11" and pinning.cpulist(()) == "none"
    assert pinning.mask_cpus([0b1011, 1 << 63]) == {0, 1, 3, 127}


def test_even_share_gives_each_local_rank_its_own_slice() -> None:
    assert [pinning.even_share(range(64), r, 8) for r in (0, 7)] == [set(range(8)), set(range(56, 64))]
    assert [pinning.even_share([4, 5], r, 4) for r in range(4)] == [{4}, {5}, {4}, {5}]  # fewer CPUs: round robin
    assert pinning.even_share(range(10), 2, 3) == {6, 7, 8}


def test_affinity_on_a_remote_numa_node_fails_naming_it(tmp_path: Path) -> None:
    for node, cpus in (("node0", "0-31"), ("node1", "32-63")):
        (tmp_path / "sys/devices/system/node" / node).mkdir(parents=True)
        (tmp_path / "sys/devices/system/node" / node / "cpulist").write_text(cpus + "\n")
    th = PreflightThresholds(require_numa_local_cpus=True)
    where = pinning.Placement(frozenset(range(32, 64)), "GPU 5's NUMA-local CPUs (NUMA node 1)")
    ok = binding.affinity_result(th, where, "n1", 5, frozenset(range(40, 48)), tmp_path)
    assert ok.passed and ok.value == 1.0
    bad = binding.affinity_result(th, where, "n1", 5, frozenset({30, 31, 32, 33}), tmp_path)
    assert not bad.passed and bad.value == 0.5 and bad.node == "n1" and bad.gpu == 5
    assert "GPU 5 on node n1: the rank ran on CPUs 30-33, of which 30-31 (NUMA node 0) lie outside" in bad.message
    unknown = binding.affinity_result(th, pinning.Placement(None, "GPU 5", "NVML: boom"), "n1", 5, frozenset({1}))
    assert not unknown.passed and unknown.value is None and "NVML: boom" in unknown.message  # fail closed
    assert binding.affinity_result(PreflightThresholds(), where, "n1", 5, frozenset({1})).comparison == "info"


def _cgroup(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / "sys/fs/cgroup" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "sys/fs/cgroup" / rel).write_text(text + "\n")
    return root


def _limits(limits: PodLimits, root: Path) -> dict[str, object]:
    config = WorkloadConfig(mode="cpu-smoke", limits=limits)
    return {r.name: (r.value, r.threshold, r.passed) if isinstance(r, CheckResult) else "skipped"
            for r in binding.limit_results(config, "n1", root)}


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_pod_limits_are_read_from_the_cgroup_and_compared_with_the_spec(tmp_path: Path, version: str) -> None:
    page = resource.getpagesize()
    files = ({"cpu.max": "9000000 100000", "memory.max": str(10**9 // page * page)} if version == "v2" else
             {"cpu/cpu.cfs_quota_us": "9000000", "cpu/cpu.cfs_period_us": "100000",
              "memory/memory.limit_in_bytes": str(10**9 // page * page)})
    root = _cgroup(tmp_path, files)
    asked = PodLimits(cpu="90000m", memory="1G")
    assert _limits(asked, root) == {"cpu_limit": (90.0, 90.0, True),
                                    "memory_limit": (float(10**9 // page * page), float(10**9 // page * page), True)}
    wrong = _limits(PodLimits(cpu="64", memory="2G"), root)
    assert wrong["cpu_limit"][2] is False and wrong["memory_limit"][2] is False
    assert _limits(PodLimits(), root) == {"cpu_limit": (90.0, None, True), "memory_limit": (10**9 // page * page, None,
                                                                                             True)}


def test_unlimited_or_unreadable_limits_fail_where_the_spec_asked(tmp_path: Path) -> None:
    root = _cgroup(tmp_path / "a", {"cpu.max": "max 100000", "memory.max": "max"})
    assert _limits(PodLimits(cpu="8", memory="1Gi"), root) == {"cpu_limit": (None, 8.0, False),
                                                             "memory_limit": (None, float(1 << 30), False)}
    assert _limits(PodLimits(), root) == {"cpu_limit": "skipped", "memory_limit": "skipped"}
    nothing = tmp_path / "empty"
    assert _limits(PodLimits(cpu="8"), nothing)["cpu_limit"] == (None, 8.0, False)
    assert _limits(PodLimits(), nothing) == {"cpu_limit": "skipped", "memory_limit": "skipped"}
