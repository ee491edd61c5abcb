"""A pod's exit code is the workload's own under torchrun: 0 passed, 1 failed, 2 could not answer (exits.py).

torchrun's agent exits 1 for any failed rank, so a report that could not be delivered (2) and a failed check (1)
looked the same to Kubernetes and the operator. The pod's command (job_builders.pod_command) runs torchrun under
`python -m acceptance_workload.guard --launcher`, which ends with the code the ranks' guards recorded. Here that
command runs for real on this machine (torchrun --standalone, one CPU rank), with the faults from outside: an API
server address where nothing listens (the report cannot be delivered), a check made to raise (faultshim).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_operator.building.job_builders import pod_command
from acceptance_workload.configuration.profiles import cpu_smoke_checks
from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract import exits
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.guard import container_code

from tests.unit.test_manifests import make
from tests.workload.faults import fault_env
from tests.workload.multiproc import rank_env
from tests.workload.test_delivery import REF, unreachable_kubeconfig


def run_pod(tmp_path: Path, config: WorkloadConfig, extra: dict[str, str],
            ranks: int = 1) -> subprocess.CompletedProcess:
    """The container's command as the operator builds it for one node of `ranks` GPUs, torchrun spelled as its
    module."""
    command = pod_command(make({"nodes": 1, "gpusPerNode": ranks}))
    at = command.index("torchrun")
    assert command[:at] == ["python", "-m", "acceptance_workload.guard", "--launcher"]
    argv = [sys.executable, *command[1:at], sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
            str(ranks), *command[at + 1:]]
    env = {k: v for k, v in rank_env(0, 1, 0).items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env[CONFIG_ENV] = config.to_env()
    for name, value in extra.items():
        env[name] = value if name != "PYTHONPATH" else os.pathsep.join([value, env["PYTHONPATH"]])
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def ddp_only(**update) -> WorkloadConfig:
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    checks.gpu.enabled = checks.p2p.enabled = checks.nccl.enabled = checks.signals.enabled = False
    return WorkloadConfig(mode="cpu-smoke", profile="custom", nodes=1, gpus_per_node=1, fabric="ethernet",
                          checks=checks, **update)


def test_a_failed_check_under_torchrun_exits_1(tmp_path: Path) -> None:
    """DDP made to raise in rank 0 (a stage_error: the check failed, the report is written): the pod exits 1."""
    config = ddp_only(report_file=str(tmp_path / "report.json"))
    fault = fault_env("acceptance_workload.checks.ddp.ddp:run_ddp:0:0:RuntimeError:"
                      "CUDA error: an illegal memory access")
    proc = run_pod(tmp_path, config, fault)
    assert proc.returncode == exits.NO, proc.stderr[-4000:]
    assert "raised in stage ddp" in proc.stderr and (tmp_path / "report.json").exists()
    # torchrun itself said 1 for the failed rank too; the container's code is the workload's, whatever torchrun's
    assert "FAILED" in proc.stdout


def test_a_failed_check_in_a_pod_of_two_ranks_exits_1(tmp_path: Path) -> None:
    """Two ranks in the pod, and a check that fails for real (nccl's cross-check: no nccl-tests binary where the
    workload looks): rank 0 delivers its answer, 1, and torchrun stops the other rank (SIGTERM) as soon as one exits
    non-zero, or the other rank exits 1 first; either way the pod exits 1 (it exited 2 whenever torchrun won)."""
    checks = cpu_smoke_checks(WorkloadConfig().checks).model_copy(deep=True)
    checks.gpu.enabled = checks.p2p.enabled = checks.ddp.enabled = checks.signals.enabled = False
    checks.nccl.cross_check = True
    config = WorkloadConfig(mode="cpu-smoke", profile="custom", nodes=1, gpus_per_node=2, fabric="ethernet",
                            checks=checks, report_file=str(tmp_path / "report.json"))
    for attempt in range(3):  # the race goes either way: torchrun won 3 times in 5 before the fix
        proc = run_pod(tmp_path, config, {"GPU_ACCEPTANCE_NCCL_TESTS_DIR": str(tmp_path / "no-nccl-tests")},
                       ranks=2)
        assert proc.returncode == exits.NO, (attempt, proc.stderr[-4000:])
        assert "all_reduce_cross_check" in proc.stdout and (tmp_path / "report.json").exists()


def test_an_undelivered_report_under_torchrun_exits_2(tmp_path: Path) -> None:
    """The API server cannot be reached (a closed loopback port): the rank exits 2, and so does the pod, not
    torchrun's 1 (the operator and Kubernetes see 'could not answer', not 'a check failed')."""
    kubeconfig, address = unreachable_kubeconfig(tmp_path)
    proc = run_pod(tmp_path, ddp_only(test=REF), {"KUBECONFIG": str(kubeconfig)})
    assert proc.returncode == exits.CANNOT, proc.stderr[-4000:]
    assert f"(API server {address})" in proc.stderr and "report NOT delivered: " in proc.stderr
    assert "ended with code 1, this pod's ranks with [2]: the container ends with the workload's code 2" \
        in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize(("launcher", "ranks", "stopped", "code"), [
    (0, [0, 0], False, 0),  # passed
    (1, [1, 1], False, 1),  # a check failed: every rank exits with rank 0's code
    (1, [2, 2], False, 2),  # could not answer (a report not delivered)
    (1, [2, 1], False, 2),  # the worse answer
    (1, [-9, 1], False, 2),  # a rank killed: the run could not complete
    (1, [-15, 1], False, 1),  # torchrun stopped the other rank (SIGTERM) once rank 0 had exited with its answer
    (1, [-15, 2, -15], False, 2),  # ... its answer was "could not answer"
    (1, [-15, -15], False, 2),  # no rank answered: stopped before any answer
    (1, [-15, -9, 1], False, 2),  # a rank killed beside the launcher's stops: the run could not complete
    (1, [], False, 2),  # the launcher failed before any rank ended (rendezvous)
    (1, [0], False, 2),  # the launcher failed though its ranks passed
    (-15, [], True, 143),  # stopped from outside: the launcher's own end, as a shell spells a signal
    (1, [2], True, 1),
])
def test_the_containers_code_is_the_workloads_own(launcher: int, ranks: list[int], stopped: bool, code: int) -> None:
    assert container_code(launcher, ranks, stopped) == code
