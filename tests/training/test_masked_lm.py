"""MaskedLMTask: tied weights, the loss on masked positions only, checkpoints, exact resume."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger

from tests.data.test_pretraining import write_corpus
from tscratch.cli.pretrain import pretrain_trainer_defaults
from tscratch.config import EncoderConfig
from tscratch.data.masking import IGNORE_INDEX
from tscratch.data.pretraining import PretrainingTextData
from tscratch.masked_lm import masked_lm_flops
from tscratch.model import TransformerEncoder, forward_flops
from tscratch.training.checkpointing import LatestCheckpoint
from tscratch.training.init_from import resolve_init_source
from tscratch.training.masked_lm import MaskedLMTask
from tscratch.training.optim import parameter_groups

V = 50


def tiny_task(**overrides) -> MaskedLMTask:
    torch.manual_seed(0)
    args = dict(vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=32)
    return MaskedLMTask(**{**args, "dropout": 0.0, **overrides})


def masked_batch(B: int = 4, T: int = 16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (B, T), generator=g)
    mask = torch.arange(T) < torch.tensor([T, T - 3, T - 7, 5])[:, None]
    ids[~mask] = 0
    selected = mask & (torch.rand(B, T, generator=g) < 0.3)
    selected[:, 1] = True
    labels = torch.where(selected, ids, IGNORE_INDEX)
    return {"input_ids": torch.where(selected, 4, ids), "attention_mask": mask, "labels": labels}


def test_the_decoder_weight_is_the_token_embedding():
    task = tiny_task()
    head, encoder = task.model.head, task.model.encoder
    assert head.decoder.weight is encoder.tok_emb.weight
    params = list(task.model.parameters())
    assert sum(p is encoder.tok_emb.weight for p in params) == 1  # counted and stepped once
    groups = parameter_groups(task.model, 0.01)
    assert any(p is encoder.tok_emb.weight for p in groups[1]["params"])  # not decayed


def test_a_tied_gradient_is_the_sum_of_both_uses_and_moves_both_names():
    task = tiny_task()
    batch = masked_batch()
    untied = copy.deepcopy(task)
    untied.model.head.decoder.weight = torch.nn.Parameter(
        untied.model.encoder.tok_emb.weight.clone()
    )
    for module in (task, untied):
        module._step(batch).loss.backward()
    emb, dec = untied.model.encoder.tok_emb.weight.grad, untied.model.head.decoder.weight.grad
    torch.testing.assert_close(task.model.encoder.tok_emb.weight.grad, emb + dec)

    before = task.model.encoder.tok_emb.weight.detach().clone()
    torch.optim.SGD(task.parameters(), lr=0.1).step()
    state = task.state_dict()
    assert torch.equal(state["model.head.decoder.weight"], state["model.encoder.tok_emb.weight"])
    assert not torch.equal(state["model.encoder.tok_emb.weight"], before)


def test_head_runs_on_masked_rows_only_and_loss_matches_full_vocabulary_reference():
    task = tiny_task()
    batch = masked_batch()
    shapes = []
    task.model.head.register_forward_hook(lambda m, args, out: shapes.append(args[0].shape))
    step = task._step(batch)
    loss, acc = step.loss, step.mlm_acc
    N = int((batch["labels"] != IGNORE_INDEX).sum())
    assert shapes == [(N, 16)] and step.masked == N
    assert step.rtd_acc is None and step.mlm_loss is step.loss

    full = task.model(batch["input_ids"], batch["attention_mask"])  # (B, T, V) every position
    reference = F.cross_entropy(full.reshape(-1, V), batch["labels"].reshape(-1), ignore_index=-100)
    torch.testing.assert_close(loss, reference)
    selected = batch["labels"] != IGNORE_INDEX
    hits = (full.argmax(-1) == batch["labels"])[selected].float().mean()
    torch.testing.assert_close(acc, hits)


def test_encoder_weights_load_strictly_into_a_plain_encoder():
    task = tiny_task()
    fields = {f.name for f in dataclasses.fields(EncoderConfig)}
    config = EncoderConfig(**{k: v for k, v in task.hparams.items() if k in fields})
    prefix = "model.encoder."
    state = {
        k.removeprefix(prefix): v for k, v in task.state_dict().items() if k.startswith(prefix)
    }
    TransformerEncoder(config).load_state_dict(state, strict=True)


def test_flops_count_the_head_on_masked_rows_only():
    config = tiny_task().config
    head = 10 * (2 * 16 * 16 + 2 * 16 * V)
    assert masked_lm_flops(config, 4, 16, 10) == forward_flops(config, 4, 16) + head


# --- Bitwise-exact resume (in process), as tests/training/test_resume.py for fit.py -----------

STEPS_PER_EPOCH, EPOCHS = 6, 2


class Interrupted(Exception):
    """Raised by the test to kill a run."""


class Recorder(L.Callback):
    """(step, batch digest, RNG digest) per batch; stops before the batch of `stop_at_step`."""

    def __init__(self, stop_at_step: int | None = None) -> None:
        self.stop_at_step, self.seen = stop_at_step, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.stop_at_step:
            raise Interrupted(f"stopped at step {trainer.global_step}")
        digest = hashlib.sha256()
        for tensor in [*batch.values(), torch.get_rng_state()]:
            digest.update(tensor.contiguous().numpy().tobytes())
        self.seen.append((trainer.global_step, digest.hexdigest()[:12]))


def _pretrain(
    root: Path, corpus: Path, recorder: Recorder, ckpt_path: Path | None = None, **task_args
):
    """pretrain.py's recipe (module, data, callbacks, trainer settings) on a tiny model."""
    L.seed_everything(0, verbose=False)
    data = PretrainingTextData(
        str(corpus), line_per_document=True, vocab_size=80, max_length=24, batch_size=8,
        cache_dir=str(root.parent / "cache"),
    )  # fmt: skip
    model = MaskedLMTask(
        vocab_size=data.vocab_size, pad_id=data.pad_id, d_model=16, num_heads=2, d_ff=32,
        num_layers=2, max_len=32, dropout=0.1, lr=3e-3, **task_args,
    )  # fmt: skip
    settings = pretrain_trainer_defaults()
    settings.update(
        callbacks=[*settings["callbacks"], LatestCheckpoint(4), recorder],
        accelerator="cpu",
        precision="32-true",
        max_epochs=EPOCHS,
        limit_train_batches=STEPS_PER_EPOCH,
        limit_val_batches=1,
        num_sanity_val_steps=1,
        log_every_n_steps=2,
        logger=TensorBoardLogger(root, name="lightning_logs", version=0, default_hp_metric=False),
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer = L.Trainer(**settings)
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return model, trainer


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["mlm", "electra"])  # electra samples from the global RNG
def test_mid_epoch_resume_is_bitwise_exact(tmp_path, single_thread, objective):
    corpus = write_corpus(tmp_path / "corpus")
    straight = Recorder()
    straight_model, _ = _pretrain(tmp_path / "straight", corpus, straight, objective=objective)

    before = Recorder(stop_at_step=4)
    with pytest.raises(Interrupted, match="stopped at step 4"):
        _pretrain(tmp_path / "resumed", corpus, before, objective=objective)
    last = tmp_path / "resumed" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["global_step"] == 4
    assert "[MASK]" in checkpoint["tokenizer_json"] and checkpoint["max_length"] == 24
    after = Recorder()
    model, _ = _pretrain(tmp_path / "resumed", corpus, after, ckpt_path=last, objective=objective)

    # Same batches, masks included, each met with the same global RNG state.
    assert len(straight.seen) == EPOCHS * STEPS_PER_EPOCH
    assert len(after.seen) == EPOCHS * STEPS_PER_EPOCH - 4
    assert before.seen + after.seen == straight.seen
    expected = straight_model.state_dict()
    got = model.state_dict()
    assert got.keys() == expected.keys()
    assert not [k for k in expected if not torch.equal(got[k], expected[k])]

    # What fine-tuning starts from is the encoder (under electra, the discriminator), exactly.
    source = resolve_init_source(str(last.parent / "last.ckpt"))
    encoder = model.model.encoder.state_dict()
    assert source.encoder_state.keys() == encoder.keys()
    assert all(torch.equal(source.encoder_state[k], encoder[k]) for k in encoder)
    assert source.config.num_layers == 2
