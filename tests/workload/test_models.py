"""The DDP models: shapes, ResNet-50's size, and that training on the synthetic batch lowers the loss."""

from __future__ import annotations

import pytest
import torch
from acceptance_workload.checks.ddp import models
from acceptance_workload.checks.ddp.ddp import Trainer, measure, median_throughputs, window_efficiencies, workload_for
from acceptance_workload.checks.ddp.spec import DdpCheck
from acceptance_workload.runtime.control import Control
from acceptance_workload.runtime.watchdog import Watchdog


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
    check = DdpCheck.model_validate({"model": model, "batchSize": 4, "seqLen": 64, "steps": 6, "windows": 3,
                                     "warmupSteps": 1})
    wl = workload_for(check, "cpu-smoke")
    torch.manual_seed(0)
    device = torch.device("cpu")
    trainer = Trainer(wl.make_model(), wl, wl.make_batch(torch.Generator().manual_seed(1), device), device)
    barriers = []
    times = measure({"t": trainer}, check, device, _watchdog(), barrier=lambda: barriers.append(1))
    assert [len(w) for w in times["t"]] == [2, 2, 2] and all(s > 0 for w in times["t"] for s in w)
    assert len(barriers) == 3  # every window starts aligned
    losses = trainer.loss_values()
    assert len(losses) == 7
    assert sum(losses[-2:]) < sum(losses[:2])
    assert wl.unit == ("tokens/s" if model == "gpt" else "images/s")
    assert wl.items_per_step == (4 * 64 if model == "gpt" else 4)


def test_windows_alternate_between_the_phases() -> None:
    check = DdpCheck.model_validate({"steps": 4, "windows": 2, "warmupSteps": 1})
    order: list[str] = []

    class Recorder:
        def __init__(self, name: str):
            self.name = name

        def step(self) -> None:
            order.append(self.name)

    measure({"a": Recorder("a"), "b": Recorder("b")}, check, torch.device("cpu"), _watchdog(),  # type: ignore[dict-item]
            barrier=lambda: order.append("|"))
    assert "".join(order) == "ab|aa|bb|aa|bb"


def test_throughput_is_taken_at_the_median_step_so_one_stall_does_not_decide() -> None:
    steady, one_stall, always_slow = [0.1] * 9, [0.1] * 8 + [2.0], [0.2] * 9
    assert median_throughputs([steady, one_stall], 100) == [1000, 1000]
    assert median_throughputs([always_slow], 100) == [500]


def test_efficiency_pairs_each_ddp_window_with_its_own_baseline_window() -> None:
    # Both phases drift down together in window 1 (a hot host): paired windows keep the ratio.
    gathered = [{"baseline": [100.0, 80.0], "ddp": [95.0, 76.0]}, {"baseline": [100.0, 80.0], "ddp": [95.0, 76.0]}]
    assert window_efficiencies(gathered) == pytest.approx([0.95, 0.95])


def test_a_built_model_has_the_cpu_weights_of_its_seed_drawn_once_and_keeps_its_head_tied(monkeypatch) -> None:
    # Workload.build: every model of a check starts from the weights torch.manual_seed(seed) gives on the CPU
    # (the baseline and the distributed copy alike), drawn once a process rather than once a model.
    from acceptance_workload.checks.ddp import ddp

    wl = workload_for(DdpCheck(model="gpt", batch_size=2, seq_len=16), "cpu-smoke")
    torch.manual_seed(ddp.SEED)
    reference = wl.make_model().state_dict()
    draws = []
    make = wl.make_model
    monkeypatch.setattr(wl, "make_model", lambda: draws.append(1) or make())
    ddp._weights.clear()
    first, second = (wl.build(torch.device("cpu"), ddp.SEED) for _ in range(2))
    assert len(draws) == 3  # the weights once, then each model's own construction (its draws overwritten)
    for model in (first, second):
        state = model.state_dict()
        assert state.keys() == reference.keys()
        assert all(torch.equal(state[k], reference[k]) for k in reference)
        assert model.head.weight is model.tok.weight
    assert first.tok.weight.data_ptr() != second.tok.weight.data_ptr()  # two models, not one shared
    other = wl.build(torch.device("cpu"), ddp.SEED + 1)
    assert not torch.equal(other.tok.weight, first.tok.weight)  # another seed, other weights
    fresh = wl.build(torch.device("cpu"), 99, same_as_cpu=False)
    assert not torch.equal(fresh.tok.weight, first.tok.weight)
