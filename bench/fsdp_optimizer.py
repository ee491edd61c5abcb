"""Benchmark: where an FSDP2 step's time goes, by optimizer implementation (checks.fsdp's default model).

    torchrun --standalone --nproc-per-node 4 bench/fsdp_optimizer.py --out fsdp_optimizer.json

Times the default FSDP check's model (gpt 24 x 1024, batch 8 x 1024 tokens, bf16 compute) trained alone on
each GPU and fully sharded over all of them, with AdamW three ways: foreach (PyTorch's default), fused, and
one tensor at a time. For each: the median step and the median optimizer step alone (both synchronised),
per rank. Why: on 4x H100 the sharded model reached only 0.34-0.40 of the unsharded per-GPU throughput, and
FSDP2's parameters are DTensors, whose optimizer ops pay a dispatch per tensor on the CPU
(pytorch/pytorch#134191): the optimizer, not the GPUs or NVLink, would then decide the check's efficiency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workload"))


def timed(fn, device, n: int) -> list[float]:
    import torch

    out = []
    for _ in range(n):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(device)
        out.append(time.perf_counter() - t0)
    return out


def variant(name: str, model, wl, batch, device, opt_kwargs: dict, steps: int) -> dict:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, **opt_kwargs)

    def fwd_bwd():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = wl.loss(model, batch)
        loss.backward()

    def step():
        fwd_bwd()
        opt.step()

    for _ in range(3):
        step()
    steps_s = timed(step, device, steps)
    opt_s = []
    for _ in range(steps):
        fwd_bwd()
        opt_s += timed(opt.step, device, 1)
    return {"variant": name, "step_ms": round(1e3 * statistics.median(steps_s), 2),
            "optimizer_ms": round(1e3 * statistics.median(opt_s), 2),
            "tokens_per_s": round(wl.items_per_step / statistics.median(steps_s))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", default="fsdp_optimizer.json")
    args = p.parse_args()
    import torch
    import torch.distributed as dist
    from acceptance_workload.checks.fsdp import fsdp
    from acceptance_workload.checks.fsdp.spec import FsdpCheck
    from torch.distributed.device_mesh import init_device_mesh

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    check = FsdpCheck()
    wl = fsdp.workload(check)
    batch = wl.make_batch(torch.Generator().manual_seed(fsdp.SEED + rank), device)
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("shard",))
    rows = []
    for name, kwargs, sharded in [("unsharded foreach", {"foreach": True}, False),
                                  ("unsharded fused", {"fused": True}, False),
                                  ("fsdp foreach", {"foreach": True}, True),
                                  ("fsdp fused", {"fused": True}, True),
                                  ("fsdp one tensor at a time", {"foreach": False}, True)]:
        torch.manual_seed(fsdp.SEED)
        model = fsdp.sharded_model(wl, mesh, device) if sharded else wl.make_model().to(device)
        try:
            row = variant(name, model, wl, batch, device, kwargs, args.steps)
        except Exception as e:  # an implementation this torch cannot run with DTensors: say so, go on
            row = {"variant": name, "error": f"{type(e).__name__}: {e}"[:300]}
        row["rank"] = rank
        rows.append(row)
        del model
        torch.cuda.empty_cache()
        dist.barrier()
    every: list = [None] * world
    dist.all_gather_object(every, rows)
    if rank == 0:
        flat = [r for rs in every for r in rs]
        Path(args.out).write_text(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(device),
                                              "world": world, "rows": flat}, indent=1) + "\n")
        for r in flat:
            if r["rank"] == 0:
                print(r)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
