"""A distributed checkpoint of the FSDP model on the shared volume: saved, loaded into a fresh model, compared.

torch.distributed.checkpoint writes each rank's shards (one replica's, with
hybrid sharding) as files under one directory and reads them back resharded to
whatever the loading model's mesh is; here the same mesh, into a model
initialised from another seed, so a load that read nothing (or the wrong bytes)
cannot pass. Every rank compares each of its shards with the trained model's,
exactly. Times are wall seconds from a barrier before to a barrier after, so
the slowest rank's I/O decides, as in a real job's checkpoint.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.fsdp.spec import FsdpCheck
from acceptance_workload.checks.storage.rules import RULES
from acceptance_workload.checks.storage.spec import StorageCheck
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import StorageDetail

if TYPE_CHECKING:
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.watchdog import Watchdog

GB = 1e9
FRESH_SEED = 999


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def os_error_text(e: OSError) -> str:
    """'ENOSPC (errno 28): No space left on device: /mnt/v/x.bin': the errno's name, number, text and the path."""
    name = errno.errorcode.get(e.errno or 0, "")
    head = f"{name} (errno {e.errno})" if name else type(e).__name__
    where = f": {e.filename}" if e.filename else ""
    return f"{head}: {e.strerror or e}{where}"


def failure_text(error: BaseException) -> str:
    """What went wrong, per rank where torch.distributed.checkpoint gathered the ranks' failures ('rank 0: OSError:
    [Errno 28] No space left on device'), else the error's type and first line; errno names where there is one."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        parts = []
        for rank, pair in sorted(failures.items()):
            exc = pair[0] if isinstance(pair, tuple) and pair else pair
            parts.append(f"rank {rank}: " + (os_error_text(exc) if isinstance(exc, OSError) else
                                             f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"))
        return "; ".join(parts)[:600]
    if isinstance(error, OSError):
        return os_error_text(error)
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}"


def _same(a: Any, b: Any) -> bool:
    import torch

    a = a.to_local() if hasattr(a, "to_local") else a
    b = b.to_local() if hasattr(b, "to_local") else b
    return a.shape == b.shape and bool(torch.equal(a.detach(), b.detach()))


def round_trip(session: Session, fsdp_check: FsdpCheck, path: Path, watchdog: Watchdog) -> dict[str, Any] | None:
    """Save a trained FSDP model to `path`, load it into a fresh one; per-rank matches and timings on rank 0."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from acceptance_workload.checks.ddp.ddp import Trainer
    from acceptance_workload.checks.fsdp import fsdp

    wl = fsdp.workload(fsdp_check)
    device = session.device
    token = torch.zeros(1, device=device)

    def barrier() -> None:
        dist.all_reduce(token)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with watchdog.step("checkpoint model"):
        mesh = fsdp.device_mesh(session, fsdp.replicas(session))
        batch = wl.make_batch(torch.Generator().manual_seed(fsdp.SEED + session.rank), device)
        trained = Trainer(fsdp.sharded_model(wl, mesh, device), wl, batch, device)
        trained.step()  # not the initial weights: a load that reinitialised would still differ
        barrier()
    fresh = fsdp.sharded_model(wl, mesh, device, seed=FRESH_SEED, same_as_cpu=False)  # only differs from `trained`
    state = {"model": fresh.state_dict()}
    save_s = load_s = 0.0
    try:  # dcp raises on every rank when one rank's I/O fails
        with watchdog.step("checkpoint save"):
            t0 = time.perf_counter()
            dcp.save({"model": trained.model.state_dict()}, checkpoint_id=os.fspath(path))
            barrier()
            save_s = time.perf_counter() - t0
        with watchdog.step("checkpoint load"):
            t0 = time.perf_counter()
            dcp.load(state, checkpoint_id=os.fspath(path))
            barrier()
            load_s = time.perf_counter() - t0
        fresh.load_state_dict(state["model"])
        error = None
    except BaseException as e:  # dcp's CheckpointException is a BaseException: caught, or it ends the process
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        error = f"{'save' if not save_s else 'load'} under {path} failed: {failure_text(e)}"
    want, got = trained.model.state_dict(), fresh.state_dict()
    wrong = [error] if error else [k for k in want if k not in got or not _same(want[k], got[k])]
    size = directory_bytes(path) if session.is_root else None
    info = session.ranks[session.rank]
    mine = {"node": info.node, "gpu": info.gpu, "wrong": wrong[:5], "wrong_count": len(wrong), "tensors": len(want),
            "save_s": save_s, "load_s": load_s}
    gathered = session.control.gather("checkpoint", mine)
    del trained, fresh, state, want, got
    if gathered is None:
        return None
    return {"ranks": gathered, "bytes": size}


def judge(check: StorageCheck, saved: dict[str, Any], detail: StorageDetail,
          estimated: Collection[str] = ()) -> list[CheckResult]:
    """checkpoint_match per rank (exact), the save and load GB/s and seconds of the job (floors from the spec)."""
    ranks, size = saved["ranks"], saved["bytes"] or 0
    save_s = max(r["save_s"] for r in ranks)
    load_s = max(r["load_s"] for r in ranks)
    detail.checkpoint_bytes, detail.checkpoint_save_seconds = size, round(save_s, 3)
    detail.checkpoint_load_seconds = round(load_s, 3)
    out = []
    for rank, r in enumerate(ranks):
        ok = r["wrong_count"] == 0
        out.append(RULES.result("checkpoint_match", 1.0 if ok else 0.0, check.thresholds, node=r["node"], gpu=r["gpu"],
            message=f"rank {rank}: {r['tensors']} tensors loaded back exactly" if ok else
            f"rank {rank}: {r['wrong_count']} of {r['tensors']} tensors differ after the load or it failed "
            f"({', '.join(r['wrong'])})"))
    for name, value in (("checkpoint_save_gbps", size / save_s / GB if save_s > 0 else None),
                        ("checkpoint_load_gbps", size / load_s / GB if load_s > 0 else None),
                        ("checkpoint_save_seconds", save_s), ("checkpoint_load_seconds", load_s)):
        value = None if value is None or not size else round(value, 4)
        out.append(RULES.result(name, value, check.thresholds, estimated=estimated,
            message=f"distributed checkpoint of {size / GB:.3f} GB: saved in {save_s:.2f} s, loaded in "
            f"{load_s:.2f} s" if size else "the checkpoint directory is empty: nothing was saved"))
    return out

