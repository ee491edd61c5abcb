"""checks.fsdp and checks.storage on CPU (gloo), end to end through `gpu-acceptance local`, faults from outside.

The storage fault is injected the way a node-local mount shows in a cluster: one simulated node's view of
--storage DIR (DIR/.views/<node>) is pointed at another directory before the run; nothing inside the workload
knows about it.
"""

from __future__ import annotations

import json
from pathlib import Path

from acceptance_workload.checks.report_model import Report

from tests.checks import enable_only, local_manifest
from tests.workload.test_local import cli

VOLUME = "  storage: {volume: {persistentVolumeClaim: {claimName: shared}}}\n"


def run(tmp_path: Path, *args: str, fsdp: bool = False) -> tuple[int, Report, str]:
    (tmp_path / "only.yaml").write_text(local_manifest("storage", *(("fsdp",) if fsdp else ()), spec=VOLUME))
    proc = cli("--cpu", "-f", "only.yaml", "--json", "r.json", *args, cwd=tmp_path)
    report = Report.model_validate(json.loads((tmp_path / "r.json").read_text()))
    return proc.returncode, report, proc.stdout + proc.stderr


def test_fsdp_and_storage_pass_on_two_simulated_nodes(tmp_path: Path) -> None:
    """Hybrid sharding over 2 nodes x 2 ranks; the volume, seen through each node's view, and a checkpoint on it."""
    volume = tmp_path / "volume"
    volume.mkdir()
    code, report, out = run(tmp_path, "--gpus", "4", "--simulate-nodes", "2", "--storage", str(volume), fsdp=True)
    assert code == 0 and report.passed, out[-3000:]
    assert report.checks_run == ["fsdp", "storage"]
    assert report.fsdp is not None and (report.fsdp.shards, report.fsdp.replicas) == (2, 2)
    assert report.fsdp.last_loss < report.fsdp.first_loss
    assert len({r.checksum for r in report.fsdp.ranks}) == 1
    names = {(r.check, r.name) for r in report.results}
    assert {("fsdp", "parameter_checksum"), ("fsdp", "state_shard_ratio"), ("fsdp", "scaling_efficiency"),
            ("storage", "storage_consistency"), ("storage", "storage_write_gbps"), ("storage", "checkpoint_match"),
            ("storage", "checkpoint_save_gbps"), ("storage", "checkpoint_load_seconds")} <= names
    shard = [r.value for r in report.results if r.name == "state_shard_ratio"]
    assert len(shard) == 4 and all(0.9 <= v <= 1.1 for v in shard)  # each rank holds half of the model
    assert sum(r.name == "checkpoint_match" and r.passed for r in report.results) == 4
    assert report.storage is not None and report.storage.checkpoint_bytes > 0
    assert {n.node: n.sees for n in report.storage.nodes} == {"sim-node-0": ["sim-node-1"],
                                                              "sim-node-1": ["sim-node-0"]}
    assert sorted(p.name for p in (volume / ".views").iterdir()) == ["sim-node-0", "sim-node-1"]
    assert [p.name for p in volume.iterdir()] == [".views"]  # the run's files are cleaned up


def test_a_node_that_sees_another_directory_is_named(tmp_path: Path) -> None:
    """3 simulated nodes; sim-node-2's view points elsewhere (a node-local mount): it alone fails, named."""
    volume, elsewhere = tmp_path / "volume", tmp_path / "node-local"
    (volume / ".views").mkdir(parents=True)
    elsewhere.mkdir()
    (volume / ".views" / "sim-node-2").symlink_to(elsewhere, target_is_directory=True)
    code, report, out = run(tmp_path, "--gpus", "3", "--simulate-nodes", "3", "--storage", str(volume))
    assert code == 1 and not report.passed, out[-3000:]
    assert report.failed_nodes == ["sim-node-2"]
    bad = [r for r in report.results if not r.passed]
    assert {(r.name, r.node) for r in bad} == {("storage_consistency", "sim-node-2")}
    assert "sees 0 of 2 other nodes' files" in bad[0].message and "sim-node-0's file is missing" in bad[0].message
    assert any(s.name == "checkpoint" and "not attempted" in s.reason for s in report.skipped)


def test_storage_without_a_volume_is_skipped_saying_so(tmp_path: Path) -> None:
    code, report, out = run(tmp_path, "--gpus", "2", fsdp=True)
    assert code == 0 and report.passed, out[-3000:]
    assert report.checks_run == ["fsdp"]
    assert [s.reason for s in report.skipped if s.check == "storage"] == [
        "no shared volume: set spec.storage.volume (gpu-acceptance local: --storage DIR)"]


def test_a_rank_frozen_in_fsdp_is_named_by_its_heartbeat(tmp_path: Path) -> None:
    """SIGSTOP from outside once FSDP starts; 3 ranks on 2 uneven nodes (one copy, fully sharded over all)."""
    import signal
    import sys
    import time

    from acceptance_workload.configuration.workload import WorkloadConfig
    from acceptance_workload.contract.config import CONFIG_ENV
    from acceptance_workload.local import cpu_smoke_checks

    from tests.workload.multiproc import free_port, rank_env, start

    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    enable_only(checks, "fsdp")
    checks.fsdp.steps = 200
    checks.heartbeat_timeout_seconds = 10
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", nodes=2, gpus_per_node=2, fabric="ethernet",
                            checks=checks, report_file=str(tmp_path / "report.json"))
    nodes, port = ["node-a", "node-b", "node-b"], free_port()
    envs = [rank_env(r, 3, port, nodes[r], nodes[: r + 1].count(nodes[r]) - 1, nodes.count(nodes[r]),
                     {CONFIG_ENV: config.to_env()}) for r in range(3)]
    procs = start([[sys.executable, "-m", "acceptance_workload"]] * 3, envs)
    try:
        assert procs[0].stderr is not None
        for line in procs[0].stderr:
            if "] fsdp: unsharded baseline" in line:
                break
        time.sleep(2.0)
        procs[2].send_signal(signal.SIGSTOP)
        assert procs[0].wait(timeout=120) == 2
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    report = Report.model_validate(json.loads((tmp_path / "report.json").read_text()))
    assert report.failed_nodes == ["node-b"]
    culprits = [r for r in report.results if r.name == "rank_responding"]
    assert [(r.check, r.node, r.gpu, r.passed) for r in culprits] == [("fsdp", "node-b", 1, False)]
