"""gpu_in_use: what NVML says is on a GPU before the workload touches it, judged and reported.

NVML is replaced by a stand-in with NVML's call shapes (no GPU here); the
GPU runs (bench/fault_suite.py gpu-in-use) hold a real GPU's memory from
another process.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from acceptance_workload.checks.preflight.occupancy import failure_facts, judge_in_use, nvml_target, read
from acceptance_workload.contract.checkmodels import PreflightThresholds

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
