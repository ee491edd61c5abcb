"""A rank SIGKILLed from outside in any stage is named at once by `gpu-acceptance local`, with the signal.

`gpu-acceptance local --cpu --gpus 2 --simulate-nodes 2`: rank 1 is
sim-node-1's one process. The test finds it from outside (/proc: a child of
the CLI whose environment says NODE_NAME=sim-node-1) and SIGKILLs it once rank
0 announces the stage; nothing inside the workload knows. The launcher sees the
death and rank 0 must name it within 10 s with "SIGKILL": the heartbeat
timeout is left at its default (60 s), so a pass proves the launcher's path,
not the heartbeat's. The same through the pods' command (real torchrun
starting each rank under acceptance_workload.guard, on one and two simulated
nodes, rank 0 killed too), and a rank the OOM killer kills (moved from outside
into a small memory cgroup) named as such.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from acceptance_operator.building.job_builders import torchrun_command
from acceptance_workload.checks.report_model import Report
from acceptance_workload.configuration.checks import HEARTBEAT_TIMEOUT_SECONDS, OPT_IN_CHECKS
from acceptance_workload.configuration.profiles import cpu_smoke_checks
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract import exits
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.runtime import deaths
from acceptance_workload.runtime.deaths import DEATHS_ENV

from tests.checks import local_manifest
from tests.unit.test_manifests import make
from tests.workload.multiproc import free_port, rank_env
from tests.workload.test_localize_faults import node_pid, run_local

VICTIM = "sim-node-1"
NAMED_WITHIN = 10.0  # seconds from the kill to the report (the bound)
EXIT_WITHIN = NAMED_WITHIN + 5  # and to the CLI's exit: the report is written, the live ranks told to leave


def _manifest(only: tuple[str, ...]) -> str:
    """Preflight and the checks in `only`: what leads up to the stage is kept short (the opt-in checks are left to
    their flags: --fsdp, --storage, --soak)."""
    return local_manifest("preflight", *only, but=OPT_IN_CHECKS)


# preflight, extra CLI flags, and the checks the culprit may be filed under. A CPU preflight takes milliseconds:
# the victim may be in the gpu check when killed.
STAGES = {
    "preflight": ("] preflight", 0.0, ("gpu",), (), ("preflight", "gpu")),
    "gpu": ("] gpu: ", 0.0, ("gpu",), (), ("gpu",)),  # at once: a CPU gpu stage can end within 0.5 s
    "nccl": ("] nccl sweep", 0.2, ("nccl",), (), ("nccl",)),
    "ddp": ("] ddp ", 0.5, ("ddp",), (), ("ddp",)),  # the stage lasts 2-3 s on a 2-core machine
    "fsdp": ("] fsdp: ", 1.0, (), ("--fsdp",), ("fsdp",)),
    "storage": ("] storage: ", 0.2, (), ("--storage",), ("storage",)),
    "soak": ("] soak: GEMM", 5.0, (), ("--soak", "60"), ("soak",)),  # in the load, minutes before its end
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_rank_killed_in_any_stage_is_named_within_10s_with_its_signal(tmp_path: Path, stage: str) -> None:
    trigger, delay, only, flags, checks = STAGES[stage]
    manifest = tmp_path / "t.yaml"
    manifest.write_text(_manifest(only))
    extra = ["-f", str(manifest), *flags]
    if "--storage" in flags:
        (tmp_path / "volume").mkdir()
        extra.append(str(tmp_path / "volume"))
    killed: list[float] = []

    def on_line(line: str, proc: subprocess.Popen) -> None:
        if trigger in line and not killed:
            time.sleep(delay)
            pid = node_pid(proc.pid, VICTIM)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed.append(time.time())

    code, stderr, report = run_local(tmp_path, *extra, on_line=on_line, nodes=2)
    ended = time.time()
    assert killed, stderr[-3000:]
    # The run could not complete (report.error): exit 2 by the project's rule (exits.py), with a report.
    assert code == exits.CANNOT and report is not None and not report.passed, stderr[-3000:]
    assert report.failed_nodes == [VICTIM], stderr[-3000:]
    blamed = [(r.check, r.name, r.node, r.gpu) for r in report.results if r.name.startswith("rank_")]
    assert len(blamed) == 1 and blamed[0][1:] == ("rank_exited", VICTIM, 0) and blamed[0][0] in checks, blamed
    culprit = next(r for r in report.results if r.name == "rank_exited")
    assert f"rank 1 on node {VICTIM}, GPU 0, died: killed by SIGKILL (signal 9)" in culprit.message, culprit.message
    assert "at step '" in culprit.message and "at step '?'" not in culprit.message, culprit.message
    assert report.error and "killed by SIGKILL" in report.error and "stopped responding" not in report.error
    assert "gpu-acceptance local: rank 1 killed by SIGKILL (signal 9)" in stderr  # the launcher says so too
    assert report.finished_at is not None
    named = report.finished_at.timestamp() - killed[0]
    print(f"{stage}: named {named:.1f} s after the kill, CLI exit {ended - killed[0]:.1f} s")
    assert named < NAMED_WITHIN < HEARTBEAT_TIMEOUT_SECONDS, named
    assert ended - killed[0] < EXIT_WITHIN, ended - killed[0]


def _rank_process(torchrun: int, rank: int) -> int | None:
    """The pid of rank `rank` itself: the child of a guard (torchrun's child) whose environment says RANK=rank."""
    def parent(pid: str) -> int:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and parent(str(parent(entry.name))) == torchrun
                    and f"RANK={rank}".encode() in (entry / "environ").read_bytes().split(b"\0")):
                return int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def _torchrun(tmp_path: Path, nodes: int, victim: int) -> tuple[str, float, float]:
    """The pods' command (torchrun ... -m acceptance_workload.guard) on `nodes` simulated nodes of two ranks
    (one torchrun each, static rendezvous as the training-operator starts them); `victim` SIGKILLed 2 s into DDP.

    Returns every torchrun's stderr (the ranks' with it), when the kill was sent and when the last torchrun ended.
    """
    names = ["node-a", "node-b"][:nodes]
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    checks.gpu.enabled = checks.p2p.enabled = checks.nccl.enabled = checks.signals.enabled = False
    # ~20 s of DDP on a 2-core machine: the kill 2 s in lands inside it however fast the machine (40 steps lasted
    # 2.2 s with torch 2.15, and a kill after the ranks had finished found no rank to kill)
    checks.ddp.steps = 400
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", nodes=nodes, gpus_per_node=2, fabric="ethernet",
                            checks=checks, report_file=str(tmp_path / "report.json"))
    port = free_port()
    flags = torchrun_command(make({"nodes": nodes}))[1:]  # the pod's own flags and module
    agents = []
    for k, node in enumerate(names):
        env = {n: v for n, v in rank_env(0, 2 * nodes, port, node).items()
               if n not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        env[CONFIG_ENV] = config.to_env()
        where = ["--nnodes", str(nodes), "--node-rank", str(k), "--master-addr", "127.0.0.1", "--master-port",
                 str(port)] if nodes > 1 else []
        # Only the first torchrun's stderr is read as it runs: the others write to files, as a pipe nobody reads
        # fills (64 KiB) and blocks its torchrun
        err = subprocess.PIPE if k == 0 else (tmp_path / f"torchrun-{node}.err").open("w")
        agents.append(subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                        *where, *flags], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=err, text=True))
        if k:
            err.close()  # the torchrun has its own copy
    killed: list[float] = []
    lines: list[str] = []
    try:
        assert agents[0].stderr is not None
        for line in agents[0].stderr:
            lines.append(line)
            if "] ddp " in line and not killed:
                time.sleep(2.0)
                pid = _rank_process(agents[victim // 2].pid, victim)
                assert pid is not None, "".join(lines)[-3000:]
                os.kill(pid, signal.SIGKILL)
                killed.append(time.time())
        for agent in agents:
            agent.wait(timeout=120)
        ended = time.time()
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
            lines.append(agent.communicate()[1] or "")
        lines += [(tmp_path / f"torchrun-{node}.err").read_text() for node in names[1:]]
    stderr = "".join(lines)
    assert killed, stderr[-3000:]
    return stderr, killed[0], ended


@pytest.mark.parametrize("nodes", [1, 2])
def test_under_torchrun_a_killed_rank_is_named_by_its_guard(tmp_path: Path, nodes: int) -> None:
    """torchrun alone would SIGTERM rank 0 at once, and no report would be written; the guard tells rank 0 first.
    Two nodes: the victim's node-mate passes its guard's word into the store for rank 0 on the other node."""
    victim, node = 2 * nodes - 1, ["node-a", "node-b"][nodes - 1]
    stderr, killed, _ = _torchrun(tmp_path, nodes, victim)
    report = Report.model_validate_json((tmp_path / "report.json").read_text())
    assert report.failed_nodes == [node], stderr[-3000:]
    culprit = next(r for r in report.results if r.name == "rank_exited")
    assert (culprit.check, culprit.node, culprit.gpu) == ("ddp", node, 1)
    said = f"rank {victim} on node {node}, GPU 1, died: killed by SIGKILL (signal 9)"
    assert said in culprit.message, culprit.message
    assert report.finished_at is not None
    named = report.finished_at.timestamp() - killed
    print(f"torchrun, {nodes} node(s): named {named:.1f} s after the kill")
    assert named < NAMED_WITHIN, named
    assert "Signal 9 (SIGKILL)" in stderr  # the guard ended as its rank did: torchrun says so too


def test_under_torchrun_a_killed_rank_0_is_named_by_the_others_at_once(tmp_path: Path) -> None:
    """No report without rank 0: rank 1 reads its guard's word, prints the short report naming rank 0 and its
    signal (its termination message in a pod), and leaves, not after the heartbeat timeout."""
    stderr, killed, ended = _torchrun(tmp_path, 1, 0)
    assert not (tmp_path / "report.json").exists()
    assert "no report can be written without rank 0" in stderr, stderr[-3000:]
    assert "rank 0 on node node-a, GPU 0, died: killed by SIGKILL (signal 9)" in stderr, stderr[-3000:]
    print(f"torchrun, rank 0 killed: the job ended {ended - killed:.1f} s after the kill")
    # Rank 0's guard imports torch to tell other nodes (10 s on a loaded 2-core machine) before torchrun ends; the
    # heartbeat could not have named rank 0 here at all (torchrun's agent keeps the store answering).
    assert ended - killed < HEARTBEAT_TIMEOUT_SECONDS / 2


def test_a_guard_stopped_with_its_job_stops_its_rank_and_reports_no_death(tmp_path: Path) -> None:
    """torchrun, mpirun or the kubelet stopping the job signal the guard: the rank's end is then no death."""
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", checks=cpu_smoke_checks(WorkloadConfig().checks))
    env = rank_env(0, 2, free_port(), "node-a", extra={CONFIG_ENV: config.to_env(), DEATHS_ENV: str(tmp_path)})
    guard = subprocess.Popen([sys.executable, "-m", "acceptance_workload.guard"], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the rank runs (it waits at the rendezvous for rank 1)
            children = Path(f"/proc/{guard.pid}/task/{guard.pid}/children").read_text().split()
            if children:
                break
            time.sleep(0.2)
        assert children, "the guard started no rank"
        time.sleep(1.0)
        guard.send_signal(signal.SIGTERM)
        _, err = guard.communicate(timeout=30)
    finally:
        if guard.poll() is None:
            guard.kill()
            guard.wait()
    assert not Path(f"/proc/{children[0]}").exists()  # the rank got the signal too
    assert guard.returncode == -signal.SIGTERM, err[-2000:]  # ended as its rank did
    assert not list(tmp_path.iterdir()) and "killed by" not in err, err[-2000:]


def _confine(pid: int, limit: int, name: str) -> Path:
    """Move `pid` into a new memory cgroup of `limit` bytes under this process's own (root; v1 or v2)."""
    parent = deaths.cgroup_dir()
    assert parent is not None, "no memory cgroup found in /proc/self/cgroup"
    group = parent / name
    group.mkdir()
    limit_file = "memory.max" if (parent / "memory.events").exists() else "memory.limit_in_bytes"
    (group / limit_file).write_text(str(limit))
    (group / "cgroup.procs").write_text(str(pid))  # its pages so far stay charged to the parent
    return group


def test_a_rank_the_oom_killer_kills_is_named_so(tmp_path: Path) -> None:
    """Rank 1 moved, mid-DDP, into a memory cgroup of 16 MiB from outside: the OOM killer kills it, and the
    report says so from the kernel log (or the cgroup's count), not merely SIGKILL."""
    manifest = tmp_path / "t.yaml"
    manifest.write_text(_manifest(("ddp",)))
    groups: list[Path] = []

    def on_line(line: str, proc: subprocess.Popen) -> None:
        if "] ddp " in line and not groups:
            pid = node_pid(proc.pid, VICTIM)
            assert pid is not None
            groups.append(_confine(pid, 16 << 20, f"gpu-acceptance-test-{os.getpid()}"))

    try:
        code, stderr, report = run_local(tmp_path, "-f", str(manifest), on_line=on_line, nodes=2)
    finally:
        for group in groups:
            for _ in range(50):  # removable once its one process is gone
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    assert groups, stderr[-3000:]
    assert code == exits.CANNOT and report is not None and report.failed_nodes == [VICTIM], stderr[-3000:]
    culprit = next(r for r in report.results if r.name == "rank_exited")
    assert f"rank 1 on node {VICTIM}, GPU 0, died: killed by SIGKILL (signal 9): the OOM killer" in culprit.message
    assert "Killed process" in culprit.message or "oom_kill" in culprit.message, culprit.message
    print(culprit.message)


def _child_of(parent: int, rank: int) -> int | None:
    """The pid of the CLI's child whose environment says RANK=rank."""
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent
                    and f"RANK={rank}".encode() in (entry / "environ").read_bytes().split(b"\0")):
                return int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def test_the_only_rank_killed_in_ddp_still_leaves_a_report_file_naming_it(tmp_path: Path) -> None:
    """`local --json FILE` on one rank, SIGSEGV sent to it from outside during DDP: nobody is left to write the
    report but its launcher, which writes what completed (the preflight) and a failed result naming the rank, its
    node and GPU, the signal and the stage. The run could not complete: exit 2."""
    manifest = tmp_path / "t.yaml"
    manifest.write_text(_manifest(("ddp",)))
    killed: list[int] = []

    def on_line(line: str, proc: subprocess.Popen) -> None:
        if "] ddp " in line and not killed:
            time.sleep(0.3)
            pid = _child_of(proc.pid, 0)
            assert pid is not None
            os.kill(pid, signal.SIGSEGV)
            killed.append(pid)

    code, stderr, report = run_local(tmp_path, "-f", str(manifest), on_line=on_line, nodes=1)
    assert killed, stderr[-3000:]
    assert code == exits.CANNOT and report is not None, stderr[-3000:]
    assert not report.passed and report.checks_run == ["preflight", "ddp"]
    assert [r.check for r in report.results if r.passed] and all(
        r.check == "preflight" for r in report.results if r.passed)  # what completed before the death
    (culprit,) = [r for r in report.results if not r.passed]
    node = report.environment.hostnames[0]
    assert (culprit.check, culprit.name, culprit.node, culprit.gpu) == ("ddp", "rank_exited", node, 0), culprit
    assert culprit.message == (f"rank 0 on node {node}, GPU 0, died: killed by SIGSEGV (signal 11); pid {killed[0]}, "
                               "in stage ddp: the run could not complete"), culprit.message
    assert report.error == culprit.message and report.failed_nodes == [node]
    assert not (tmp_path / "r.json.progress").exists()
    assert "rank 0 ended with signal SIGSEGV: the run could not complete" in stderr
