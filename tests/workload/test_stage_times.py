"""bench/stage_times.py reads where a run's time went off the progress lines' (+N s) stamps of a real run."""

from __future__ import annotations

import importlib.util

import pytest

from tests.workload.multiproc import REPO

spec = importlib.util.spec_from_file_location("stage_times", REPO / "bench" / "stage_times.py")
stage_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stage_times)


@pytest.fixture(scope="module")
def smoke_log(cpu_smoke_run) -> str:
    """The default `local --cpu` run's log (conftest.py)."""
    proc = cpu_smoke_run.proc
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def test_every_stage_of_a_smoke_run_is_timed_and_they_add_up(smoke_log: str) -> None:
    seconds = stage_times.stage_seconds(smoke_log)
    stages = [stage_times.LAUNCHER] + [n for n, _ in stage_times.STAGES if n != "end"]
    assert [s for s in stages if s not in seconds] == ["fsdp", "storage"]  # off by default
    assert all(seconds[s] >= 0 for s in stages if s in seconds)
    parts = sum(v for k, v in seconds.items() if k != stage_times.TOTAL)
    assert parts == pytest.approx(seconds[stage_times.TOTAL], abs=0.05)
    assert seconds[stage_times.TOTAL] > seconds["gpu"] > 0


def test_a_log_without_stamps_gives_nothing() -> None:
    assert stage_times.stage_seconds("[gpu-acceptance] preflight\nVERDICT: PASSED\n") == {}
