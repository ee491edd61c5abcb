"""Synthetic-data training: each GPU alone, then all of them under DistributedDataParallel.

Every rank holds two copies of the model: one trained alone (the one-GPU
baseline, no communication, so a slow GPU shows up by name) and one under DDP.
Their timed windows alternate (baseline, DDP, baseline, ...) so that drift on
the host lands on both. Scaling efficiency = the median over windows of DDP
throughput / mean one-GPU throughput; the straggler ratio = median one-GPU
throughput / the slowest one's (each GPU's median over windows). The loss must fall:
the batch is fixed and learnable, so a run whose gradients are wrong (a broken
all_reduce, NaNs) does not learn and fails.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.ddp.rules import RULES
from acceptance_workload.checks.ddp.spec import DdpCheck
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.contract.rules import Table
from acceptance_workload.report.model import ONE_RANK_SCALING, DdpDetail, DdpRank, Skip

if TYPE_CHECKING:
    from acceptance_workload.contract.config import RunConfig
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.watchdog import Watchdog

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
    shape: Hashable = None  # what makes two Workloads' models the same (the weights cache's key)

    def build(self, device: Any, seed: int, same_as_cpu: bool = True) -> Any:
        """The model on `device`, with the weights `torch.manual_seed(seed)` gives it on the CPU.

        Every model of a check starts from the same weights (the baseline and the distributed copy, each rank
        alike), and those are the CPU's, as they always were. Drawing them takes seconds (336M parameters,
        one thread), so they are drawn once a process (initial_weights) and each model is built on the device
        and loaded from them. `same_as_cpu=False`: any weights `seed` gives on the device (a fresh model that
        must only differ from a trained one).
        """
        import torch

        if self.shape is None:  # not cached (ResNet): built on the CPU and moved
            torch.manual_seed(seed)
            return self.make_model().to(device)
        weights = initial_weights(self.shape, seed, self.make_model) if same_as_cpu else None
        torch.manual_seed(seed)
        with torch.device(device):
            model = self.make_model()
        if weights is not None:
            model.load_state_dict(weights)
        return model


_weights: dict[tuple[Hashable, int], dict[str, Any]] = {}  # the last model's initial weights, on the CPU


def initial_weights(shape: Hashable, seed: int, make_model: Callable[[], Any]) -> dict[str, Any]:
    """The CPU weights of `make_model()` after `torch.manual_seed(seed)`, drawn once for the last (shape, seed):
    the checks build their models one after the other, so one entry is enough."""
    import torch

    if (shape, seed) not in _weights:
        _weights.clear()
        torch.manual_seed(seed)
        _weights[(shape, seed)] = make_model().state_dict()
    return _weights[(shape, seed)]


def workload_for(check: DdpCheck, mode: str) -> Workload:
    import torch

    from acceptance_workload.checks.ddp import models

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
            shape=cfg,
            # fused: one kernel for the whole update instead of several per tensor (fewer launches to wait on)
            make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0,
                                                       fused=next(m.parameters()).is_cuda),
        )
    size, classes = (32, 10) if tiny else (224, 1000)
    return Workload(
        name="resnet50", unit="images/s", items_per_step=batch,
        make_model=(models.tiny_resnet if tiny else models.resnet50),
        make_batch=lambda g, d: models.image_batch(batch, size, classes, g, d),
        loss=lambda m, b: torch.nn.functional.cross_entropy(m(b[0]).float(), b[1]),
        make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
    )


class Trainer:
    """One model with its optimizer; `step()` runs one training step on the fixed batch."""

    def __init__(self, model: Any, wl: Workload, batch: Any, device: Any):
        import torch

        self.model, self.wl, self.batch = model, wl, batch
        self.opt = wl.make_optimizer(model)
        self.cuda = device.type == "cuda"
        self.losses: list[Any] = []
        self._amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if self.cuda else contextlib.nullcontext

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        with self._amp():
            loss = self.wl.loss(self.model, self.batch)
        loss.backward()
        self.opt.step()
        self.losses.append(loss.detach())

    def loss_values(self) -> list[float]:
        import torch

        return [float(x) for x in torch.stack(self.losses).float().cpu()] if self.losses else []


def median_throughputs(windows: list[list[float]], items_per_step: int) -> list[float]:
    """Items per second of each window, at the window's median step time.

    The median, not the mean: one step stalled by something outside the node
    (a shared host's hiccup) must not decide, while a GPU or link that is slow on
    every step still shows in every step.
    """
    return [items_per_step / statistics.median(w) for w in windows]


def measure(trainers: dict[str, Trainer], check: DdpCheck, device: Any, watchdog: Watchdog,
            barrier: Callable[[], None], stage: str = "ddp") -> dict[str, list[list[float]]]:
    """Warm up every trainer, then alternate timed windows of each; step seconds per trainer and window.

    Alternating the one-GPU and DDP windows puts slow drift (clocks, temperature,
    a neighbour on the host) on both sides of the efficiency ratio instead of on
    whichever phase ran during it. Every window starts with the ranks aligned, so
    a DDP window does not time the wait for the slowest rank's previous window.
    `stage` starts each step's label: the check that runs it (fsdp measures this way too).
    """
    import torch

    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for name, trainer in trainers.items():
        for i in range(check.warmup_steps):
            with watchdog.step(f"{stage} {name} warmup {i}"):
                trainer.step()
    out: dict[str, list[list[float]]] = {name: [] for name in trainers}
    for w in range(check.window_count()):
        for name, trainer in trainers.items():
            with watchdog.step(f"{stage} {name} window {w} start"):
                sync()
                barrier()
                sync()  # NCCL's all_reduce returns before it completes: wait until every rank has arrived
            times = []
            for i in range(check.steps_per_window()):
                with watchdog.step(f"{stage} {name} window {w} step {i}"):
                    t0 = time.perf_counter()
                    trainer.step()
                    sync()  # the step's kernels are done; DDP already waited for its all-reduce in backward
                    times.append(time.perf_counter() - t0)
            out[name].append(times)
    return out


def run_ddp(session: Session, config: RunConfig, watchdog: Watchdog,
            progress: Callable[[str], None] | None = None
            ) -> tuple[list[CheckResult], list[Skip], DdpDetail] | None:
    """The one-GPU baseline and DDP, in alternating windows on every rank; results, skips and detail on rank 0."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    check = config.checks.ddp
    wl = workload_for(check, config.mode)
    device = session.device
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    gen = torch.Generator().manual_seed(SEED + session.rank)
    batch = wl.make_batch(gen, device)
    alone = Trainer(wl.build(device, SEED), wl, batch, device)
    ddp_kwargs: dict[str, Any] = {"gradient_as_bucket_view": True}
    if device.type == "cuda":
        ddp_kwargs["device_ids"] = [device.index]
    with watchdog.step("ddp wrap model"):
        ddp = Trainer(DistributedDataParallel(wl.build(device, SEED), **ddp_kwargs), wl, batch, device)
    token = torch.zeros(1, device=device)
    times = measure({"baseline": alone, "ddp": ddp}, check, device, watchdog,
                    barrier=lambda: dist.all_reduce(token))
    mine = {"baseline": median_throughputs(times["baseline"], wl.items_per_step),
            "ddp": median_throughputs(times["ddp"], wl.items_per_step), "losses": ddp.loss_values()}
    del alone, ddp
    if device.type == "cuda":
        torch.cuda.empty_cache()
    gathered = session.control.gather("ddp", mine)
    if gathered is None:
        return None
    detail = DdpDetail(
        model=wl.name, unit=wl.unit, world_size=session.world_size, batch_size=check.effective_batch_size(),
        windows=check.window_count(), steps_per_window=check.steps_per_window(),
        window_efficiency=[round(e, 4) for e in window_efficiencies(gathered)],
        ranks=[DdpRank(rank=i.rank, node=i.node, gpu=i.gpu,
                       baseline_throughput=round(statistics.median(g["baseline"]), 2),
                       ddp_throughput=round(statistics.median(g["ddp"]), 2))
               for i, g in zip(session.ranks, gathered, strict=True)],
    )
    losses = [statistics.fmean(step) for step in zip(*(g["losses"] for g in gathered), strict=True)]
    results = judge_ddp(check, detail, losses, config.estimated_thresholds)
    skipped = one_rank_skips(detail, results)
    if progress:
        progress(f"ddp {wl.name}: " + "; ".join([r.message for r in results if r.node is None]
                                                + [f"{s.name} skipped ({s.reason})" for s in skipped]))
    return results, skipped, detail


def one_rank_skips(detail: DdpDetail, results: list[CheckResult]) -> list[Skip]:
    """DDP on one rank: its scaling efficiency is a skip saying why, unless a floor asked for it (then it failed)."""
    if detail.world_size != 1 or any(r.name == "scaling_efficiency" for r in results):
        return []
    return [Skip(check="ddp", name="scaling_efficiency", reason=ONE_RANK_SCALING)]


def window_efficiencies(gathered: list[dict[str, list[float]]]) -> list[float]:
    """Per window: mean DDP throughput over the ranks / their mean one-GPU throughput in the window before it."""
    out = []
    for w in range(min(len(g["ddp"]) for g in gathered)):
        base = statistics.fmean(g["baseline"][w] for g in gathered)
        out.append(statistics.fmean(g["ddp"][w] for g in gathered) / base if base > 0 else 0.0)
    return out


def judge_ddp(check: DdpCheck, detail: DdpDetail, losses: list[float],
              estimated: Collection[str] = ()) -> list[CheckResult]:
    """The results, each marked where its threshold is the profile's estimate."""
    return [RULES.mark_estimate(r, estimated) for r in _judge_ddp(check, detail, losses)]


def _judge_ddp(check: DdpCheck, detail: DdpDetail, losses: list[float], table: Table = RULES) -> list[CheckResult]:
    """Throughput, scaling efficiency, straggler and loss results from the gathered numbers.

    `table`: the rows that judge them (fsdp judges its training by the same rules, its own rows)."""
    th = check.thresholds
    unit = detail.unit
    n = detail.world_size
    out: list[CheckResult] = []

    def add(result: str, value: float | None, message: str, node: str | None = None, gpu: int | None = None,
            u: str | None = None) -> None:
        out.append(table.result(result, value, th, unit=u, message=message, node=node, gpu=gpu))

    per_gpu = sum(r.ddp_throughput for r in detail.ranks) / n
    base = [r.baseline_throughput for r in detail.ranks]
    mean_base = statistics.fmean(base)
    add("throughput_per_gpu", round(per_gpu, 2),
        f"DDP {per_gpu:,.0f} {unit} per GPU over {n} GPUs", u=unit)
    for r in detail.ranks:
        add("gpu_throughput", r.baseline_throughput,
            f"GPU {r.gpu} on node {r.node} alone: {r.baseline_throughput:,.0f} {unit}", node=r.node, gpu=r.gpu,
            u=unit)
    if n == 1 and table.check == "ddp":  # nothing to scale over: a skip (one_rank_skips), or missing where a floor asks
        if RULES.threshold("scaling_efficiency", th) is not None:
            add("scaling_efficiency", None, f"{ONE_RANK_SCALING}; its threshold cannot pass")
    elif detail.window_efficiency:
        efficiency: float | None = statistics.median(detail.window_efficiency)
        spread = (f", median of {len(detail.window_efficiency)} windows "
                  f"{min(detail.window_efficiency):.3f}-{max(detail.window_efficiency):.3f}")
    else:
        efficiency, spread = (per_gpu / mean_base if mean_base > 0 else None), ""
    if not (n == 1 and table.check == "ddp"):
        add("scaling_efficiency", None if efficiency is None else round(efficiency, 4),
            f"scaling efficiency {efficiency:.3f} (DDP {per_gpu:,.0f} vs one GPU {mean_base:,.0f} {unit}{spread})"
            if efficiency is not None else "no one-GPU throughput measured")
    slowest = min(detail.ranks, key=lambda r: r.baseline_throughput)
    ratio = statistics.median(base) / slowest.baseline_throughput if slowest.baseline_throughput > 0 else None
    add("straggler_ratio", None if ratio is None else round(ratio, 4),
        f"median GPU / slowest (GPU {slowest.gpu} on node {slowest.node}) = {ratio:.3f}"
        if ratio is not None else "slowest GPU measured no throughput", node=slowest.node, gpu=slowest.gpu)
    k = max(1, min(LOSS_WINDOW, len(losses) // 2))
    first, last = (statistics.fmean(losses[:k]), statistics.fmean(losses[-k:])) if losses else (None, None)
    detail.first_loss = None if first is None else round(first, 5)
    detail.last_loss = None if last is None else round(last, 5)
    finite = first is not None and last is not None and math.isfinite(first) and math.isfinite(last)
    decrease = (first - last) / abs(first) if finite and first else None
    add("loss_decrease", None if decrease is None else round(decrease, 4),
        f"loss {first:.4f} -> {last:.4f} (mean of the first and last {k} steps)" if finite
        else f"loss is not finite or missing ({first} -> {last})", u="fraction")
    return out
