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
- Capacity and writability, before anything is written: every node measures
  the volume's free bytes and inodes (statvfs) and whether it can write there
  (read-only mount, permissions, then a 4 KiB file written, read back and
  removed). Fewer than the check needs (NEEDED below) fails `storage_capacity`
  on the node; a volume it cannot write fails `storage_writable`; either way no
  node writes anything more. A write that fails later (ENOSPC, EIO) fails
  `storage_writable` on its node with the path and errno, and the run's
  directory is removed whatever happened.
- Checkpoint: the FSDP model (checks.fsdp's shape) saved with
  torch.distributed.checkpoint to the volume and loaded into a freshly
  initialised model on every rank; each rank's shards must equal what was saved,
  bit for bit. Its size, seconds and GB/s are reported (results `checkpoint_*`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import mmap
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.storage.checkpoint import os_error_text
from acceptance_workload.checks.storage.rules import RULES
from acceptance_workload.checks.storage.spec import StorageCheck
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.wire import parse_bytes
from acceptance_workload.report.model import Skip, StorageDetail, StorageNode

if TYPE_CHECKING:
    from acceptance_workload.contract.config import RunConfig
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.watchdog import Watchdog

GB = 1e9
PROBE_BYTES = 4096
# What the check needs free on the volume: every node's consistency and throughput files, the checkpoint (the FSDP
# model's state dict in float32, CHECKPOINT_OVERHEAD for torch.distributed.checkpoint's files and metadata) and
# MARGIN_BYTES for the filesystem's own use and other writers; inodes: two files a node, two a rank, some directories.
CHECKPOINT_OVERHEAD = 1.25
MARGIN_BYTES = 64 << 20
MARGIN_INODES = 16
GATES = ("storage_writable", "storage_capacity")  # judged before anything is written; failed: nothing is
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


def gated(results: Iterable[CheckResult]) -> bool:
    """Whether the volume failed a gate (GATES), so that the check wrote nothing and measured nothing else."""
    return any(r.check == "storage" and r.name in GATES and not r.passed for r in results)


def human(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def checkpoint_size(config: RunConfig) -> int:
    """Bytes of the checkpoint's state dict (float32), counted on a model built on the meta device (no memory)."""
    import torch

    from acceptance_workload.checks.fsdp import fsdp

    with torch.device("meta"):
        model = fsdp.workload(config.checks.fsdp).make_model()
    return sum(t.numel() * 4 for t in model.state_dict().values())


def needed(config: RunConfig, nodes: int, world: int) -> tuple[int, int, str]:
    """Bytes and inodes the check needs free, and the sum in words (storage_capacity's message)."""
    check = config.checks.storage
    consistency, throughput = parse_bytes(check.consistency_bytes), parse_bytes(check.throughput_bytes)
    ckpt = int(checkpoint_size(config) * CHECKPOINT_OVERHEAD) if check.checkpoint else 0
    total = nodes * (consistency + throughput) + ckpt + MARGIN_BYTES
    words = (f"{nodes} node(s) x ({human(consistency)} consistency + {human(throughput)} throughput file)"
             + (f" + checkpoint {human(ckpt)}" if ckpt else "") + f" + margin {human(MARGIN_BYTES)}")
    return total, 2 * nodes + (2 * world if ckpt else 0) + MARGIN_INODES, words


def probe(root: Path, run_dir: Path, need_bytes: int, need_inodes: int) -> dict[str, Any]:
    """This node's view of the volume before any write: free bytes and inodes, and why it cannot write (None: it
    can). The 4 KiB probe file is written only when there is room for the check, so a full volume is not touched."""
    out: dict[str, Any] = {"free_bytes": None, "free_inodes": None, "write_error": None}
    try:
        st = os.statvfs(root)
    except OSError as e:
        out["write_error"] = f"cannot read the filesystem's size: {os_error_text(e)}"
        return out
    out["free_bytes"] = st.f_bavail * st.f_frsize
    out["free_inodes"] = st.f_favail if st.f_files else None  # some filesystems have no inode count
    if st.f_flag & os.ST_RDONLY:
        out["write_error"] = f"{root} is mounted read-only"
    elif not os.access(root, os.W_OK):
        out["write_error"] = f"{root} is not writable by uid {os.getuid()} (permissions)"
    elif out["free_bytes"] >= need_bytes and (out["free_inodes"] is None or out["free_inodes"] >= need_inodes):
        path = run_dir / "probe" / f"{uuid.uuid4().hex}.bin"
        try:
            digest = write_random(path, PROBE_BYTES)
            if sha256_file(path) != digest:
                out["write_error"] = f"{path} read back differs from what was written"
        except OSError as e:
            out["write_error"] = os_error_text(e)
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
    return out


def judge_gate(detail: StorageDetail, need_words: str, check: StorageCheck) -> list[CheckResult]:
    """storage_writable and storage_capacity per node (free / needed, the smaller of bytes and inodes)."""
    out = []
    need, inodes = detail.needed_bytes or 0, detail.needed_inodes or 0
    for n in detail.nodes:
        ok = n.write_error is None
        out.append(RULES.result("storage_writable", 1.0 if ok else 0.0, check.thresholds, node=n.node,
            observed="writable" if ok else "not writable", expected="writable",
            message=f"node {n.node} can write {detail.path}" if ok else
            f"node {n.node} cannot write {detail.path}: {n.write_error}"))
        if n.free_bytes is None:
            continue
        ratios = [n.free_bytes / need] + ([n.free_inodes / inodes] if n.free_inodes is not None else [])
        value = math.floor(min(ratios) * 10_000) / 10_000
        inode_text = "" if n.free_inodes is None else f"; {n.free_inodes:,} inodes free, {inodes:,} needed"
        out.append(RULES.result("storage_capacity", value, check.thresholds, node=n.node,
            message=f"node {n.node}: {human(n.free_bytes)} ({n.free_bytes:,} bytes) free on {detail.path}, the check "
            f"needs {human(need)} ({need:,} bytes: {need_words}){inode_text}"
            + ("" if value >= 1 else "; nothing was written")))
    return out


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
            path = run_dir / "consistency" / f"{me}.bin"
            try:
                mine["digest"] = write_random(path, parse_bytes(check.consistency_bytes))
            except OSError as e:
                mine["problems"].append(f"cannot write its own file: {write_failed(path, e)}")
                mine["write_error"] = write_failed(path, e)
                with contextlib.suppress(OSError):
                    path.unlink()
    written = control.allgather("storage written", mine if leader else None)
    if not leader:
        return control.gather("storage read", None)
    digests = {w["node"]: w["digest"] for w in written if w}
    with watchdog.step("storage consistency read"):
        sees, problems = read_others(run_dir / "consistency", digests, me)
    mine.update(sees=sees, problems=mine["problems"] + problems)
    with watchdog.step("storage throughput"):
        path = run_dir / "throughput" / f"{me}.dat"
        try:
            mine.update(sequential(path, parse_bytes(check.throughput_bytes), parse_bytes(check.block_bytes),
                                   check.direct_io))
        except OSError as e:
            mine["problems"].append(f"sequential write and read failed: {write_failed(path, e)}")
            mine["write_error"] = mine.get("write_error") or write_failed(path, e)
        with contextlib.suppress(OSError):
            path.unlink()
    return control.gather("storage read", mine)


def write_failed(path: Path, e: OSError) -> str:
    """'write failed: ENOSPC (errno 28): No space left on device: /v/x.bin'."""
    return f"write failed: {os_error_text(e)}" + ("" if e.filename else f": {path}")


def _gate(session: Session, config: RunConfig, run_dir: Path, watchdog: Watchdog) -> list[dict[str, Any]]:
    """Every node's first rank probes the volume (free bytes, inodes, writability); every rank gets the records."""
    need, inodes, words = needed(config, len(session.nodes()), session.world_size)
    mine = None
    if session.env.local_rank == 0:
        with watchdog.step("storage capacity"):
            mine = {"node": session.env.node, **probe(Path(config.storage_path or "."), run_dir, need, inodes)}
    records = [r for r in session.control.allgather("storage capacity", mine) if r]
    for r in records:
        r.update(need=need, need_inodes=inodes, need_words=words)
    return records


def gate_failures(records: list[dict[str, Any]]) -> list[str]:
    """The nodes that cannot take the check's writes: too little room, or a volume they cannot write."""
    return [r["node"] for r in records if r["write_error"] is not None or (r["free_bytes"] or 0) < r["need"]
            or (r["free_inodes"] is not None and r["free_inodes"] < r["need_inodes"])]


def run_storage(session: Session, config: RunConfig, watchdog: Watchdog,
                progress: Callable[[str], None] | None = None
                ) -> tuple[list[CheckResult], list[Skip], StorageDetail | None] | None:
    """The volume's room and writability on every node; then, where both hold, consistency and throughput per
    node and the checkpoint on every rank; results on rank 0. The run's directory is removed whatever happens."""
    if not config.storage_path:
        return ([], [Skip(check="storage", name="storage", reason=NO_VOLUME)], None) if session.is_root else None
    name = session.control.broadcast(
        "storage run", f"gpu-acceptance-{uuid.uuid4().hex[:12]}" if session.is_root else None)
    run_dir = Path(config.storage_path) / name
    try:
        gate = _gate(session, config, run_dir, watchdog)
        return _measure(session, config, run_dir, watchdog, gate, progress)
    finally:
        if session.env.local_rank == 0:
            shutil.rmtree(run_dir, ignore_errors=True)


def _measure(session: Session, config: RunConfig, run_dir: Path, watchdog: Watchdog, gate: list[dict[str, Any]],
             progress: Callable[[str], None] | None
             ) -> tuple[list[CheckResult], list[Skip], StorageDetail | None] | None:
    check = config.checks.storage
    blocked = gate_failures(gate)
    if blocked:
        if progress:
            progress(f"storage: {', '.join(blocked)} cannot take the check's writes: nothing written")
        return _gate_only(session, config, gate, blocked)
    records = _node_io(session, check, run_dir, watchdog)
    saved, skipped = None, []
    shared = session.control.broadcast("storage shared", None if records is None else not odd_nodes(
        {r["node"]: frozenset([*r["sees"], r["node"]]) for r in records if r}))
    if check.checkpoint and shared:
        from acceptance_workload.checks.storage import checkpoint

        if progress:
            progress("storage: consistency and throughput done, checkpoint round trip")
        saved = checkpoint.round_trip(session, config.checks.fsdp, run_dir / "checkpoint", watchdog)
    elif check.checkpoint:
        skipped.append(Skip(check="storage", name="checkpoint", reason="not attempted: the nodes do not see one "
                            "volume (storage_consistency), so no checkpoint could be read back on every node"))
    session.control.allgather("storage done", None)  # nobody reads the run's files any more
    if not session.is_root:
        return None
    assert records is not None
    probed = {g["node"]: g for g in gate}
    nodes = [StorageNode(node=r["node"], sees=r["sees"], problems=r["problems"], write_gbps=r.get("write_gbps"),
                         read_gbps=r.get("read_gbps"), direct_io=r.get("direct"),
                         free_bytes=probed.get(r["node"], {}).get("free_bytes"),
                         free_inodes=probed.get(r["node"], {}).get("free_inodes"),
                         write_error=r.get("write_error")) for r in records if r]
    detail = StorageDetail(path=config.storage_path or "", nodes=nodes, needed_bytes=gate[0]["need"],
                           needed_inodes=gate[0]["need_inodes"])
    results = judge_gate(detail, gate[0]["need_words"], check)
    results += judge_storage(check, detail, config.estimated_thresholds)
    if saved is not None:
        from acceptance_workload.checks.storage import checkpoint

        results += checkpoint.judge(check, saved, detail, config.estimated_thresholds)
    if progress:
        bad = sorted({r.node or "the job" for r in results if not r.passed})
        progress(f"storage: {len(nodes)} nodes, {len(results) - sum(not r.passed for r in results)}/{len(results)} "
                 "passed" + (f" (failed: {', '.join(bad)})" if bad else ""))
    return results, skipped, detail


def _gate_only(session: Session, config: RunConfig, gate: list[dict[str, Any]], blocked: list[str]
               ) -> tuple[list[CheckResult], list[Skip], StorageDetail] | None:
    """The volume failed storage_capacity or storage_writable somewhere: its results, and why nothing else ran."""
    if not session.is_root:
        return None
    nodes = [StorageNode(node=g["node"], free_bytes=g["free_bytes"], free_inodes=g["free_inodes"],
                         write_error=g["write_error"]) for g in gate]
    detail = StorageDetail(path=config.storage_path or "", nodes=nodes, needed_bytes=gate[0]["need"],
                           needed_inodes=gate[0]["need_inodes"])
    reason = (f"not attempted: {', '.join(blocked)} cannot take the check's writes on {detail.path} "
              "(storage_capacity, storage_writable): nothing was written")
    skipped = [Skip(check="storage", name=name, reason=reason)
               for name in ("storage_consistency", "storage_throughput", "checkpoint")]
    return judge_gate(detail, gate[0]["need_words"], config.checks.storage), skipped, detail


def judge_storage(check: StorageCheck, detail: StorageDetail, estimated: Collection[str] = ()) -> list[CheckResult]:
    """Per node: consistency (outside the largest group of nodes that see the same files fails), GB/s."""
    views = {n.node: frozenset([*n.sees, n.node]) for n in detail.nodes if not n.problems or n.sees}
    odd = odd_nodes(views) | {n.node for n in detail.nodes if n.node not in views}
    out = []
    for n in detail.nodes:
        ok = n.node not in odd and not (len(detail.nodes) > 1 and not n.sees)
        seen = f"sees {len(n.sees)} of {len(detail.nodes) - 1} other nodes' files"
        why = "; ".join(n.problems[:4])
        out.append(RULES.result("storage_consistency", 1.0 if ok else 0.0, check.thresholds, node=n.node,
                                message=f"node {n.node} {seen}" + (f": {why}" if why else "")
                               + ("" if ok else f"; it does not see the volume as the other nodes do "
                                  f"({detail.path})")))
        io = "O_DIRECT" if n.direct_io else "buffered, page cache dropped"
        for name, value in (("storage_write_gbps", n.write_gbps), ("storage_read_gbps", n.read_gbps)):
            out.append(RULES.result(name, value, check.thresholds, estimated=estimated, node=n.node,
                message=f"node {n.node} sequential {name.split('_')[1]} "
                + (f"{value:.2f} GB/s ({io})" if value is not None else "not measured")))
    return out
