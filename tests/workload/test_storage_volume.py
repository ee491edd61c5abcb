"""The shared volume judged before it is used (issue 31): room, writability, and a write that fails.

`gpu-acceptance local --cpu --storage DIR` with real gloo processes, DIR a small or read-only tmpfs mounted by
the test (the CI runs as root). Where this machine does not allow a mount, the same failures come from outside
the workload through tests/workload/faultshim: the volume's writes fail with ENOSPC or EROFS.
"""

from __future__ import annotations

from pathlib import Path

from tests.workload.faults import run_local, tmpfs

STORAGE = {"storage": {"enabled": True, "checkpoint": False}}


def test_a_volume_too_small_fails_storage_capacity_without_writing(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    with tmpfs(volume, "4m") as mounted:
        fault = None if mounted else "os:fsync:0:0:ENOSPC:x"  # no mount here: every write runs out of room
        code, report, out = run_local(tmp_path, STORAGE, "--storage", str(volume), fault=fault)
        left = list(volume.iterdir())
    assert code == 1 and not report.passed and report.error is None, out[-4000:]
    node = report.environment.hostnames[0]
    failed = [r for r in report.results if not r.passed]
    assert report.failed_nodes == [node] and left == []  # nothing was left on the volume
    if mounted:
        [capacity] = failed
        assert (capacity.name, capacity.node) == ("storage_capacity", node)
        assert capacity.message.startswith(f"node {node}: 4.0 MiB (4,194,304 bytes) free on {volume}, the check "
                                           "needs 80.1 MiB (83,951,616 bytes: 1 node(s) x (64.0 KiB consistency + "
                                           "16.0 MiB throughput file) + margin 64.0 MiB)")
        assert capacity.message.endswith("nothing was written") and capacity.value < 0.06
        assert {s.name for s in report.skipped} == {"storage_consistency", "storage_throughput", "checkpoint"}
        assert report.storage is not None and report.storage.needed_bytes == 83_951_616
    else:
        [writable] = failed
        assert writable.name == "storage_writable" and "ENOSPC (errno 28)" in writable.message


def test_a_read_only_volume_fails_storage_writable(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    with tmpfs(volume, "128m", read_only=True) as mounted:
        fault = None if mounted else "acceptance_workload.checks.storage.storage:write_random:0:0:EROFS:x"
        code, report, out = run_local(tmp_path, STORAGE, "--storage", str(volume), fault=fault)
    assert code == 1 and report.error is None, out[-4000:]
    node = report.environment.hostnames[0]
    [writable] = [r for r in report.results if not r.passed]
    assert (writable.name, writable.node, writable.value) == ("storage_writable", node, 0.0)
    why = f"{volume} is mounted read-only" if mounted else "EROFS (errno 30)"
    assert writable.message.startswith(f"node {node} cannot write {volume}: ") and why in writable.message
    assert report.failed_nodes == [node]


def test_a_write_that_fails_on_the_volume_is_named_with_path_and_errno_and_removed(tmp_path: Path) -> None:
    """Room enough when judged, then ENOSPC on the second fsync (the node's consistency file)."""
    volume = tmp_path / "volume"
    volume.mkdir()
    code, report, out = run_local(tmp_path, STORAGE, "--storage", str(volume), fault="os:fsync:0:1:ENOSPC:x")
    assert code == 1 and report.error is None, out[-4000:]
    node = report.environment.hostnames[0]
    writable = next(r for r in report.results if r.name == "storage_writable")
    assert not writable.passed and writable.node == node
    assert "write failed: ENOSPC (errno 28): No space left on device: " in writable.message
    assert f"{volume}/gpu-acceptance-" in writable.message and writable.message.endswith(f"/consistency/{node}.bin")
    assert list(volume.iterdir()) == []
