"""Host contention (hostload.py): busy processes outside the run are named, and a timing failure on a saturated
host says so.

The load is injected from outside: `yes > /dev/null` processes started through a shell that exits at once, so
they belong to init (not to the test, not to the run), on every CPU. The rule's edges (quiet host, a host kept
busy by the run itself, steal) are judged on a /proc tree written here, since this machine's other users load
it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from acceptance_workload.checks import contention
from acceptance_workload.checks.preflight import hostload
from acceptance_workload.checks.report_model import Report
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import HostLoad, HostProcess, NodeFacts

CPUS = os.cpu_count() or 1


@pytest.fixture
def outside_load() -> Iterator[list[int]]:
    """2 busy loops per CPU, orphaned (their parent shell exits), so nothing of the test's or the run's is their
    ancestor, each in a session of its own (with the kernel's autogroup scheduling a session shares one CPU share,
    as a container shares its cgroup's); killed by pid afterwards."""
    count = 2 * CPUS
    loop = f"for i in $(seq {count}); do setsid yes > /dev/null 2>&1 < /dev/null & echo $!; done"
    out = subprocess.run(["sh", "-c", loop], capture_output=True, text=True, check=True, start_new_session=True)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == count
    time.sleep(1.0)  # the load average and the scheduler catch up
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_busy_loops_outside_the_run_saturate_the_host_and_are_named(outside_load: list[int]) -> None:
    load = hostload.measure(window=1.0, marker={})
    assert load.saturated, load
    assert load.busy >= hostload.BUSY_SHARE and load.outside >= hostload.OUTSIDE_SHARE
    ours = [p for p in load.busiest if p.pid in outside_load]
    assert ours, f"none of the injected pids {outside_load} among {load.busiest}"
    assert all(p.command == "yes" and p.cpus > 0 for p in ours)
    assert load.outside_processes >= len(ours)
    first = load.busiest[0]
    assert f"processes outside the run, e.g. pid {first.pid} `{first.command}`" in hostload.describe(load)


def test_the_runs_own_processes_are_not_outside(outside_load: list[int]) -> None:
    """The same busy loops, each carrying the run's marker in its environment: they are the run, never named."""
    # a marker that only these loops carry (their environment is inherited from a shell started with it)
    marker = {CONFIG_ENV: "test-run-marker"}
    env = {**os.environ, CONFIG_ENV: "test-run-marker"}
    out = subprocess.run(["sh", "-c", "for i in 1 2; do yes > /dev/null 2>&1 < /dev/null & echo $!; done"], env=env,
                         capture_output=True, text=True, check=True, start_new_session=True)
    marked = [int(p) for p in out.stdout.split()]
    try:
        time.sleep(0.5)
        load = hostload.measure(window=1.0, marker=marker)
    finally:
        for pid in marked:
            os.kill(pid, signal.SIGKILL)
    named = {p.pid for p in load.busiest}
    assert not named & set(marked)
    assert named & set(outside_load)


# ---------------------------------------------------------------- the rule on a /proc tree written here


class FakeProc:
    """/proc/stat (2 CPUs), /proc/loadavg and /proc/PID/{stat,environ}, with ticks the test advances."""

    def __init__(self, root: Path):
        self.root = root
        self.cpu = [[0] * 8, [0] * 8]  # user nice system idle iowait irq softirq steal
        self.procs: dict[int, list] = {}  # pid -> [comm, ppid, ticks, environ]
        self.write()

    def write(self) -> None:
        lines = ["cpu " + " ".join(str(sum(c[i] for c in self.cpu)) for i in range(8))]
        lines += [f"cpu{n} " + " ".join(map(str, c)) for n, c in enumerate(self.cpu)]
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "stat").write_text("\n".join(lines) + "\nintr 0\n")
        (self.root / "loadavg").write_text("3.50 2.00 1.00 4/200 999\n")
        for pid, (comm, ppid, ticks, environ) in self.procs.items():
            d = self.root / str(pid)
            d.mkdir(exist_ok=True)
            (d / "stat").write_text(f"{pid} ({comm}) R {ppid} 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0\n")
            (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in environ.items()) + b"\0")

    def advance(self, busy: list[int], idle: list[int], steal: list[int], used: dict[int, int]) -> None:
        for n in range(2):
            self.cpu[n][0] += busy[n]
            self.cpu[n][3] += idle[n]
            self.cpu[n][7] += steal[n]
        for pid, ticks in used.items():
            self.procs[pid][2] += ticks
        self.write()


def _load(tmp_path: Path, busy: list[int], idle: list[int], used: dict[int, int], steal: list[int] | None = None,
          ) -> HostLoad:
    fake = FakeProc(tmp_path / "proc")
    marker = {CONFIG_ENV: "cfg"}
    fake.procs = {1: ["init", 0, 0, {}], 10: ["torchrun", 1, 0, {CONFIG_ENV: "cfg"}],
                  11: ["pt_main_thread", 10, 0, {CONFIG_ENV: "cfg"}], 12: ["nccl-tests", 11, 0, {}],
                  20: ["stress", 1, 0, {}], 21: ["stress", 1, 0, {CONFIG_ENV: "another run"}]}
    fake.write()
    a = hostload.scan(fake.root)
    fake.advance(busy, idle, steal or [0, 0], used)
    b = hostload.scan(fake.root)
    b.at = a.at + 1.0
    tick = os.sysconf("SC_CLK_TCK")
    assert tick == 100  # the ticks below are per second at USER_HZ 100
    return hostload.load_between(a, b, hostload.Allowed(frozenset({0, 1})), "nccl", marker=marker, self_pid=11,
                                 proc=fake.root)


def test_a_quiet_host_is_not_saturated(tmp_path: Path) -> None:
    load = _load(tmp_path, busy=[10, 10], idle=[90, 90], used={11: 20})
    assert (load.busy, load.outside, load.saturated, load.busiest) == (0.1, 0.0, False, [])


def test_a_host_the_run_itself_keeps_busy_is_not_saturated(tmp_path: Path) -> None:
    """The rank (11), its launcher (10) and a child the rank started (12) are the run: busy, but not outside."""
    load = _load(tmp_path, busy=[100, 100], idle=[0, 0], used={10: 20, 11: 120, 12: 50, 20: 5})
    assert load.busy == 1.0 and load.outside == 0.05 and not load.saturated
    assert load.busiest == []  # 5% of a CPU is below BUSY_PROCESS_CPUS


def test_processes_outside_the_run_saturate_it_and_are_named_busiest_first(tmp_path: Path) -> None:
    """Another run's process (21: a different configuration) is outside this one too."""
    load = _load(tmp_path, busy=[100, 100], idle=[0, 0], used={11: 20, 20: 100, 21: 80})
    assert load.saturated and load.busy == 1.0 and load.outside == 0.9 and load.load1 == 3.5
    assert load.busiest == [HostProcess(pid=20, command="stress", cpus=1.0), HostProcess(pid=21, command="stress",
                                                                                        cpus=0.8)]
    assert load.outside_processes == 2
    assert hostload.describe(load).startswith("host CPUs 100% busy (90% outside the run; load 3.5 on ")
    assert "2 processes outside the run, e.g. pid 20 `stress` (1.0 CPU), pid 21 `stress` (0.8 CPU)" in \
        hostload.describe(load)


def test_steal_is_outside_the_run_without_a_process_to_name(tmp_path: Path) -> None:
    load = _load(tmp_path, busy=[40, 40], idle=[0, 0], steal=[60, 60], used={11: 80})
    assert load.saturated and load.steal == 0.6 and load.busiest == []
    assert "steal 60%" in hostload.describe(load) and "no process outside the run is visible" in \
        hostload.describe(load)


def test_only_the_containers_cpus_count(tmp_path: Path) -> None:
    """CPU 1 is fully busy with a neighbour, but the run may use CPU 0 only, which is idle: not saturated."""
    fake = FakeProc(tmp_path / "proc")
    a = hostload.scan(fake.root)
    fake.advance([0, 100], [100, 0], [0, 0], {})
    b = hostload.scan(fake.root)
    load = hostload.load_between(a, b, hostload.Allowed(frozenset({0}), quota=0.5), "preflight", marker={},
                                 self_pid=1, proc=fake.root)
    assert (load.busy, load.saturated, load.cpus) == (0.0, False, 0.5)


def test_allowed_cpus_read_the_cgroup_cpuset_and_quota(tmp_path: Path) -> None:
    cg = tmp_path / "sys" / "fs" / "cgroup"
    cg.mkdir(parents=True)
    (cg / "cpuset.cpus.effective").write_text("0-3,8\n")
    (cg / "cpu.max").write_text("250000 100000\n")
    allowed = hostload.allowed_cpus(tmp_path, tmp_path / "proc")
    assert allowed == hostload.Allowed(frozenset({0, 1, 2, 3, 8}), 2.5) and allowed.count == 2.5
    (cg / "cpu.max").write_text("max 100000\n")
    assert hostload.allowed_cpus(tmp_path, tmp_path / "proc").count == 5.0


# ---------------------------------------------------------------- the sentence on a failed timing result


def _saturated(stage: str = "preflight") -> HostLoad:
    return HostLoad(stage=stage, seconds=0.5, cpus=32, host_cpus=32, load1=64.0, busy=1.0, outside=0.97,
                    outside_processes=32, busiest=[HostProcess(pid=123, command="stress", cpus=1.0)], saturated=True)


def _failed(check: str, name: str, node: str | None, gpu: int | None = None) -> CheckResult:
    return CheckResult(check=check, name=name, value=419.0, threshold=100.0, comparison="le", passed=False,
                       message="all_reduce over node n1: 10-419 us", node=node, gpu=gpu)


def test_a_timing_failure_on_a_saturated_host_names_the_neighbour() -> None:
    report = Report(results=[_failed("nccl", "node_all_reduce_latency", "n1"), _failed("nccl", "all_reduce_latency",
                             None), _failed("preflight", "temperature", "n1", 0), _failed("ddp", "straggler_ratio",
                             "n2")],
                    nodes=[NodeFacts(node="n1", host_load=[_saturated()]),
                           NodeFacts(node="n2", host_load=[_saturated().model_copy(update={"saturated": False})])])
    assert contention.annotate(report) == 2
    node, job, temperature, straggler = report.results
    sentence = ("node n1 was saturated during preflight (look at the neighbour before the fabric): host CPUs 100% "
                "busy (97% outside the run; load 64.0 on 32 CPUs): 32 processes outside the run, e.g. pid 123 "
                "`stress` (1.0 CPU)")
    assert node.message == f"{sentence}; all_reduce over node n1: 10-419 us"
    assert job.message.startswith(sentence)  # job-wide: the saturated node is named
    assert temperature.message == straggler.message == "all_reduce over node n1: 10-419 us"  # not timing / not busy
    assert contention.annotate(report) == 0 and node.message.count("saturated") == 1  # idempotent


def test_the_stages_own_sample_is_used_where_there_is_one() -> None:
    """Quiet at preflight, saturated during ddp: a ddp failure says so; a gpu failure (no sample of its own, quiet
    preflight) does not."""
    quiet = _saturated().model_copy(update={"saturated": False, "busy": 0.2, "outside": 0.1})
    report = Report(results=[_failed("ddp", "throughput_per_gpu", "n1"), _failed("gpu", "gemm_tflops", "n1", 0)],
                    nodes=[NodeFacts(node="n1", host_load=[quiet, _saturated("ddp")])])
    assert contention.annotate(report) == 1
    assert "saturated during ddp" in report.results[0].message and "saturated" not in report.results[1].message


def test_which_results_are_timing_results() -> None:
    timed = {("nccl", "all_reduce_busbw"), ("nccl", "node_all_reduce_latency"), ("nccl", "inter_node_busbw"),
             ("ddp", "straggler_ratio"), ("ddp", "throughput_per_gpu"), ("gpu", "gemm_tflops_ratio_to_node_median"),
             ("storage", "storage_write_gbps"), ("fsdp", "scaling_efficiency"), ("nccl", "rank_progress")}
    untimed = {("preflight", "gpu_count"), ("nccl", "all_reduce_correctness"), ("preflight", "temperature"),
               ("storage", "checkpoint_match"), ("nccl", "rank_responding")}
    assert all(contention.timed(*t) for t in timed) and not any(contention.timed(*u) for u in untimed)


# ---------------------------------------------------------------- end to end: `gpu-acceptance local --cpu`


MANIFEST = """apiVersion: gpu-acceptance.io/v1alpha1
kind: AcceptanceTest
metadata: {name: busy-host}
spec:
  storage: {volume: {persistentVolumeClaim: {claimName: shared}}}
  checks:
    gpu: {enabled: false}
    p2p: {enabled: false}
    nccl: {enabled: false}
    ddp: {enabled: false}
    storage:
      enabled: true
      thresholds: {minWriteGBps: 90000}
"""


def test_a_local_run_on_a_saturated_host_fails_saying_so(tmp_path: Path, outside_load: list[int]) -> None:
    """A real rule failure (a write floor no disk meets) while every CPU is kept busy from outside: the failure
    carries the host-load sentence naming an injected `yes`; the preflight recorded the load (passed: context)."""
    (tmp_path / "t.yaml").write_text(MANIFEST)
    (tmp_path / "vol").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "OMPI_", "PMI_"))}
    proc = subprocess.run([sys.executable, "-m", "acceptance_operator.cli", "local", "--cpu", "-f", "t.yaml",
                           "--storage", "vol", "--json", "r.json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=400)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    node = report.environment.hostnames[0]
    recorded = [r for r in report.results if r.name == "host_cpu_outside"]
    assert [(r.node, r.passed, r.comparison, r.observed) for r in recorded] == [(node, True, "info", "saturated")]
    facts = report.nodes[0]
    assert facts.node == node and {h.stage for h in facts.host_load} >= {"preflight", "storage"}
    pre = next(h for h in facts.host_load if h.stage == "preflight")
    assert pre.saturated and {p.pid for p in pre.busiest} & set(outside_load)
    writes = [r for r in report.results if r.name == "storage_write_gbps"]
    assert writes and all(not r.passed for r in writes)
    for r in writes:
        assert f"node {node} was saturated during " in r.message and "`yes`" in r.message, r.message
        assert "look at the neighbour before the fabric" in r.message
    assert "was saturated during" in proc.stdout  # the verdict table shows the message
