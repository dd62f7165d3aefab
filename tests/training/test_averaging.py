"""The weight average (`ema_steps`, `tscratch.training.averaging`): its decay, that it is the
exponential moving average of the weights after each step, which weights validation and testing
read, and the one-line errors of its option."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from tests.helpers import torch_threads
from tscratch.data.classification import TextClassificationData
from tscratch.errors import UserError
from tscratch.training.averaging import WeightAverage, ema_horizon, update_trained
from tscratch.training.classification import ClassificationTask
from tscratch.training.optim import OptimizerConfig

STEPS = 8


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "ema_steps (True) must be 0 (no average), a step count or a fraction"),
        (-3, "ema_steps (-3) must be 0 (no average), a step count or a fraction"),
        (1.0, "ema_steps (1.0) as a fraction of all steps must be in (0, 1); pass an int"),
        (1.5, "ema_steps (1.5) as a fraction of all steps must be in (0, 1); pass an int"),
    ],
)
def test_wrong_ema_steps_is_one_line(value, message):
    with pytest.raises(UserError) as error:
        OptimizerConfig(ema_steps=value)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


@pytest.mark.parametrize("value", [0, 0.0, 1, 0.25, 500])
def test_valid_ema_steps(value):
    assert OptimizerConfig(ema_steps=value).ema_steps == value


def test_horizon_is_a_step_count_or_a_share_of_the_run():
    assert ema_horizon(500, 2400) == 500
    assert ema_horizon(0.2, 2400) == 480
    assert ema_horizon(0.01, 10) == 1  # never below one step: decay 0, the last weights


class Snapshots(L.Callback):
    """The model's weights after every optimizer step."""

    def __init__(self) -> None:
        self.after_step: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.after_step.append({k: v.detach().clone() for k, v in pl_module.named_parameters()})


@pytest.fixture(scope="module")
def averaged_run(shared_cache, tmp_path_factory):
    """A tiny fit with `ema_steps` 0.5 (decay 1 - 1/4 over 8 steps), then `test` of its best
    checkpoint in the same trainer, as tscratch fit does."""
    with torch_threads(1):
        root = tmp_path_factory.mktemp("averaged")
        L.seed_everything(0, verbose=False)
        data = TextClassificationData(
            dataset="bbc_news", vocab_size=1000, max_length=64, batch_size=16,
            cache_dir=str(shared_cache),
        )  # fmt: skip
        model = ClassificationTask(
            vocab_size=data.vocab_size, num_classes=data.num_classes, pad_id=data.pad_id,
            d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=64, lr=3e-3, ema_steps=0.5,
        )  # fmt: skip
        snapshots = Snapshots()
        trainer = L.Trainer(
            accelerator="cpu", precision="32-true", max_epochs=1, limit_train_batches=STEPS,
            limit_val_batches=1, limit_test_batches=1, num_sanity_val_steps=0, logger=False,
            enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
            callbacks=[snapshots],
        )  # fmt: skip
        trainer.fit(model, datamodule=data)
        after_fit = {k: v.detach().clone() for k, v in model.named_parameters()}
        trainer.test(model, datamodule=data, ckpt_path="best", verbose=False)
    best = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)
    return model, trainer, snapshots, after_fit, best


def test_the_average_is_the_ema_of_the_weights_after_each_step(averaged_run):
    _, trainer, snapshots, after_fit, _ = averaged_run
    average = next(c for c in trainer.callbacks if isinstance(c, WeightAverage))
    assert average.decay == pytest.approx(0.75)
    assert len(snapshots.after_step) == STEPS
    expected = dict(snapshots.after_step[0])  # the first update copies the weights
    for weights in snapshots.after_step[1:]:
        expected = {k: 0.75 * expected[k] + 0.25 * weights[k] for k in expected}
    for name, value in after_fit.items():
        torch.testing.assert_close(value, expected[name], rtol=1e-5, atol=1e-6)
    # the average is not the last weights, so the comparison above can fail
    last = snapshots.after_step[-1]
    assert any(not torch.allclose(after_fit[k], last[k]) for k in last)


def test_checkpoints_hold_the_average_and_testing_reads_it(averaged_run):
    model, _, snapshots, after_fit, best = averaged_run
    state = best["state_dict"]
    for name, value in after_fit.items():  # one epoch: the best checkpoint is the last step's
        torch.testing.assert_close(state[name], value, rtol=0, atol=0)
    last = snapshots.after_step[-1]
    for name, value in last.items():  # the trained weights travel too, for resuming
        torch.testing.assert_close(best["current_model_state"][name], value, rtol=0, atol=0)
    # Lightning's own callback would load current_model_state when testing the checkpoint
    tested = dict(model.named_parameters())
    assert all(torch.equal(tested[k].detach(), state[k]) for k in after_fit)


def test_updating_only_the_trained_parameters_is_torchs_average_bit_for_bit():
    # A frozen table and two trained layers, averaged by torch's AveragedModel and by
    # update_trained over the same 6 steps: every parameter and buffer equal exactly, while
    # update_trained hands the average function the trained parameters only.
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(50, 8), torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)
    )
    model[0].weight.requires_grad_(False)
    model.register_buffer("table", torch.randn(4))
    ema = get_ema_multi_avg_fn(0.9)
    handed: list[int] = []

    def counting(kept, current, n):
        handed.append(len(kept))
        ema(kept, current, n)

    theirs = AveragedModel(model, multi_avg_fn=ema, use_buffers=False)
    ours = AveragedModel(model, multi_avg_fn=counting, use_buffers=False)
    for _ in range(6):
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:
                    p.add_(torch.randn_like(p))
        theirs.update_parameters(model)
        update_trained(ours, model)
    assert handed == [4] * 5  # the first update copies; Linear's and LayerNorm's weights, biases
    for a, b in zip(
        [*theirs.parameters(), *theirs.buffers()],
        [*ours.parameters(), *ours.buffers()],
        strict=True,
    ):
        assert torch.equal(a, b)
    assert not torch.equal(ours.module[1].weight, model[1].weight)  # an average, not a copy
