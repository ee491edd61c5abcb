"""checks.signals end to end: real ranks (gloo on CPU, the workload's multi-process harness) watched from the
preflight's start to the last check's end, the faults injected from outside the workload.

NVML is the stand-in pynvml (tests/workload/fakenvml) first on the ranks' PYTHONPATH, replaying
tests/workload/fixtures/nvml_signals.json; this test, another process, raises XIDs and moves counters mid-run
through its FAKE_NVML_INJECT file when rank 0 says a stage began. The RDMA ports are a sysfs tree of the test's
(GPU_ACCEPTANCE_SYSFS_ROOT) whose counters this test changes mid-run. The operator's re-judging is asked about every
result and must agree.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from acceptance_workload.checks.registry import CHECK_NAMES
from acceptance_workload.checks.report_model import Report
from acceptance_workload.checks.signals import judge, xids
from acceptance_workload.checks.signals.spec import SignalsThresholds
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.local import cpu_smoke_checks

from tests.workload.multiproc import REPO, free_port, rank_env, start

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "nvml_signals.json"
FAKE = HERE / "fakenvml"
NODE = "node-a"
NCCL, DDP = "] nccl sweep", "] ddp "  # rank 0's lines as those stages begin
Action = Callable[[], None]


def config(tmp_path: Path, on: tuple[str, ...] = ("preflight", "nccl"), **ceilings: float) -> WorkloadConfig:
    """One node of two ranks: the checks in `on` and signals (the sweep and DDP made to last seconds, so what the
    test injects as one begins lands inside it), judged by `ceilings` (spec.checks.signals.thresholds)."""
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    for name in CHECK_NAMES:
        getattr(checks, name).enabled = name in on or name == "signals"
    checks.nccl.iters = 60
    checks.ddp.steps = 120
    checks.signals.thresholds = SignalsThresholds(**ceilings)
    return WorkloadConfig(mode="cpu-smoke", profile="custom", nodes=1, gpus_per_node=2, fabric="ethernet",
                          checks=checks, report_file=str(tmp_path / "report.json"))


def run(tmp_path: Path, cfg: WorkloadConfig, scenario: str | None = "healthy",
        when: dict[str, Action] | None = None, sysfs: Path | None = None) -> tuple[Report, str]:
    """Two ranks of `cfg`; each action of `when` runs once, when rank 0 prints its line. The report and rank 0's
    output (its text report, then its log)."""
    extra = {CONFIG_ENV: cfg.to_env(), "GPU_ACCEPTANCE_SYSFS_ROOT": str(sysfs or tmp_path / "no-sysfs")}
    if scenario is not None:
        extra.update(FAKE_NVML=f"{FIXTURE}:{scenario}", FAKE_NVML_INJECT=str(tmp_path / "inject.json"),
                     PYTHONPATH=os.pathsep.join([str(FAKE), str(REPO), str(REPO / "workload"),
                                                 os.environ.get("PYTHONPATH", "")]))
    port = free_port()
    procs = start([[sys.executable, "-m", "acceptance_workload"]] * 2,
                  [rank_env(r, 2, port, NODE, r, 2, extra) for r in range(2)])
    logs: list[list[str]] = [[], []]
    out: list[str] = []
    pending = dict(when or {})

    def read(rank: int) -> None:
        for line in procs[rank].stderr:
            logs[rank].append(line)
            for trigger in [t for t in pending if rank == 0 and t in line]:
                pending.pop(trigger)()

    readers = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(2)]
    readers += [threading.Thread(target=lambda p=p: out.extend(p.stdout), daemon=True) for p in procs]
    for t in readers:
        t.start()
    try:
        for p in procs:
            p.wait(timeout=300)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for t in readers:
            t.join(timeout=10)
    err = "".join(out) + "".join(logs[0])
    assert not pending, f"rank 0 never printed {list(pending)}:\n{err[-3000:]}"
    path = tmp_path / "report.json"
    assert path.exists(), err[-3000:]
    return Report.model_validate(json.loads(path.read_text())), err


def inject(tmp_path: Path, what: dict[int, dict]) -> Action:
    """Rewrite the stand-in NVML's inject file (whole, then renamed: a rank never reads half of it)."""
    def act() -> None:
        scratch = tmp_path / "inject.json.part"
        scratch.write_text(json.dumps({str(g): v for g, v in what.items()}))
        scratch.replace(tmp_path / "inject.json")
    return act


def signals(report: Report) -> list[CheckResult]:
    return [r for r in report.results if r.check == "signals"]


def failed(report: Report) -> list[CheckResult]:
    return [r for r in signals(report) if not r.passed]


def rejudged_agrees(report: Report, cfg: WorkloadConfig) -> None:
    """The operator's re-judging (the same rule table, the thresholds it resolves itself) reaches every verdict."""
    from acceptance_operator.judging.rejudge import Context, judge_result

    context = Context(cfg, report)
    for r in signals(report):
        again = judge_result(r, context)
        assert (again.passed, again.threshold, again.comparison) == (r.passed, r.threshold, r.comparison), r


def test_xid_79_during_the_nccl_sweep_fails_naming_the_gpu_and_the_stage(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    report, err = run(tmp_path, cfg, when={NCCL: inject(tmp_path, {0: {"xids": [79]}})})
    assert not report.passed and report.failed_nodes == [NODE], err[-3000:]
    (bad,) = failed(report)
    assert (bad.name, bad.node, bad.gpu, bad.value) == ("xid", NODE, 0, 1.0)
    assert bad.message.startswith(f"node {NODE} GPU 0 (serial FAKE0000, bus 00000000:18:00.0): XID 79 (GPU has "
                                  "fallen off the bus) during stage nccl at t="), bad.message
    assert "drain the node" in bad.message
    assert next(r for r in signals(report) if r.name == "xid" and r.gpu == 1).value == 0  # the other GPU
    (x,) = report.signals.nodes[0].gpus[0].xids
    assert (x.code, x.stage, x.fails) == (79, "nccl", True)
    rejudged_agrees(report, cfg)


def test_xid_94_during_ddp_fails_naming_the_gpu_and_the_stage(tmp_path: Path) -> None:
    cfg = config(tmp_path, on=("ddp",))
    report, err = run(tmp_path, cfg, when={DDP: inject(tmp_path, {1: {"xids": [94]}})})
    (bad,) = failed(report)
    assert (bad.name, bad.gpu) == ("xid", 1) and report.failed_nodes == [NODE], err[-3000:]
    assert "XID 94 (contained ECC error (row remap pending, the application was ended)) during stage ddp" in \
        bad.message and "serial FAKE0001" in bad.message
    rejudged_agrees(report, cfg)


def test_an_application_xid_is_recorded_and_does_not_fail(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    report, err = run(tmp_path, cfg, when={NCCL: inject(tmp_path, {0: {"xids": [13]}})})
    assert report.passed and not failed(report), err[-3000:]
    app = next(r for r in signals(report) if r.name == "xid_application")
    assert (app.gpu, app.value, app.comparison) == (0, 1.0, "info")
    assert "recorded, not failing: XID 13 (graphics engine exception" in app.message and "stage nccl" in app.message
    assert next(r for r in signals(report) if r.name == "xid" and r.gpu == 0).value == 0
    rejudged_agrees(report, cfg)


def test_an_nvlink_replay_counter_that_climbs_fails_naming_link_and_gpu(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_nvlink_replays=10)
    report, err = run(tmp_path, cfg, when={NCCL: inject(tmp_path, {0: {"set": {"nvlink2_replay": 40}}})})
    (bad,) = failed(report)
    assert (bad.name, bad.gpu, bad.value, bad.threshold) == ("nvlink_replays", 0, 40.0, 10.0), err[-3000:]
    assert "nvlink L2 replay grew 40 (from 0 to 40)" in bad.message and report.failed_nodes == [NODE]
    assert report.signals.nodes[0].gpus[0].moved == {"nvlink L2 replay": 40.0}
    rejudged_agrees(report, cfg)


def test_a_fabric_not_completed_fails_naming_the_gpu_and_the_fabric_manager(tmp_path: Path) -> None:
    cfg = config(tmp_path, on=("preflight",))
    report, err = run(tmp_path, cfg, scenario="fabric_in_progress")
    (bad,) = failed(report)
    assert (bad.name, bad.gpu, bad.value, bad.observed) == ("fabric", 1, 0.0, "in progress"), err[-3000:]
    assert "NVSwitch fabric in progress" in bad.message and "systemctl status nvidia-fabricmanager" in bad.message
    assert "nvidia-smi -q | grep -A3 Fabric" in bad.message
    rejudged_agrees(report, cfg)


def test_a_healthy_recording_passes_every_signal_read_or_skipped_with_its_reason(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_nvlink_replays=10, max_nvlink_crc_errors=10, max_pcie_replays=10)
    report, err = run(tmp_path, cfg)
    assert report.passed and not failed(report), err[-3000:]
    names = {(r.name, r.gpu) for r in signals(report)}
    for gpu in (0, 1):
        assert {"xid", "nvlink_replays", "nvlink_recoveries", "nvlink_crc_errors", "pcie_replays", "ecc_corrected",
                "ecc_uncorrected", "row_remap_pending", "row_remap_failure", "fabric"} <= {
                    n for n, g in names if g == gpu}
    assert ("fabric_cliques", None) in names and ("watched", None) in names
    skips = {s.name: s.reason for s in report.skipped if s.check == "signals"}
    assert set(skips) == {"retired_pages", "rdma_ports"}, skips  # the stand-in has no retired pages; no RDMA
    assert "nvmlDeviceGetRetiredPages" in skips["retired_pages"] and "no-sysfs" in skips["rdma_ports"]
    assert "# signals: watched" in err and "signals: 22/22 passed, 2 signal(s) skipped" in err, err[-3000:]
    rejudged_agrees(report, cfg)


def test_a_cpu_machine_with_nothing_skips_every_signal_with_its_reason(tmp_path: Path) -> None:
    """No NVML (the real pynvml finds no driver here, or is absent) and no RDMA port: skips, the check not failed."""
    cfg = config(tmp_path, on=("preflight",))
    report, err = run(tmp_path, cfg, scenario=None)
    assert report.passed and [r.name for r in signals(report)] == ["watched"], err[-3000:]
    skips = {s.name: s.reason for s in report.skipped if s.check == "signals"}
    assert set(skips) == {*judge.NVML_SIGNALS, "rdma_ports"}
    assert all(skips[n].startswith("NVML could not be opened: ") for n in judge.NVML_SIGNALS), skips
    assert all(f"node {NODE} GPU 0, node {NODE} GPU 1" in skips[n] for n in judge.NVML_SIGNALS)


# RDMA ports: a sysfs tree of the test's ------------------------------------------------------------------------
COUNTERS = {"link_downed": 0, "link_error_recovery": 0, "symbol_error": 12, "port_rcv_errors": 0,
            "local_link_integrity_errors": 0, "excessive_buffer_overrun_errors": 0,
            "port_rcv_remote_physical_errors": 0, "port_xmit_discards": 3}


def sysfs_tree(root: Path) -> Path:
    """Two ConnectX ports as /sys shows them: mlx5_0 port 1 (ib0), mlx5_1 port 1 (ib1), active and up."""
    for i in range(2):
        dev = root / "class" / "infiniband" / f"mlx5_{i}"
        port = dev / "ports" / "1"
        (port / "counters").mkdir(parents=True)
        (port / "hw_counters").mkdir()
        (port / "state").write_text("4: ACTIVE\n")
        (port / "phys_state").write_text("5: LinkUp\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        for name, value in COUNTERS.items():
            (port / "counters" / name).write_text(f"{value}\n")
        (port / "hw_counters" / "out_of_sequence").write_text("0\n")
        net = dev / "device" / "net" / f"ib{i}"
        net.mkdir(parents=True)
        (net / "dev_port").write_text("0\n")
    return root


def bump(root: Path, device: str, counter: str, by: int) -> Action:
    def act() -> None:
        path = root / "class" / "infiniband" / device / "ports" / "1" / "counters" / counter
        path.write_text(f"{int(path.read_text()) + by}\n")
    return act


def port_failures(report: Report) -> list[tuple[str, str | None, float | None]]:
    return [(r.name, r.observed, r.value) for r in failed(report)]


def test_a_link_that_went_down_during_the_run_fails_naming_node_device_port_and_interface(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    root = sysfs_tree(tmp_path / "sys")
    report, err = run(tmp_path, cfg, sysfs=root, when={NCCL: bump(root, "mlx5_1", "link_downed", 1)})
    assert port_failures(report) == [("link_downed", "mlx5_1 port 1 (ib1)", 1.0)], err[-3000:]
    bad = failed(report)[0]
    assert bad.node == NODE and report.failed_nodes == [NODE]
    assert bad.message == (f"node {NODE} mlx5_1 port 1 (ib1): link_downed grew 1 (from 0 to 1): the link of mlx5_1 "
                           "port 1 (ib1) went down during the run")
    rejudged_agrees(report, cfg)


def test_symbol_errors_over_the_ceiling_fail_naming_the_port(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_symbol_errors=100)
    root = sysfs_tree(tmp_path / "sys")
    report, err = run(tmp_path, cfg, sysfs=root, when={NCCL: bump(root, "mlx5_0", "symbol_error", 5000)})
    assert port_failures(report) == [("symbol_error", "mlx5_0 port 1 (ib0)", 5000.0)], err[-3000:]
    assert "symbol_error grew 5000 (from 12 to 5012)" in failed(report)[0].message
    assert failed(report)[0].threshold == 100
    rejudged_agrees(report, cfg)


def test_ports_whose_counters_stay_still_pass(tmp_path: Path) -> None:
    cfg = config(tmp_path, on=("preflight",), max_symbol_errors=100, max_port_xmit_discards=10)
    root = sysfs_tree(tmp_path / "sys")
    report, err = run(tmp_path, cfg, scenario=None, sysfs=root)
    assert report.passed and not failed(report), err[-3000:]
    ports = [(r.name, r.observed) for r in signals(report) if r.observed and "port" in r.observed]
    assert ("port_state", "mlx5_0 port 1 (ib0)") in ports and ("link_downed", "mlx5_1 port 1 (ib1)") in ports
    assert len(ports) == 2 * (1 + len(COUNTERS) + 1)  # state, each counter and the extended ones, per port
    assert "rdma_ports" not in {s.name for s in report.skipped}
    assert [p.moved for p in report.signals.nodes[0].ports] == [{}, {}]


# The table of XIDs -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [48, 63, 64, 74, 79, 92, 94, 95, 119, 120])
def test_the_hardware_xids_the_issue_names_fail(code: int) -> None:
    assert xids.lookup(code).fails and xids.lookup(code).action


@pytest.mark.parametrize("code", [13, 31, 43])
def test_application_xids_are_recorded_with_their_reason(code: int) -> None:
    entry = xids.lookup(code)
    assert not entry.fails and "application" in entry.meaning + entry.action


def test_an_xid_not_in_the_table_fails_and_says_where_to_look() -> None:
    entry = xids.lookup(4242)
    assert entry.fails and "catalogue" in entry.meaning


def test_the_docs_xid_table_is_the_table_the_check_judges_by() -> None:
    """docs/signals.md prints the table of xids.py, one row a code, word for word (one home: the module)."""
    doc = (REPO / "docs" / "signals.md").read_text()
    for x in xids.XIDS.values():
        row = f"| {x.code} | {x.meaning} | {'fails the node' if x.fails else 'recorded'} | {x.action} |"
        assert row in doc, row
    listed = {int(line.split("|")[1]) for line in doc.splitlines() if line.startswith("| ") and
              line.split("|")[1].strip().isdigit()}
    assert listed == set(xids.XIDS)


def test_the_ports_are_those_nccl_ib_hca_selects_and_one_down_at_the_start_is_not_watched(tmp_path: Path) -> None:
    """A port the run cannot use (not up when the run starts: a spare, a storage NIC unplugged) is a skip saying so,
    never a failure; NCCL_IB_HCA narrows the ports as it narrows NCCL's and the preflight's."""
    from acceptance_workload.checks.signals import ports

    root = sysfs_tree(tmp_path / "sys")
    assert [p["device"] for p in ports.snapshot(root, "=mlx5_1")["ports"]] == ["mlx5_1"]
    assert "matching NCCL_IB_HCA=^mlx5" in ports.snapshot(root, "^mlx5")["none"]
    (root / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "state").write_text("1: DOWN\n")
    (root / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "phys_state").write_text("3: Disabled\n")
    seen = {"start": ports.snapshot(root), "end": ports.snapshot(root)}
    j = judge.Judged(SignalsThresholds(), ())
    rows = judge.judge_ports(j, NODE, seen)
    assert all(r.passed for r in j.results) and {r.observed for r in j.results} == {"mlx5_0 port 1 (ib0)"}
    (skip,) = j.skipped()
    assert skip.name == "port_state" and "not ACTIVE/LinkUp at the run's start" in skip.reason
    assert f"node {NODE} mlx5_1 port 1 (ib1) start DOWN/Disabled" in skip.reason
    assert [r.problem for r in rows] == [None, "not up at the start: not watched"]
