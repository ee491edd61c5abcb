"""FSDP2 training (`torch.distributed.fsdp.fully_shard`): full sharding in a node, hybrid sharding across nodes.

Every rank first trains the whole model alone (the unsharded baseline: its
throughput names a slow GPU as in DDP, and its peak memory is the unsharded
figure), then the same model sharded over a DeviceMesh: one dimension (all
ranks) in a one-node run, two (nodes x GPUs of a node: shard inside a node,
replicate across nodes) in a multi-node one, where the node's FSDP alone is the
baseline of the scaling efficiency and alternates with the hybrid run window by
window (ddp.measure). Sharding must show: each GPU's peak memory against
(unsharded model state / shards) + the unsharded run's activations, and each
rank's share of the parameters. After the last step every rank checksums the
full parameters; a rank whose copy differs from the others' is named.
A frozen rank is named by the heartbeat watchdog around every step (ddp.measure).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from acceptance_workload.checks.ddp.ddp import (
    Trainer,
    Workload,
    _judge_ddp,
    measure,
    median_throughputs,
    window_efficiencies,
)
from acceptance_workload.checks.fsdp.rules import RULES
from acceptance_workload.checks.fsdp.spec import FsdpCheck
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report.model import DdpDetail, DdpRank, FsdpDetail, FsdpRank, Skip

if TYPE_CHECKING:
    from acceptance_workload.contract.config import RunConfig
    from acceptance_workload.runtime.launch import Session
    from acceptance_workload.runtime.watchdog import Watchdog

SEED = 4321
GIB = 1 << 30


def gpt_config(check: FsdpCheck) -> Any:
    from acceptance_workload.checks.ddp import models

    return models.GptConfig(layers=check.layers, d_model=check.d_model, heads=max(1, check.d_model // 64),
                            seq_len=check.seq_len, vocab=512 if check.d_model < 256 else 32000)


def workload(check: FsdpCheck) -> Workload:
    from acceptance_workload.checks.ddp import models

    cfg = gpt_config(check)
    return Workload(
        name="gpt", unit="tokens/s", items_per_step=check.batch_size * check.seq_len,
        make_model=lambda: models.Gpt(cfg),
        make_batch=lambda g, d: models.gpt_batch(cfg, check.batch_size, g, d),
        loss=models.gpt_loss,
        make_optimizer=optimizer,
        shape=cfg,
    )


def optimizer(model: Any) -> Any:
    """AdamW, fused on GPUs: FSDP2's parameters are DTensors, and the default (foreach) AdamW pays a CPU dispatch
    per tensor and op (pytorch/pytorch#134191), so the optimizer rather than the GPUs would decide the throughput
    (bench/fsdp_optimizer.py). The unsharded baseline uses the same optimizer, so the efficiency compares like with
    like."""
    import torch

    cuda = next(model.parameters()).is_cuda
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, fused=cuda or None)


def replicas(session: Session) -> int:
    """Copies of the sharded model: one per node when every node has the same GPUs, numbered node by node.

    Anything else (a node short of GPUs, ranks interleaved across nodes) cannot form a nodes x GPUs mesh:
    the model is then fully sharded over every rank, one copy.
    """
    nodes = session.nodes()
    per = session.world_size // len(nodes)
    even = all(session.node_ranks(n) == list(range(i * per, (i + 1) * per)) for i, n in enumerate(nodes))
    return len(nodes) if even and per * len(nodes) == session.world_size else 1


def device_mesh(session: Session, copies: int) -> Any:
    """All ranks on one dimension (one copy), or (replicate over nodes, shard over a node's GPUs)."""
    from torch.distributed.device_mesh import init_device_mesh

    kind = session.device.type
    if copies == 1:
        return init_device_mesh(kind, (session.world_size,), mesh_dim_names=("shard",))
    return init_device_mesh(kind, (copies, session.world_size // copies), mesh_dim_names=("replicate", "shard"))


def sharded_model(wl: Workload, mesh: Any, device: Any, seed: int = SEED, same_as_cpu: bool = True) -> Any:
    """The model (Workload.build), each block and then the root sharded over `mesh` (bf16 compute, fp32 gradients
    on GPUs)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = wl.build(device, seed, same_as_cpu)
    kwargs: dict[str, Any] = {"mesh": mesh}
    if device.type == "cuda":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def state_shard_ratio(model: Any, shards: int) -> float:
    """This rank's parameter elements x shards / all parameter elements (1.0: an even share)."""
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    full = sum(p.numel() for p in model.parameters())
    return local * shards / full if full else 0.0


def checksum(model: Any) -> str:
    """An exact, order-sensitive checksum of every full parameter (a collective: every rank calls it)."""
    import torch

    total = 0
    for p in model.parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        bits = full.detach().float().contiguous().view(torch.int32).flatten().to(torch.int64)
        weights = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64) % 1_000_003 + 1
        total = (total * 1_000_033 + int((bits * weights).sum())) % (1 << 61)
    return f"{total:016x}"


class Memory:
    """Peak allocated bytes of the next steps on a GPU (None on CPU: no allocator statistics)."""

    def __init__(self, device: Any):
        self.cuda = device.type == "cuda"
        self.device = device

    def allocated(self) -> int | None:
        import torch

        if not self.cuda:
            return None
        torch.cuda.synchronize(self.device)
        return int(torch.cuda.memory_allocated(self.device))

    def peak_of(self, step: Callable[[], None], count: int = 2) -> int | None:
        import torch

        if not self.cuda:
            for _ in range(count):
                step()
            return None
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        for _ in range(count):
            step()
        torch.cuda.synchronize(self.device)
        return int(torch.cuda.max_memory_allocated(self.device))


def _unsharded(wl: Workload, batch: Any, session: Session, check: FsdpCheck, watchdog: Watchdog,
               barrier: Callable[[], None]) -> dict[str, Any]:
    """Each GPU alone with the whole model: its throughput, model state (bytes after a step) and peak memory."""
    import torch

    device, mem = session.device, Memory(session.device)
    alone = Trainer(wl.build(device, SEED), wl, batch, device)
    times = measure({"baseline": alone}, check, device, watchdog, barrier, "fsdp")  # type: ignore[arg-type]
    alone.opt.zero_grad(set_to_none=True)
    state = mem.allocated()  # parameters and AdamW's two moments; gradients come and go with the step's peak
    with watchdog.step("fsdp unsharded memory"):
        peak = mem.peak_of(alone.step)
    parameters = sum(p.numel() for p in alone.model.parameters())
    del alone
    if mem.cuda:
        torch.cuda.empty_cache()
    return {"baseline": median_throughputs(times["baseline"], wl.items_per_step), "state": state,
            "unsharded_peak": peak, "parameters": parameters}


def _sharded(wl: Workload, batch: Any, session: Session, check: FsdpCheck, watchdog: Watchdog,
             barrier: Callable[[], None], copies: int) -> dict[str, Any]:
    """FSDP (hybrid across nodes): peak memory, share of the state, then timed windows; the checksum at the end."""
    device, mem = session.device, Memory(session.device)
    with watchdog.step("fsdp shard model"):
        mesh = device_mesh(session, copies)
        fsdp = Trainer(sharded_model(wl, mesh, device), wl, batch, device)
    with watchdog.step("fsdp memory"):
        fsdp.step()  # the optimizer's state exists from here on
        peak = mem.peak_of(fsdp.step)
    trainers = {"fsdp": fsdp}
    if copies > 1:  # the baseline of the scaling efficiency: this node's FSDP alone, alternating with the hybrid one
        with watchdog.step("fsdp shard node model"):
            trainers = {"node": Trainer(sharded_model(wl, mesh["shard"], device), wl, batch, device), "fsdp": fsdp}
    fsdp.losses.clear()
    times = measure(trainers, check, device, watchdog, barrier, "fsdp")  # type: ignore[arg-type]
    with watchdog.step("fsdp checksum"):
        digest = checksum(fsdp.model)
    out = {name: median_throughputs(t, wl.items_per_step) for name, t in times.items()}
    shards = session.world_size // copies
    return {**out, "peak": peak, "shard_ratio": state_shard_ratio(fsdp.model, shards), "checksum": digest,
            "losses": fsdp.loss_values()}


def run_fsdp(session: Session, config: RunConfig, watchdog: Watchdog,
             progress: Callable[[str], None] | None = None
             ) -> tuple[list[CheckResult], list[Skip], FsdpDetail] | None:
    """The unsharded baseline, then FSDP on every rank; results and detail on rank 0."""
    import torch
    import torch.distributed as dist

    check = config.checks.fsdp
    wl = workload(check)
    copies = replicas(session)
    if session.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    batch = wl.make_batch(torch.Generator().manual_seed(SEED + session.rank), session.device)
    token = torch.zeros(1, device=session.device)
    barrier = lambda: dist.all_reduce(token)  # noqa: E731
    mine = _unsharded(wl, batch, session, check, watchdog, barrier)
    if progress:
        progress(f"fsdp: unsharded baseline done, sharding over {copies} x {session.world_size // copies} GPUs")
    mine.update(_sharded(wl, batch, session, check, watchdog, barrier, copies))
    if session.device.type == "cuda":
        torch.cuda.empty_cache()
    gathered = session.control.gather("fsdp", mine)
    if gathered is None:
        return None
    detail = fsdp_detail(session, check, gathered, copies, gathered[0]["parameters"])
    losses = [statistics.fmean(step) for step in zip(*(g["losses"] for g in gathered), strict=True)]
    results = judge_fsdp(check, detail, losses, [g["shard_ratio"] for g in gathered], config.estimated_thresholds)
    if progress:
        progress("fsdp: " + "; ".join(r.message for r in results if r.node is None))
    skipped = [] if session.device.type == "cuda" else [Skip(
        check="fsdp", name="peak_memory_ratio", reason="CPU: no allocator statistics (state_shard_ratio shows the "
        "sharding)")]
    return results, skipped, detail


def predicted_memory(state: float | None, unsharded_peak: float | None, shards: int) -> float | None:
    """What sharding predicts a GPU holds at its peak: the unsharded model state / shards + the activations.

    Both come from the unsharded run on the same GPU: its state is what stays allocated between steps
    (parameters and optimizer moments), its activations the rest of its peak (gradients included: they
    grow as activations are freed, so counting them unsharded keeps the bound on the safe side).
    """
    if state is None or unsharded_peak is None:
        return None
    return state / shards + (unsharded_peak - state)


def fsdp_detail(session: Session, check: FsdpCheck, gathered: list[dict[str, Any]], copies: int,
                parameters: int) -> FsdpDetail:
    shards = session.world_size // copies

    def gib(x: float | None) -> float | None:
        return None if x is None else round(x / GIB, 4)

    ranks = [FsdpRank(
        rank=info.rank, node=info.node, gpu=info.gpu,
        baseline_throughput=round(statistics.median(g["baseline"]), 2),
        fsdp_throughput=round(statistics.median(g["fsdp"]), 2),
        node_throughput=round(statistics.median(g["node"]), 2) if g.get("node") else None,
        peak_memory_gib=gib(g["peak"]), unsharded_peak_memory_gib=gib(g["unsharded_peak"]),
        predicted_memory_gib=gib(predicted_memory(g["state"], g["unsharded_peak"], shards)), checksum=g["checksum"])
        for info, g in zip(session.ranks, gathered, strict=True)]
    efficiency = window_efficiencies([{"baseline": g["node"], "ddp": g["fsdp"]} for g in gathered]) \
        if copies > 1 else []
    return FsdpDetail(model="gpt", world_size=session.world_size, shards=shards, replicas=copies,
                      parameters=parameters, batch_size=check.batch_size, seq_len=check.seq_len,
                      window_efficiency=[round(e, 4) for e in efficiency], ranks=ranks)


def judge_fsdp(check: FsdpCheck, detail: FsdpDetail, losses: list[float], shard_ratios: list[float],
               estimated: Collection[str] = ()) -> list[CheckResult]:
    """The results, each marked where its threshold is the profile's estimate."""
    return [RULES.mark_estimate(r, estimated)
            for r in _training(check, detail, losses) + _sharding(check, detail, shard_ratios)]


def _training(check: FsdpCheck, detail: FsdpDetail, losses: list[float]) -> list[CheckResult]:
    """Throughput, scaling efficiency, straggler and loss: DDP's judgement of the same numbers, as fsdp results."""
    as_ddp = DdpDetail(model=detail.model, unit="tokens/s", world_size=detail.world_size,
                       batch_size=detail.batch_size, window_efficiency=detail.window_efficiency,
                       ranks=[DdpRank(rank=r.rank, node=r.node, gpu=r.gpu, baseline_throughput=r.baseline_throughput,
                                      ddp_throughput=r.fsdp_throughput) for r in detail.ranks])
    out = []
    for r in _judge_ddp(check, as_ddp, losses, RULES):  # type: ignore[arg-type]  (the same threshold names)
        message = r.message.replace("DDP", "FSDP")
        if r.name == "scaling_efficiency" and detail.replicas > 1:
            message = message.replace("one GPU", "one node's FSDP")
        elif r.name == "scaling_efficiency":
            message = message.replace("one GPU", "one GPU unsharded")
        out.append(r.model_copy(update={"message": message}))
    detail.first_loss, detail.last_loss = as_ddp.first_loss, as_ddp.last_loss
    return out


def _sharding(check: FsdpCheck, detail: FsdpDetail, shard_ratios: list[float]) -> list[CheckResult]:
    """Per rank: the same parameters as the others after the last step, its share of them, its peak memory."""
    out: list[CheckResult] = []

    def add(name: str, value: float | None, message: str, r: FsdpRank) -> None:
        out.append(RULES.result(name, value, check.thresholds, message=message, node=r.node, gpu=r.gpu))

    agreed = consensus([r.checksum for r in detail.ranks])
    for r, ratio in zip(detail.ranks, shard_ratios, strict=True):
        same = r.checksum is not None and r.checksum == agreed
        add("parameter_checksum", 1.0 if same else 0.0,
            f"rank {r.rank} parameters {r.checksum}" + ("" if same else f", the others' {agreed or 'disagree'}"), r)
        add("state_shard_ratio", round(ratio, 4),
            f"rank {r.rank} holds {ratio / detail.shards:.3f} of the parameters ({detail.shards} shards)", r)
        if r.peak_memory_gib is None or r.predicted_memory_gib is None:
            continue  # CPU: no allocator statistics (run_fsdp's caller records the skip)
        memory = r.peak_memory_gib / r.predicted_memory_gib if r.predicted_memory_gib > 0 else None
        add("peak_memory_ratio", None if memory is None else round(memory, 4),
            f"peak {r.peak_memory_gib:.2f} GiB under FSDP vs {r.predicted_memory_gib:.2f} GiB predicted "
            f"(unsharded {r.unsharded_peak_memory_gib:.2f} GiB, state over {detail.shards} GPUs)", r)
    return out


def consensus(values: list[str | None]) -> str | None:
    """The value more than half the ranks hold, else None (then no rank's copy can be called right)."""
    counts = Counter(v for v in values if v is not None)
    if not counts:
        return None
    value, n = counts.most_common(1)[0]
    return value if n * 2 > len(values) else None
