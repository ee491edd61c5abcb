"""The DDP models: shapes, ResNet-50's size, and that training on the synthetic batch lowers the loss."""

from __future__ import annotations

import pytest
import torch
from acceptance_workload import models
from acceptance_workload.checks import DdpCheck
from acceptance_workload.control import Control, Watchdog
from acceptance_workload.ddp import train, workload_for


def test_resnet50_has_resnet50s_parameter_count() -> None:
    # torchvision.models.resnet50() has 25,557,032 parameters: same layers, same count
    assert sum(p.numel() for p in models.resnet50().parameters()) == 25_557_032


def test_gpt_default_is_gpt2_small_sized_with_a_32k_vocabulary() -> None:
    model = models.Gpt(models.GptConfig())
    n = sum(p.numel() for p in model.parameters())  # tied head: counted once
    assert 105e6 < n < 115e6
    tiny = models.Gpt(models.TINY_GPT)
    tokens = models.gpt_batch(models.TINY_GPT, 2, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert tokens.shape == (2, models.TINY_GPT.seq_len + 1)
    assert tiny(tokens[:, :-1]).shape == (2, models.TINY_GPT.seq_len, models.TINY_GPT.vocab)


def test_resnet_forward_shape_on_small_images() -> None:
    images, labels = models.image_batch(2, 64, 1000, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert models.resnet50().eval()(images).shape == (2, 1000) and labels.shape == (2,)


def _watchdog() -> Watchdog:
    store = torch.distributed.HashStore()
    control = Control(store, 0, 1, timeout=60)
    return Watchdog(control, blamer=None, on_fatal=lambda m: None)  # steps only mark progress; no thread


@pytest.mark.parametrize("model", ["gpt", "resnet50"])
def test_training_on_the_synthetic_batch_lowers_the_loss(model: str) -> None:
    check = DdpCheck.model_validate({"model": model, "batchSize": 4, "seqLen": 64, "steps": 6, "warmupSteps": 1})
    wl = workload_for(check, "cpu-smoke")
    torch.manual_seed(0)
    net = wl.make_model()
    batch = wl.make_batch(torch.Generator().manual_seed(1), torch.device("cpu"))
    phase = train(net, wl, batch, check.steps, check.warmup_steps, torch.device("cpu"), _watchdog(), "t")
    assert len(phase.losses) == 7 and phase.seconds > 0
    assert sum(phase.losses[-2:]) < sum(phase.losses[:2])
    assert wl.unit == ("tokens/s" if model == "gpt" else "images/s")
    assert wl.items_per_step == (4 * 64 if model == "gpt" else 4)


def test_throughput_is_taken_at_the_median_step_so_one_stall_does_not_decide() -> None:
    from acceptance_workload.ddp import Phase

    steady = Phase(step_seconds=[0.1] * 9)
    one_stall = Phase(step_seconds=[0.1] * 8 + [2.0])
    always_slow = Phase(step_seconds=[0.2] * 9)
    assert steady.throughput(100) == one_stall.throughput(100) == 1000
    assert always_slow.throughput(100) == 500
    assert one_stall.seconds > steady.seconds
