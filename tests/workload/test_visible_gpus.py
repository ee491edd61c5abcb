"""`gpu-acceptance local` counts and names the GPUs through NVML as CUDA would show them, without torch.

NVML is the driver's library; here a stand-in with the driver's answers for a machine of four GPUs (two
models) plays it, since CI has no GPU. What is asserted is the CUDA_VISIBLE_DEVICES reading.
"""

from __future__ import annotations

import pytest
from acceptance_workload.checks.preflight import occupancy

NAMES = ["NVIDIA H100 80GB HBM3"] * 3 + ["NVIDIA H200"]


class FakeNvml:
    class NVMLError(Exception):
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(NAMES)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if not 0 <= i < len(NAMES):
            raise self.NVMLError("Invalid Argument")
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        for i in range(len(NAMES)):
            if uuid == f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd":
                return i
        raise self.NVMLError("Not Found")

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:08d}-aaaa-bbbb-cccc-dddddddddddd"

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return NAMES[h].encode()  # older bindings give bytes


@pytest.mark.parametrize(("visible", "want"), [
    (None, NAMES),
    ("3,0", [NAMES[3], NAMES[0]]),
    ("1,7,2", [NAMES[1]]),  # CUDA stops at the first entry it cannot use
    ("", []),
    ("-1", []),
    ("GPU-00000002-aaaa-bbbb-cccc-dddddddddddd,0", [NAMES[2], NAMES[0]]),
    ("GPU-0000", None),  # a UUID prefix: CUDA takes it, NVML cannot resolve it: torch decides
    ("MIG-1234", None),
    ("0,0", None),
])
def test_names_follow_cuda_visible_devices(monkeypatch, visible: str | None, want: list[str] | None) -> None:
    monkeypatch.setattr(occupancy, "nvml_init", FakeNvml)
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert occupancy.visible_gpu_names(env) == want


def test_no_nvml_gives_no_answer_and_local_asks_torch(monkeypatch) -> None:
    from acceptance_workload import local

    def missing() -> None:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(occupancy, "nvml_init", missing)
    assert occupancy.visible_gpu_names({}) is None
    torch = pytest.importorskip("torch")
    assert local.visible_gpus() == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_local_counts_what_nvml_shows(monkeypatch) -> None:
    from acceptance_workload import local

    monkeypatch.setattr(occupancy, "nvml_init", FakeNvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert local.visible_gpus() == 2
    assert local.detected_profile(cpu=False) == "h100-sxm"
