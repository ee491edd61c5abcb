"""A rank SIGKILLed from outside in any stage is named at once by `gpu-acceptance local`, with the signal.

`gpu-acceptance local --cpu --gpus 2 --simulate-nodes 2`: rank 1 is
sim-node-1's one process. The test finds it from outside (/proc: a child of
the CLI whose environment says NODE_NAME=sim-node-1) and SIGKILLs it once rank
0 announces the stage; nothing inside the workload knows. The launcher sees the
death and rank 0 must name it within 10 s with "SIGKILL": the heartbeat
timeout is left at its default (60 s), so a pass proves the launcher's path,
not the heartbeat's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from acceptance_workload import exits
from acceptance_workload.checks import HEARTBEAT_TIMEOUT_SECONDS

from tests.workload.test_localize_faults import node_pid, run_local

VICTIM = "sim-node-1"
NAMED_WITHIN = 10.0  # seconds from the kill to the report (the bound)
EXIT_WITHIN = NAMED_WITHIN + 5  # and to the CLI's exit: the report is written, the live ranks told to leave


def _manifest(only: tuple[str, ...]) -> str:
    """Preflight and the checks in `only`: what leads up to the stage is kept short."""
    lines = [f"    {c}: {{enabled: {'true' if c in only else 'false'}}}" for c in ("gpu", "nccl", "ddp")]
    return "kind: AcceptanceTest\nspec:\n  checks:\n" + "\n".join(lines) + "\n"


# stage: rank 0's line that starts it, how long after it the victim is killed, the checks enabled besides
# preflight, extra CLI flags, and the checks the culprit may be filed under. A CPU preflight takes milliseconds:
# the victim may be in the gpu check when killed.
STAGES = {
    "preflight": ("] preflight", 0.0, ("gpu",), (), ("preflight", "gpu")),
    "gpu": ("] gpu: ", 0.5, ("gpu",), (), ("gpu",)),
    "nccl": ("] nccl sweep", 0.2, ("nccl",), (), ("nccl",)),
    "ddp": ("] ddp ", 2.0, ("ddp",), (), ("ddp",)),
    "fsdp": ("] fsdp: ", 2.0, (), ("--fsdp",), ("fsdp",)),
    "storage": ("] storage: ", 0.2, (), ("--storage",), ("storage",)),
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
