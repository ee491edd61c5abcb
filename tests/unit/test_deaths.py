"""How a rank's end is put in words: signals from returncodes and container exit codes, the OOM killer's evidence."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from acceptance_workload.runtime import deaths


@pytest.mark.parametrize(("code", "said"), [
    (-9, "killed by SIGKILL (signal 9)"), (-11, "killed by SIGSEGV (signal 11)"), (-6, "killed by SIGABRT (signal 6)"),
    (3, "exited with code 3"), (-70, "killed by signal 70 (signal 70)"),
])
def test_a_returncode_in_words(code: int, said: str) -> None:
    assert deaths.describe_returncode(code) == said


@pytest.mark.parametrize(("code", "sig"), [(137, 9), (139, 11), (143, 15), (134, 6), (1, None), (128, None),
                                           (255, None)])
def test_a_container_exit_code_of_128_plus_n_is_signal_n(code: int, sig: int | None) -> None:
    assert deaths.exit_code_signal(code) == sig


def _proc(tmp_path: Path, cgroup: str) -> Path:
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(cgroup)
    return tmp_path / "proc"


def test_the_cgroup_is_found_on_v2_and_on_v1s_memory_tree(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    (root / "kubepods" / "pod1").mkdir(parents=True)
    (root / "kubepods" / "pod1" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    assert deaths.cgroup_dir(proc=_proc(tmp_path / "a", "0::/kubepods/pod1\n"), root=root) == root / "kubepods/pod1"
    v1 = "4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/\n"  # hybrid: v2 mounted, memory on v1
    (root / "memory" / "process_api" / "x").mkdir(parents=True)
    (root / "memory" / "process_api" / "x" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    found = deaths.cgroup_dir(proc=_proc(tmp_path / "b", v1), root=root)
    assert found == root / "memory" / "process_api" / "x"
    assert deaths.oom_kills(root / "kubepods" / "pod1") == 2 and deaths.oom_kills(found) == 1
    assert deaths.oom_kills(tmp_path / "nowhere") is None and deaths.oom_kills(None) is None


def test_a_sigkill_is_blamed_on_the_oom_killer_only_on_its_evidence(tmp_path: Path) -> None:
    events = tmp_path / "memory.events"
    events.write_text("oom 0\noom_kill 0\n")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,100,5,-;eth0: link up\n")
    watch = deaths.OomWatch(tmp_path, kmsg=kmsg)
    assert deaths.describe_death(-9, 123, watch) == "killed by SIGKILL (signal 9); pid 123"  # killed by someone
    events.write_text("oom 1\noom_kill 1\n")
    said = deaths.describe_death(-9, 123, watch)
    assert said.startswith("killed by SIGKILL (signal 9): the OOM killer acted in its cgroup")
    assert "oom_kill 0 -> 1" in said and said.endswith("; pid 123")
    kmsg.write_text("6,100,5,-;eth0: link up\n3,101,9,-;Out of memory: Killed process 123 (python) "
                    "total-vm:1kB, anon-rss:1kB\n")
    said = deaths.describe_death(-9, 123, watch)
    assert "the OOM killer killed it (kernel log: Out of memory: Killed process 123 (python)" in said
    assert deaths.describe_death(-9, 1234, deaths.OomWatch(tmp_path / "none", kmsg=kmsg)) == (
        "killed by SIGKILL (signal 9); pid 1234")  # another pid's line is not this one's
    assert deaths.describe_death(-int(signal.SIGSEGV), 123, watch) == "killed by SIGSEGV (signal 11); pid 123"


def test_ends_are_written_whole_and_read_by_rank(tmp_path: Path) -> None:
    deaths.record(tmp_path, 3, "killed by SIGKILL (signal 9); pid 7")
    (tmp_path / "1.part").write_text("half")  # one being written: not read
    assert deaths.read(tmp_path) == {3: "killed by SIGKILL (signal 9); pid 7"}
    assert deaths.read(None) == {} and deaths.read(tmp_path / "gone") == {}
