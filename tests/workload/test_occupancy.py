"""gpu_in_use: what NVML says is on a GPU before the workload touches it, judged and reported.

NVML is replaced by a stand-in with NVML's call shapes (no GPU here); the
GPU runs (bench/fault_suite.py gpu-in-use) hold a real GPU's memory from
another process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from acceptance_workload.checks.preflight.occupancy import (
    NOT_OURS,
    failure_facts,
    judge_in_use,
    new_pids,
    nvml_target,
    out_of_memory,
    out_of_memory_message,
    read,
)
from acceptance_workload.checks.preflight.spec import PreflightThresholds

MIB = 1 << 20
BOUND = PreflightThresholds(max_gpu_memory_in_use_mib=1024)


class FakeNvml:
    """NVML's calls this module makes, for GPUs given as {index: (used MiB, total MiB, [(pid, MiB)])}."""

    def __init__(self, gpus: dict[int, tuple[int, int, list[tuple[int, int | None]]]], fail: bool = False):
        self.gpus, self.fail = gpus, fail

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.fail:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        used, total, _ = self.gpus[handle]
        return SimpleNamespace(used=used * MIB, total=total * MIB, free=(total - used) * MIB)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * MIB)
                for pid, mib in self.gpus[handle][2]]


def test_a_gpu_held_by_another_process_fails_naming_gpu_memory_and_pid(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cmdline").write_bytes(b"python\0-c\0import torch\nhold()\0")
    nvml = FakeNvml({2: (76_012, 81_559, [(4242, 76_000), (777, None)])})
    result = judge_in_use(read(nvml, 2, 2, proc=tmp_path), BOUND, "node-a")
    assert result is not None and not result.passed
    assert (result.name, result.node, result.gpu, result.value, result.threshold) == \
        ("gpu_in_use", "node-a", 2, 76012.0, 1024.0)
    assert result.message.startswith("GPU 2 on node node-a: 76012 of 81559 MiB in use by pid 4242 (python -c "
                                     "import torch hold(), 76000 MiB), pid 777 before the run; more than 1024 MiB")


def test_an_idle_gpu_passes_and_says_what_it_saw() -> None:
    result = judge_in_use(read(FakeNvml({0: (3, 81_559, [])}), 0, 0), BOUND, "node-a")
    assert result is not None and result.passed
    assert result.message == "GPU 0 on node node-a: 3 of 81559 MiB in use before the run"


def test_memory_held_by_an_invisible_process_still_fails() -> None:
    """In a container NVML may list no process of another pod: the memory in use decides."""
    result = judge_in_use(read(FakeNvml({1: (40_000, 81_559, [])}), 1, 1), BOUND, "node-b")
    assert result is not None and not result.passed and "no compute process visible" in result.message


def test_unreadable_fails_where_judged_and_is_skipped_where_not() -> None:
    occ = read(FakeNvml({}, fail=True), 0, 0)
    judged = judge_in_use(occ, BOUND, "node-a")
    assert judged is not None and not judged.passed and judged.value is None
    assert "memory in use unreadable (RuntimeError: NVML_ERROR_UNKNOWN)" in judged.message
    assert judge_in_use(occ, PreflightThresholds(), "node-a") is None
    assert not judge_in_use(None, BOUND, "node-a").passed  # never read: fail closed


def test_the_gpu_read_is_the_one_cuda_visible_devices_gives_the_rank() -> None:
    assert nvml_target(1, {"CUDA_VISIBLE_DEVICES": "4,5"}) == 5
    assert nvml_target(0, {"CUDA_VISIBLE_DEVICES": "GPU-1234"}) == "GPU-1234"
    assert nvml_target(3, {}) == 3
    assert nvml_target(3, {"CUDA_VISIBLE_DEVICES": ""}) == 3


class FakeNvmlV2(FakeNvml):
    """A driver with v2 memory info: `used` without the ~480 MiB the driver reserves (v1 counts them)."""

    nvmlMemory_v2 = 0x02000028

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> SimpleNamespace:
        info = super().nvmlDeviceGetMemoryInfo(handle)
        if version == self.nvmlMemory_v2:
            info.used -= 480 * MIB
        return info


def test_v2_memory_info_is_read_where_the_driver_has_it() -> None:
    occ = read(FakeNvmlV2({0: (483, 81_559, [])}), 0, 0)
    assert occ.used_mib == 3.0


def test_an_error_a_rank_raises_carries_its_gpu_before_the_run_and_now() -> None:
    """No GPU here: the reading at the error says why it is missing, the one before the run is kept."""
    before = read(FakeNvml({3: (76_012, 81_559, [(4242, 76_000)])}), 3, 3, proc=Path("/nonexistent"))
    facts = failure_facts(before, 3)
    assert facts.startswith(" [GPU 3 before the run: 76012 of 81559 MiB in use by pid 4242 (76000 MiB); "
                            "at this error: ")
    assert failure_facts(None, 0) == ""  # a CPU run reads nothing


def test_an_out_of_memory_error_names_the_process_that_is_not_this_runs(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cmdline").write_bytes(b"python\0hold.py\0")
    nvml = FakeNvml({0: (79_000, 81_559, [(4242, 76_000), (77, 2_900)])})  # 77: this run's rank
    before = read(FakeNvml({0: (3, 81_559, [])}), 0, 0)
    text = out_of_memory_message(read(nvml, 0, 0, proc=tmp_path), before, {77}, "node-a")
    assert text == ("GPU 0 on node node-a ran out of memory: 79000 of 81559 MiB in use by pid 4242 (python hold.py, "
                    "76000 MiB) at this error, not this run's: another process took this GPU's memory after the "
                    "preflight (3 of 81559 MiB in use before the run). Stop it, or run the test on idle GPUs")
    ours = out_of_memory_message(read(FakeNvml({0: (80_000, 81_559, [(77, 79_000)])}), 0, 0, proc=tmp_path), None,
                                 {77}, "n")
    assert ours.endswith("by pid 77 (79000 MiB) at this error, all of it this run's") and NOT_OURS not in ours
    assert NOT_OURS not in out_of_memory_message(read(FakeNvml({}, fail=True), 0, 0), None, {77}, "n")


def test_out_of_memory_is_the_gpus_not_the_hosts() -> None:
    import torch

    assert out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB"))
    assert out_of_memory(RuntimeError("NCCL error: unhandled cuda error, Cuda failure 'out of memory'"))
    assert out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)"))
    assert not out_of_memory(MemoryError()) and not out_of_memory(RuntimeError("illegal memory access"))


FAKE_NVML = Path(__file__).resolve().parent / "fakenvml"
OOM = ("torch.OutOfMemoryError:CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
       "79.19 GiB of which 3.06 MiB is free. Including non-PyTorch memory, this process has 2.24 GiB memory in use. "
       "Of the allocated memory 1.9 GiB is allocated by PyTorch. See documentation for Memory Management")


def test_memory_taken_after_the_preflight_fails_once_naming_the_holder_and_skips_the_later_checks(
        tmp_path: Path) -> None:
    """One rank (`local --cpu --gpus 1`): an outside process holds GPU 0's memory as NVML lists it (the stand-in
    pynvml lists that process, as gpu_in_use is tested), and the rank's training steps raise CUDA's
    out-of-memory error from the third on (faultshim), as they would on the full GPU. DDP fails once, naming the
    pid, its command and MiB, "not this run's", at the step that ran; fsdp and storage are skipped with that reason
    instead of failing with torch's text each."""
    from tests.workload.faults import SHIM, run_local

    hold = tmp_path / "hold_gpu_memory.py"
    hold.write_text("import time\ntime.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, hold.name], cwd=tmp_path)
    try:
        fixture = tmp_path / "nvml.json"
        fixture.write_text(json.dumps({"sampleSeconds": 1, "base": {}, "scenarios": {"busy": {
            "gpus": 1, "samples": 1, "all": {"base": {"memory_used_mib": 79_000, "memory_total_mib": 81_559,
                                                      "processes": [[holder.pid, 76_000]]}}}}}))
        volume = tmp_path / "volume"
        volume.mkdir()
        env = {"FAKE_NVML": f"{fixture}:busy",
               "TEST_FAULT": f"acceptance_workload.checks.ddp.ddp:Trainer.step:0:2:{OOM}",
               "PYTHONPATH": os.pathsep.join([str(FAKE_NVML), str(SHIM), os.environ.get("PYTHONPATH", "")])}
        code, report, out = run_local(tmp_path, {"preflight": {"enabled": True}, "ddp": {"enabled": True},
                                                 "fsdp": {"enabled": True},
                                                 "storage": {"enabled": True}},
                                      "--gpus", "1", "--storage", str(volume), env=env)
    finally:
        holder.kill()
        holder.wait()
    assert code == 1 and report.error is None, out[-4000:]
    node = report.environment.hostnames[0]
    (failed,) = [r for r in report.results if not r.passed]
    assert (failed.check, failed.name, failed.node, failed.gpu) == ("ddp", "stage_error", node, 0), out[-3000:]
    assert failed.message == (
        f"rank 0 on node {node}, GPU 0, raised in stage ddp (step 'ddp baseline window 0 step 0'): "
        f"OutOfMemoryError: GPU 0 on node {node} ran out of memory: 79000 of 81559 MiB in use by pid {holder.pid} "
        f"({sys.executable} {hold.name}, 76000 MiB) at this error, not this run's: another process took this GPU's "
        "memory after the preflight. Stop it, or run the test on idle GPUs"), failed.message
    skipped = {s.check: s.reason for s in report.skipped if s.name == s.check}
    assert set(skipped) == {"fsdp", "storage"}, report.skipped
    assert all(f"pid {holder.pid}" in why and why.endswith("(in stage ddp): later checks on this GPU not run")
               for why in skipped.values()), skipped
    assert "See documentation" not in json.dumps([r.message for r in report.results])  # torch's text: the evidence
    assert "CUDA out of memory" in report.stage_errors[0].traceback


def test_a_step_label_is_the_step_that_ran_in_fsdp_too(tmp_path: Path) -> None:
    """fsdp measures with DDP's windows: a failure there names an fsdp step (it named 'ddp baseline warmup 0')."""
    from tests.workload.faults import run_local

    code, report, out = run_local(tmp_path, {"fsdp": {"enabled": True}}, "--gpus", "1",
                                  fault="acceptance_workload.checks.ddp.ddp:Trainer.step:0:0:RuntimeError:boom")
    assert code == 1, out[-3000:]
    (error,) = report.stage_errors
    assert (error.check, error.step, error.error) == ("fsdp", "fsdp baseline warmup 0", "RuntimeError: boom")


def test_this_ranks_own_process_is_never_blamed_in_whatever_pid_namespace_nvml_numbers_it(tmp_path: Path) -> None:
    """In a pod NVML lists the rank by its host pid, which the pod's /proc does not show: the pid NVML lists anew
    once the rank's CUDA context exists is the rank's (occupancy.Neighbours.note_own_pids), never a neighbour."""
    before = read(FakeNvml({0: (3, 81_559, [(9, 100)])}), 0, 0, proc=tmp_path)
    after = read(FakeNvml({0: (603, 81_559, [(9, 100), (31337, 500)])}), 0, 0, proc=tmp_path)
    assert new_pids(before, after) == {31337}
    full = read(FakeNvml({0: (81_000, 81_559, [(9, 100), (31337, 80_900)])}), 0, 0, proc=tmp_path)
    text = out_of_memory_message(full, before, {42} | new_pids(before, after), "n")
    assert "by pid 9 (100 MiB) at this error, not this run's" in text and "31337" not in text
