"""A CUDA/NCCL error a rank raises after preflight is reported with its GPU's facts: what NVML said was on that GPU
before the run (occupancy.read_own, before the rank's CUDA context) and what it says at the error.

The real `python -m acceptance_workload` on every rank (issue 20: an NCCL error on a GPU another process fills
should say so). No GPU here, so what a GPU host would supply comes from outside the workload:
- NVML: a stand-in `pynvml` module first on PYTHONPATH, in NVML's call shapes (as tests/workload/test_occupancy.py's
  FakeNvml): GPU 1 holds 76012 of 81559 MiB before the run (76000 of them pid 4242's) and 81000 MiB later;
- NCCL: a launcher script that starts each rank's real `acceptance_workload` with the process group on gloo, and
  makes rank 1's preflight raise the error NCCL raises on a GPU it cannot use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from acceptance_workload.configuration.workload import WorkloadConfig
from acceptance_workload.contract.config import CONFIG_ENV
from acceptance_workload.local import cpu_smoke_checks

from tests.workload.multiproc import free_port, rank_env, start

FAKE_NVML = '''
from types import SimpleNamespace
MIB = 1 << 20
# {gpu: [(MiB used, [(pid, MiB)]) before the run, then at every later read]}
GPUS = {0: [(3, []), (3, [])], 1: [(76012, [(4242, 76000)]), (81000, [(4242, 76000)])]}
reads = {0: 0, 1: 0}

def nvmlInit():
    pass

def nvmlDeviceGetHandleByIndex(index):
    return index

def nvmlDeviceGetMemoryInfo(handle, version=None):
    used = GPUS[handle][min(reads[handle], 1)][0]
    reads[handle] += 1
    return SimpleNamespace(used=used * MIB, total=81559 * MIB, free=(81559 - used) * MIB)

def nvmlDeviceGetComputeRunningProcesses(handle):
    return [SimpleNamespace(pid=p, usedGpuMemory=m * MIB) for p, m in GPUS[handle][min(reads[handle], 2) - 1][1]]
'''

NCCL_ERROR = "NCCL Error 1: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"

LAUNCH_ON_GLOO = f'''
import os, runpy
from acceptance_workload.checks.preflight import preflight
from acceptance_workload.runtime import launch
real_start, real_preflight = launch.start, preflight.run_preflight

def start(env, backend, **kw):  # no GPU here: the process group a GPU run would have, on gloo
    return real_start(env, "gloo", **kw)

def run_preflight(*args, **kwargs):
    if os.environ["RANK"] == "1":
        raise RuntimeError({NCCL_ERROR!r})
    return real_preflight(*args, **kwargs)

launch.start, preflight.run_preflight = start, run_preflight
runpy.run_module("acceptance_workload", run_name="__main__")
'''


def _run(tmp_path: Path, world: int, argv: list[str]) -> tuple[dict, list[str]]:
    """`world` ranks of a GPU run on node-a with the stand-in NVML; rank 0's report and every rank's stderr."""
    (tmp_path / "nvml").mkdir()
    (tmp_path / "nvml" / "pynvml.py").write_text(FAKE_NVML)
    checks = cpu_smoke_checks(WorkloadConfig().checks)
    config = WorkloadConfig(mode="gpu", profile="custom", nodes=1, gpus_per_node=world, fabric="ethernet",
                            checks=checks, report_file=str(tmp_path / "report.json"))
    port = free_port()
    envs = [rank_env(r, world, port, "node-a", extra={CONFIG_ENV: config.to_env()}) for r in range(world)]
    for env in envs:
        env["PYTHONPATH"] = f"{tmp_path / 'nvml'}:{env['PYTHONPATH']}"
    procs = start([argv] * world, envs)
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=180)
        errs.append(err)
        assert p.returncode != 0, err
    return json.loads((tmp_path / "report.json").read_text()), errs


def test_an_nccl_error_a_rank_raises_is_reported_with_its_gpu_before_the_run_and_at_the_error(tmp_path: Path):
    (tmp_path / "launch.py").write_text(LAUNCH_ON_GLOO)
    report, errs = _run(tmp_path, 2, [sys.executable, str(tmp_path / "launch.py")])
    facts = ("[GPU 1 before the run: 76012 of 81559 MiB in use by pid 4242 (76000 MiB); "
             "at this error: 81000 of 81559 MiB in use by pid 4242 (76000 MiB)]")
    failed = [r for r in report["results"] if not r["passed"]]
    assert [(r["check"], r["name"], r["node"], r["gpu"]) for r in failed] == [
        ("preflight", "rank_error", "node-a", 1)], report["results"]
    assert failed[0]["message"] == f"rank 1 on node node-a, GPU 1, failed: RuntimeError: {NCCL_ERROR} {facts}"
    assert report["failedNodes"] == ["node-a"]
    assert facts in report["error"] and "GPU 0" not in report["error"]  # its own GPU's facts, not rank 0's
    assert facts in errs[1]  # and in the failing rank's own log


def test_a_rank_that_cannot_start_on_its_gpu_says_what_is_on_it(tmp_path: Path):
    """No CUDA device here at all: the join fails for real, and the message carries what NVML said of the GPU."""
    report, _ = _run(tmp_path, 1, [sys.executable, "-m", "acceptance_workload"])
    assert report["error"] == (
        "could not join the job: rank 0 (node node-a, GPU 0): no CUDA device 0 (torch sees 0) "
        "[GPU 0 before the run: 3 of 81559 MiB in use; at this error: 3 of 81559 MiB in use]")
