"""The shared volume (spec.storage): is it one filesystem on every node, how fast is it, does a checkpoint survive.

- Consistency: one process per node writes random bytes under its node's name;
  every node reads every other node's file and compares its SHA-256. Nodes are
  grouped by what they see; the nodes outside the largest group (a node-local
  mount, a stale cache, another volume) fail, named. With a tie (two nodes that
  see only themselves) no side can be called right, and every node fails.
- Throughput: per node, a sequential write then read of one file, with O_DIRECT
  where the filesystem allows it (else buffered, fsync'd, the page cache of the
  file dropped before the read; the result says which). Judged only against a
  floor the spec sets: none by default, measured and reported.
- Checkpoint: the FSDP model (checks.fsdp's shape) saved with
  torch.distributed.checkpoint to the volume and loaded into a freshly
  initialised model on every rank; each rank's shards must equal what was saved,
  bit for bit. Its size, seconds and GB/s are reported (results `checkpoint_*`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance_workload import rules
from acceptance_workload.checks import StorageCheck
from acceptance_workload.report import CheckResult, Skip, StorageDetail, StorageNode
from acceptance_workload.wire import parse_bytes

if TYPE_CHECKING:
    from acceptance_workload.config import WorkloadConfig
    from acceptance_workload.control import Watchdog
    from acceptance_workload.launch import Session

GB = 1e9
NO_VOLUME = "no shared volume: set spec.storage.volume (gpu-acceptance local: --storage DIR)"


# ---------------------------------------------------------------------------------------------- file I/O (pure-ish)
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def write_random(path: Path, size: int) -> str:
    """`size` random bytes at `path`, flushed to the filesystem; their SHA-256."""
    h = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        left = size
        while left > 0:
            chunk = os.urandom(min(left, 1 << 20))
            f.write(chunk)
            h.update(chunk)
            left -= len(chunk)
        f.flush()
        os.fsync(f.fileno())
    return h.hexdigest()


def _open(path: Path, flags: int, direct: bool) -> tuple[int, bool]:
    """A file descriptor, with O_DIRECT when asked and the filesystem takes it (tmpfs, some FUSE ones refuse)."""
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o644), True
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    return os.open(path, flags, 0o644), False


def sequential(path: Path, size: int, block: int, direct: bool) -> dict[str, Any]:
    """Write then read `size` bytes in `block`-sized calls; GB/s of each, and whether O_DIRECT was used."""
    blocks = max(1, size // block)
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
    buf.write(os.urandom(block))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, used_direct = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, direct)
    try:
        t0 = time.perf_counter()
        for _ in range(blocks):
            os.write(fd, buf)
        os.fsync(fd)
        write_s = time.perf_counter() - t0
    finally:
        os.close(fd)
    fd, read_direct = _open(path, os.O_RDONLY, used_direct)
    try:
        if not read_direct and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # read from the filesystem, not this node's cache
        t0 = time.perf_counter()
        while os.readv(fd, [buf]) > 0:
            pass
        read_s = time.perf_counter() - t0
    finally:
        os.close(fd)
        buf.close()
    moved = blocks * block
    return {"write_gbps": round(moved / write_s / GB, 3), "read_gbps": round(moved / read_s / GB, 3),
            "direct": used_direct and read_direct}


def read_others(root: Path, written: dict[str, str | None], me: str) -> tuple[list[str], list[str]]:
    """The nodes whose file this node reads back intact, and what is wrong with the others'."""
    sees, problems = [], []
    for node, digest in sorted(written.items()):
        if node == me or digest is None:
            continue
        path = root / f"{node}.bin"
        try:
            got = sha256_file(path)
        except FileNotFoundError:
            problems.append(f"{node}'s file is missing")
            continue
        except OSError as e:
            problems.append(f"{node}'s file cannot be read: {e.strerror or e}")
            continue
        if got == digest:
            sees.append(node)
        else:
            problems.append(f"{node}'s file differs (sha256 {got[:12]}, written {digest[:12]})")
    return sees, problems


def odd_nodes(views: dict[str, frozenset[str]]) -> set[str]:
    """The nodes outside the largest group of nodes that see the same files; all of them on a tie."""
    ranked = Counter(views.values()).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return set(views)
    return {n for n, seen in views.items() if seen != ranked[0][0]}


# ---------------------------------------------------------------------------------------------------- the stage
def _node_io(session: Session, check: StorageCheck, run_dir: Path, watchdog: Watchdog) -> list[Any] | None:
    """The node's first rank: write its file, read every other node's, then a sequential write and read.

    Every rank takes part in the exchanges; rank 0 gets each node's record (None from the other ranks).
    """
    control, me = session.control, session.env.node
    leader = session.env.local_rank == 0
    mine: dict[str, Any] = {"node": me, "digest": None, "problems": [], "sees": []}
    if leader:
        with watchdog.step("storage consistency write"):
            try:
                mine["digest"] = write_random(run_dir / "consistency" / f"{me}.bin",
                                              parse_bytes(check.consistency_bytes))
            except OSError as e:
                mine["problems"].append(f"cannot write its own file under {run_dir}: {e.strerror or e}")
    written = control.allgather("storage written", mine if leader else None)
    if not leader:
        return control.gather("storage read", None)
    digests = {w["node"]: w["digest"] for w in written if w}
    with watchdog.step("storage consistency read"):
        sees, problems = read_others(run_dir / "consistency", digests, me)
    mine.update(sees=sees, problems=mine["problems"] + problems)
    with watchdog.step("storage throughput"):
        try:
            mine.update(sequential(run_dir / "throughput" / f"{me}.dat", parse_bytes(check.throughput_bytes),
                                   parse_bytes(check.block_bytes), check.direct_io))
        except OSError as e:
            mine["problems"].append(f"sequential write and read failed: {e.strerror or e}")
        with contextlib.suppress(OSError):
            (run_dir / "throughput" / f"{me}.dat").unlink()
    return control.gather("storage read", mine)


def run_storage(session: Session, config: WorkloadConfig, watchdog: Watchdog,
                progress: Callable[[str], None] | None = None
                ) -> tuple[list[CheckResult], list[Skip], StorageDetail | None] | None:
    """Consistency and throughput per node, then the checkpoint on every rank; results on rank 0."""
    check = config.checks.storage
    if not config.storage_path:
        return ([], [Skip(check="storage", name="storage", reason=NO_VOLUME)], None) if session.is_root else None
    name = session.control.broadcast(
        "storage run", f"gpu-acceptance-{uuid.uuid4().hex[:12]}" if session.is_root else None)
    run_dir = Path(config.storage_path) / name
    records = _node_io(session, check, run_dir, watchdog)
    saved, skipped = None, []
    shared = session.control.broadcast("storage shared", None if records is None else not odd_nodes(
        {r["node"]: frozenset([*r["sees"], r["node"]]) for r in records if r}))
    if check.checkpoint and shared:
        from acceptance_workload import checkpoint

        if progress:
            progress("storage: consistency and throughput done, checkpoint round trip")
        saved = checkpoint.round_trip(session, config.checks.fsdp, run_dir / "checkpoint", watchdog)
    elif check.checkpoint:
        skipped.append(Skip(check="storage", name="checkpoint", reason="not attempted: the nodes do not see one "
                            "volume (storage_consistency), so no checkpoint could be read back on every node"))
    session.control.allgather("storage done", None)  # nobody reads the run's files any more
    if session.env.local_rank == 0:
        shutil.rmtree(run_dir, ignore_errors=True)
    if not session.is_root:
        return None
    assert records is not None
    nodes = [StorageNode(node=r["node"], sees=r["sees"], problems=r["problems"], write_gbps=r.get("write_gbps"),
                         read_gbps=r.get("read_gbps"), direct_io=r.get("direct")) for r in records if r]
    detail = StorageDetail(path=config.storage_path, nodes=nodes)
    results = judge_storage(check, detail, config.estimated_thresholds)
    if saved is not None:
        from acceptance_workload import checkpoint

        results += checkpoint.judge(check, saved, detail, config.estimated_thresholds)
    if progress:
        bad = sorted({r.node or "the job" for r in results if not r.passed})
        progress(f"storage: {len(nodes)} nodes, {len(results) - sum(not r.passed for r in results)}/{len(results)} "
                 "passed" + (f" (failed: {', '.join(bad)})" if bad else ""))
    return results, skipped, detail


def judge_storage(check: StorageCheck, detail: StorageDetail, estimated: Collection[str] = ()) -> list[CheckResult]:
    """Per node: consistency (outside the largest group of nodes that see the same files fails), GB/s."""
    views = {n.node: frozenset([*n.sees, n.node]) for n in detail.nodes if not n.problems or n.sees}
    odd = odd_nodes(views) | {n.node for n in detail.nodes if n.node not in views}
    out = []
    for n in detail.nodes:
        ok = n.node not in odd and not (len(detail.nodes) > 1 and not n.sees)
        seen = f"sees {len(n.sees)} of {len(detail.nodes) - 1} other nodes' files"
        why = "; ".join(n.problems[:4])
        out.append(rules.result("storage", "storage_consistency", 1.0 if ok else 0.0, check.thresholds, node=n.node,
                                message=f"node {n.node} {seen}" + (f": {why}" if why else "")
                               + ("" if ok else f"; it does not see the volume as the other nodes do "
                                  f"({detail.path})")))
        io = "O_DIRECT" if n.direct_io else "buffered, page cache dropped"
        for name, value in (("storage_write_gbps", n.write_gbps), ("storage_read_gbps", n.read_gbps)):
            out.append(rules.result(
                "storage", name, value, check.thresholds, estimated=estimated, node=n.node,
                message=f"node {n.node} sequential {name.split('_')[1]} "
                + (f"{value:.2f} GB/s ({io})" if value is not None else "not measured")))
    return out
