"""Benchmark: where does DDP throughput noise come from? Per-step timings of the one-GPU baseline and DDP.

    python bench/ddp_stability.py --out stability.json              # every GPU, default variants
    python bench/ddp_stability.py --gpus 4 --variants b8,b8-fused,b16-fused --windows 6 --steps 10

For each variant (batch size, fused optimizer) every rank builds a one-GPU
model and a DDP model and alternates timed windows of each (baseline window,
DDP window, baseline, ...), so slow drift (clocks, temperature, a neighbour on
the host) lands on both sides. Per step it records the host time to enqueue the
step (launch overhead: when it is close to the step time, the GPU waits for the
CPU) and the wall time to the end of the step. Rank 0 samples SM clock, power
and temperature of every GPU through NVML while it runs. Writes the raw numbers
as JSON and prints per-window throughput and efficiency tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workload"))

VARIANTS = {
    # name: (batch, fused optimizer)
    "b8": (8, False),
    "b8-fused": (8, True),
    "b16-fused": (16, True),
    "b32-fused": (32, True),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, help="GPUs to use (default: all visible)")
    p.add_argument("--variants", default="b8,b8-fused,b16-fused,b32-fused")
    p.add_argument("--windows", type=int, default=6)
    p.add_argument("--steps", type=int, default=10, help="timed steps per window")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cpu", action="store_true", help="gloo on CPU with a tiny model (checks the script only)")
    p.add_argument("--out", help="write the raw numbers as JSON here")
    return p.parse_args(argv)


def sampler(stop: threading.Event, samples: list[dict]) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as e:  # no NVML: no clock samples
        samples.append({"error": str(e)})
        return
    while not stop.wait(0.2):
        row = {"t": time.monotonic(), "gpus": []}
        for h in handles:
            row["gpus"].append({
                "sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                "temp_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                "util": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
            })
        samples.append(row)


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from acceptance_workload.checks.ddp import models
    from torch.nn.parallel import DistributedDataParallel

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    else:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
        torch.backends.cuda.matmul.allow_tf32 = True
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu",
                                                                                                   enabled=False)
    samples: list[dict] = []
    stop = threading.Event()
    if rank == 0 and not args.cpu:
        threading.Thread(target=sampler, args=(stop, samples), daemon=True).start()
    out: dict = {"rank": rank, "variants": {}}
    for name in args.variants.split(","):
        batch_size, fused = VARIANTS[name]
        cfg = models.TINY_GPT if args.cpu else models.GptConfig()
        if args.cpu:
            batch_size = 2
        gen = torch.Generator().manual_seed(1234 + rank)
        batch = models.gpt_batch(cfg, batch_size, gen, device)
        torch.manual_seed(1234)
        base = models.Gpt(cfg).to(device)
        torch.manual_seed(1234)
        ddp_kwargs = {"gradient_as_bucket_view": True}
        if device.type == "cuda":
            ddp_kwargs["device_ids"] = [device.index]
        ddp = DistributedDataParallel(models.Gpt(cfg).to(device), **ddp_kwargs)
        opt_kwargs = {"lr": 1e-3, "weight_decay": 0.0}
        if fused and device.type == "cuda":
            opt_kwargs["fused"] = True
        opts = {"baseline": torch.optim.AdamW(base.parameters(), **opt_kwargs),
                "ddp": torch.optim.AdamW(ddp.parameters(), **opt_kwargs)}
        mods = {"baseline": base, "ddp": ddp}

        def step(kind: str, opts: dict = opts, mods: dict = mods, batch: torch.Tensor = batch) -> None:
            opt = opts[kind]
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = models.gpt_loss(mods[kind], batch)
            loss.backward()
            opt.step()

        for kind in ("baseline", "ddp"):
            for _ in range(args.warmup):
                step(kind)
        sync()
        dist.barrier()
        rec: dict = {"batch": batch_size, "fused": fused, "tokens_per_step": batch_size * cfg.seq_len,
                     "windows": []}
        for _ in range(args.windows):
            window = {}
            for kind in ("baseline", "ddp"):
                dist.barrier()
                sync()
                enqueue, total = [], []
                t_start = time.monotonic()
                for _ in range(args.steps):
                    t0 = time.perf_counter()
                    step(kind)
                    t1 = time.perf_counter()
                    sync()
                    t2 = time.perf_counter()
                    enqueue.append(t1 - t0)
                    total.append(t2 - t0)
                window[kind] = {"start": t_start, "enqueue": enqueue, "step": total}
            rec["windows"].append(window)
        out["variants"][name] = rec
        del base, ddp, opts, mods, step
        if device.type == "cuda":
            torch.cuda.empty_cache()
    stop.set()
    if rank == 0:
        out["samples"] = samples
    Path(os.environ["STABILITY_DIR"], f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def summarize(ranks: list[dict]) -> dict:
    summary = {}
    for name in ranks[0]["variants"]:
        tokens = ranks[0]["variants"][name]["tokens_per_step"]
        windows = []
        for w in range(len(ranks[0]["variants"][name]["windows"])):
            per = [r["variants"][name]["windows"][w] for r in ranks]
            base = [tokens / statistics.median(p["baseline"]["step"]) for p in per]
            ddp = [tokens / statistics.median(p["ddp"]["step"]) for p in per]
            enq = statistics.median(x for p in per for x in p["baseline"]["enqueue"])
            stp = statistics.median(x for p in per for x in p["baseline"]["step"])
            windows.append({"baseline": base, "ddp": ddp, "efficiency": statistics.fmean(ddp) / statistics.fmean(base),
                            "baseline_enqueue_share": enq / stp})
        summary[name] = windows
    return summary


def print_summary(summary: dict) -> None:
    for name, windows in summary.items():
        print(f"== {name}")
        print("  win  baseline per GPU (k tok/s)            ddp mean  eff    enqueue/step")
        for i, w in enumerate(windows):
            base = " ".join(f"{x / 1e3:6.1f}" for x in w["baseline"])
            print(f"  {i:3d}  {base:36s}  {statistics.fmean(w['ddp']) / 1e3:6.1f}  {w['efficiency']:.3f}  "
                  f"{w['baseline_enqueue_share']:.2f}")
        effs = [w["efficiency"] for w in windows]
        print(f"  efficiency min/median/max {min(effs):.3f}/{statistics.median(effs):.3f}/{max(effs):.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.environ.get("STABILITY_DIR"):
        worker(args)
        return 0
    import tempfile

    if args.cpu:
        gpus = args.gpus or 2
    else:
        import torch

        gpus = args.gpus or torch.cuda.device_count()
    tmp = tempfile.mkdtemp(prefix="ddp-stability-")
    from acceptance_workload.runtime.launch import free_port

    port = free_port()
    procs = []
    for rank in range(gpus):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(gpus), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), STABILITY_DIR=tmp)
        procs.append(subprocess.Popen([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])],
                                      env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        print(f"ranks failed: exit codes {codes}", file=sys.stderr)
        return 1
    ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(gpus)]
    summary = summarize(ranks)
    print_summary(summary)
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "ranks": ranks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
