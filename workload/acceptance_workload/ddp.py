"""Synthetic-data training: each GPU alone, then all of them under DistributedDataParallel.

Phase 1 trains a one-GPU baseline on every rank at once (no communication), so
a slow GPU shows up by name; phase 2 trains the same model under DDP. Scaling
efficiency = DDP throughput / (N x mean one-GPU throughput); the straggler
ratio = median one-GPU throughput / the slowest one's. The loss must fall:
the batch is fixed and learnable, so a run whose gradients are wrong (a broken
all_reduce, NaNs) does not learn and fails.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks import DdpCheck
from acceptance_workload.report import CheckResult, DdpDetail, DdpRank, judge

if TYPE_CHECKING:
    from acceptance_workload.config import WorkloadConfig
    from acceptance_workload.control import Watchdog
    from acceptance_workload.launch import Session

MIN_LOSS_DECREASE = 0.01  # the loss must fall by at least 1% from the first steps to the last
LOSS_WINDOW = 3  # steps averaged at each end
SEED = 1234


@dataclass
class Workload:
    """A model with its synthetic batch, loss and optimizer."""

    name: str
    unit: str  # tokens/s or images/s
    items_per_step: int
    make_model: Callable[[], Any]
    make_batch: Callable[[Any, Any], Any]  # (generator, device) -> batch
    loss: Callable[[Any, Any], Any]  # (model, batch) -> scalar
    make_optimizer: Callable[[Any], Any]


def workload_for(check: DdpCheck, mode: str) -> Workload:
    import torch

    from acceptance_workload import models

    batch = check.effective_batch_size()
    tiny = mode == "cpu-smoke"
    if check.model == "gpt":
        cfg = models.TINY_GPT if tiny else models.GptConfig(seq_len=check.seq_len)
        if tiny and check.seq_len < cfg.seq_len:
            cfg = models.GptConfig(cfg.vocab, cfg.layers, cfg.d_model, cfg.heads, check.seq_len)
        return Workload(
            name="gpt", unit="tokens/s", items_per_step=batch * cfg.seq_len,
            make_model=lambda: models.Gpt(cfg),
            make_batch=lambda g, d: models.gpt_batch(cfg, batch, g, d),
            loss=models.gpt_loss,
            make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0),
        )
    size, classes = (32, 10) if tiny else (224, 1000)
    return Workload(
        name="resnet50", unit="images/s", items_per_step=batch,
        make_model=(models.tiny_resnet if tiny else models.resnet50),
        make_batch=lambda g, d: models.image_batch(batch, size, classes, g, d),
        loss=lambda m, b: torch.nn.functional.cross_entropy(m(b[0]).float(), b[1]),
        make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
    )


@dataclass
class Phase:
    step_seconds: list[float]
    losses: list[float] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(self.step_seconds)

    def throughput(self, items_per_step: int) -> float:
        """Items per second at the median step time.

        The median, not the mean: one step stalled by something outside the
        node (a shared host's hiccup) must not decide the verdict, while a GPU or
        link that is slow on every step still shows in every step.
        """
        return items_per_step / statistics.median(self.step_seconds)


def train(model: Any, wl: Workload, batch: Any, steps: int, warmup: int, device: Any, watchdog: Watchdog,
          label: str) -> Phase:
    """warmup + timed steps on a fixed batch; losses of every step (warmup included)."""
    import torch

    opt = wl.make_optimizer(model)
    amp = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext())
    losses = []

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = wl.loss(model, batch)
        loss.backward()
        opt.step()
        losses.append(loss.detach())

    for i in range(warmup):
        with watchdog.step(f"ddp {label} warmup {i}"):
            step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    sync(device)
    times = []
    for i in range(steps):
        with watchdog.step(f"ddp {label} step {i}"):
            t0 = time.perf_counter()
            step()
            sync(device)  # the step's kernels are done; DDP already waited for its all-reduce in backward
            times.append(time.perf_counter() - t0)
    return Phase(step_seconds=times, losses=[float(x) for x in torch.stack(losses).float().cpu()])


def run_ddp(session: Session, config: WorkloadConfig, watchdog: Watchdog,
            progress: Callable[[str], None] | None = None) -> tuple[list[CheckResult], DdpDetail] | None:
    """Both phases on every rank; results and detail on rank 0 (None elsewhere)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    check = config.checks.ddp
    wl = workload_for(check, config.mode)
    device = session.device
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    gen = torch.Generator().manual_seed(SEED + session.rank)
    batch = wl.make_batch(gen, device)

    torch.manual_seed(SEED)
    model = wl.make_model().to(device)
    base = train(model, wl, batch, check.steps, check.warmup_steps, device, watchdog, "baseline")
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    baseline = base.throughput(wl.items_per_step)
    if progress and session.is_root:
        progress(f"ddp {wl.name}: one-GPU baseline {baseline:,.0f} {wl.unit} on rank 0")

    torch.manual_seed(SEED)
    ddp_kwargs: dict[str, Any] = {"gradient_as_bucket_view": True}
    if device.type == "cuda":
        ddp_kwargs["device_ids"] = [device.index]
    with watchdog.step("ddp wrap model"):
        model = DistributedDataParallel(wl.make_model().to(device), **ddp_kwargs)
    run = train(model, wl, batch, check.steps, check.warmup_steps, device, watchdog, "ddp")
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    mine = {"baseline": baseline, "ddp": run.throughput(wl.items_per_step), "losses": run.losses}
    gathered = session.control.gather("ddp", mine)
    if gathered is None:
        return None
    detail = DdpDetail(
        model=wl.name, unit=wl.unit, world_size=session.world_size, batch_size=check.effective_batch_size(),
        ranks=[DdpRank(rank=i.rank, node=i.node, gpu=i.gpu, baseline_throughput=round(g["baseline"], 2),
                       ddp_throughput=round(g["ddp"], 2)) for i, g in zip(session.ranks, gathered, strict=True)],
    )
    losses = [statistics.fmean(step) for step in zip(*(g["losses"] for g in gathered), strict=True)]
    results = judge_ddp(check, detail, losses)
    if progress:
        progress(f"ddp {wl.name}: " + "; ".join(r.message for r in results if r.node is None))
    return results, detail


def judge_ddp(check: DdpCheck, detail: DdpDetail, losses: list[float]) -> list[CheckResult]:
    """Throughput, scaling efficiency, straggler and loss results from the gathered numbers."""
    th = check.thresholds
    unit = detail.unit
    n = detail.world_size
    out: list[CheckResult] = []

    def add(name: str, value: float | None, threshold: float | None, comparison: str, message: str,
            node: str | None = None, gpu: int | None = None, u: str = "") -> None:
        comp = comparison if threshold is not None else "info"
        out.append(CheckResult(check="ddp", name=name, value=value, unit=u, threshold=threshold, comparison=comp,
                               passed=judge(value, threshold, comp), message=message, node=node, gpu=gpu))

    per_gpu = sum(r.ddp_throughput for r in detail.ranks) / n
    base = [r.baseline_throughput for r in detail.ranks]
    mean_base = statistics.fmean(base)
    add("throughput_per_gpu", round(per_gpu, 2), th.min_throughput_per_gpu, "ge",
        f"DDP {per_gpu:,.0f} {unit} per GPU over {n} GPUs", u=unit)
    for r in detail.ranks:
        add("gpu_throughput", r.baseline_throughput, th.min_throughput_per_gpu, "ge",
            f"GPU {r.gpu} on node {r.node} alone: {r.baseline_throughput:,.0f} {unit}", node=r.node, gpu=r.gpu,
            u=unit)
    efficiency = per_gpu / mean_base if mean_base > 0 else None
    add("scaling_efficiency", None if efficiency is None else round(efficiency, 4), th.min_scaling_efficiency,
        "ge", f"scaling efficiency {efficiency:.3f} (DDP {per_gpu:,.0f} vs one GPU {mean_base:,.0f} {unit})"
        if efficiency is not None else "no one-GPU throughput measured")
    slowest = min(detail.ranks, key=lambda r: r.baseline_throughput)
    ratio = statistics.median(base) / slowest.baseline_throughput if slowest.baseline_throughput > 0 else None
    add("straggler_ratio", None if ratio is None else round(ratio, 4), th.max_straggler_ratio, "le",
        f"median GPU / slowest (GPU {slowest.gpu} on node {slowest.node}) = {ratio:.3f}"
        if ratio is not None else "slowest GPU measured no throughput", node=slowest.node, gpu=slowest.gpu)
    k = max(1, min(LOSS_WINDOW, len(losses) // 2))
    first, last = (statistics.fmean(losses[:k]), statistics.fmean(losses[-k:])) if losses else (None, None)
    detail.first_loss = None if first is None else round(first, 5)
    detail.last_loss = None if last is None else round(last, 5)
    finite = first is not None and last is not None and math.isfinite(first) and math.isfinite(last)
    decrease = (first - last) / abs(first) if finite and first else None
    add("loss_decrease", None if decrease is None else round(decrease, 4), MIN_LOSS_DECREASE, "ge",
        f"loss {first:.4f} -> {last:.4f} (mean of the first and last {k} steps)" if finite
        else f"loss is not finite or missing ({first} -> {last})", u="fraction")
    return out
