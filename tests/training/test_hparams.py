"""One place per fact: every config field is a flag, a hyperparameter, a checkpoint entry and part
of the resume check, with nothing but the field itself written down."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.cli import LightningArgumentParser
from torch.utils.data import DataLoader

from tscratch.cli.checks import check_resume
from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.training.checkpointing import read_checkpoint
from tscratch.training.classification import ClassificationTask
from tscratch.training.hparams import architecture_keys, config_arguments
from tscratch.training.masked_lm import MaskedLMTask
from tscratch.training.optim import OptimizerConfig
from tscratch.training.schedules import SCHEDULES
from tscratch.training.seq2seq import Seq2SeqTask

TINY = dict(vocab_size=50, num_classes=3, d_model=16, num_heads=2, d_ff=32, num_layers=2)


@dataclass(frozen=True)
class DummyConfig(EncoderConfig):
    """EncoderConfig with one more field, added in this one place."""

    dummy: int = 3
    """A switch that exists only in this test."""


class DummyTask(ClassificationTask):
    """ClassificationTask trained on DummyConfig: the only change is which config it takes."""

    __init__ = config_arguments(DummyConfig)(ClassificationTask.__init__.__wrapped__)


def _changed_values() -> dict[str, object]:
    """A valid non-default value for every EncoderConfig field."""
    changed = {
        "vocab_size": 60, "d_model": 24, "num_heads": 3, "d_ff": 40, "num_layers": 1,
        "max_len": 48, "dropout": 0.05, "attention_dropout": 0.02, "norm_first": True,
        "norm": "rmsnorm", "norm_eps": 1e-6, "position": "learned", "ffn": "geglu", "pad_id": 2,
        "bias": False, "scale_embeddings": False, "embedding_norm": True, "type_vocab_size": 2,
        "bigram_buckets": 32, "word_chars": 3, "embed_dim": 8,
        "attention_impl": "explicit", "rope_base": 500.0, "t5_num_buckets": 16,
        "t5_max_distance": 64,
    }  # fmt: skip
    fields = {f.name: f for f in dataclasses.fields(EncoderConfig)}
    assert changed.keys() == fields.keys(), "a new field needs a value here"
    for name, value in changed.items():
        assert value != fields[name].default, name
    return changed


def _fit_one_step(model: ClassificationTask, root: Path) -> Path:
    """One real training step through Lightning, then its own checkpoint file."""
    batch = {
        "input_ids": torch.randint(1, 50, (4, 8)),
        "attention_mask": torch.ones(4, 8, dtype=torch.bool),
        "labels": torch.tensor([0, 1, 2, 0]),
    }
    loader = DataLoader([batch], batch_size=None)
    trainer = L.Trainer(
        max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=root, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(model, train_dataloaders=loader)
    path = root / "model.ckpt"
    trainer.save_checkpoint(path)
    return path


def test_every_field_round_trips_through_hparams_and_checkpoint(tmp_path):
    changed = _changed_values()
    model = ClassificationTask(**changed, num_classes=3)

    assert model.config == EncoderConfig(**changed)
    assert {k: model.hparams[k] for k in changed} == changed  # flat, under the field's name
    state = read_checkpoint(_fit_one_step(model, tmp_path))
    assert {k: state["hyper_parameters"][k] for k in changed} == changed
    assert ClassificationTask.from_checkpoint(state).config == model.config


def test_every_field_is_a_cli_flag_with_its_docstring():
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(ClassificationTask, "model")
    changed = _changed_values()
    args = [f"--model.{k}={v}" for k, v in changed.items()]
    config = parser.parse_args([*args, "--model.num_classes=3"])
    model = parser.instantiate(config).model

    assert model.config == EncoderConfig(**changed)
    help_text = " ".join(parser.format_help().split())
    assert "--model.d_model D_MODEL Width of the residual stream. (type: int" in help_text
    assert "--model.lr LR peak learning rate of AdamW." in help_text


def test_every_field_but_the_runtime_ones_is_checked_on_resume():
    keys = ClassificationTask.architecture_keys()
    fields = {f.name for f in dataclasses.fields(EncoderConfig)}
    assert set(keys) == (fields - EncoderConfig.RUNTIME_FIELDS) | {
        "num_classes", "label_names", "pooling",  # the head
        "head_lr", "layer_lr_decay", "freeze_embeddings", "freeze_layers",  # parameter groups
        "loss", "focal_gamma", "class_weights",  # the training objective
        "multi_label",  # the loss and the saved thresholds
        "teacher", "distill_weight", "similarity_weight",  # distillation: objective, targets
    }  # fmt: skip
    assert {"dropout", "attention_dropout", "attention_impl"} == EncoderConfig.RUNTIME_FIELDS


def test_a_new_field_reaches_cli_checkpoint_and_resume_check(tmp_path):
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(DummyTask, "model")
    assert "A switch that exists only in this test." in parser.format_help()
    config = parser.parse_args([f"--model.{k}={v}" for k, v in TINY.items()] + ["--model.dummy=7"])
    model = parser.instantiate(config).model
    assert model.config.dummy == 7 and model.hparams.dummy == 7

    state = read_checkpoint(_fit_one_step(model, tmp_path))
    trained = state["hyper_parameters"]
    assert trained["dummy"] == 7
    assert DummyTask.from_checkpoint(state).config == model.config
    assert "dummy" in DummyTask.architecture_keys()
    keys = DummyTask.architecture_keys()
    check_resume({**trained, "dummy": 7}, trained, keys, "run.ckpt")
    with pytest.raises(UserError, match=r"trained with dummy=7; this run asks dummy=8; resume"):
        check_resume({**trained, "dummy": 8}, trained, keys, "run.ckpt")


def test_unknown_argument_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="d_modle"):
        ClassificationTask(**TINY, d_modle=32)


def test_signature_lists_config_fields_then_task_arguments():
    names = list(inspect.signature(ClassificationTask).parameters)
    fields = [f.name for f in dataclasses.fields(EncoderConfig)]
    assert names[: len(fields)] == fields
    assert names[len(fields) :][:3] == ["num_classes", "label_names", "pooling"]


def test_architecture_keys_skip_runtime_fields():
    assert "dropout" not in architecture_keys(EncoderConfig)
    assert "d_model" in architecture_keys(EncoderConfig)
    assert "dummy" in architecture_keys(DummyConfig)


def test_decorating_an_init_without_the_config_argument_fails():
    def __init__(self, lr: float = 1.0) -> None:
        pass

    with pytest.raises(TypeError, match="has no argument 'config'"):
        config_arguments(EncoderConfig)(__init__)


def test_decorating_with_a_default_for_no_field_fails():
    with pytest.raises(TypeError, match="OptimizerConfig has no field 'learning_rate'"):
        config_arguments(OptimizerConfig, param="optim", defaults={"learning_rate": 1.0})


def test_optimizer_fields_stand_where_the_optim_argument_stood():
    names = list(inspect.signature(ClassificationTask).parameters)
    fields = [f.name for f in dataclasses.fields(OptimizerConfig)]
    start = names.index("pooling") + 1
    assert names[start : start + len(fields)] == fields
    assert names[start + len(fields)] == "label_smoothing"
    assert "optim" not in names and "config" not in names


@pytest.mark.parametrize(
    ("task", "defaults"),
    [
        (ClassificationTask, {}),
        (MaskedLMTask, {"lr": 5e-4, "warmup_steps": 0.06}),
        (Seq2SeqTask, {"lr": 1e-3}),
    ],
)
def test_every_optimizer_field_is_a_flag_with_the_tasks_default(task, defaults):
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(task, "model")
    fields = [f.name for f in dataclasses.fields(OptimizerConfig)]
    parsed = parser.get_defaults().model
    assert {k: parsed[k] for k in fields} == {**dataclasses.asdict(OptimizerConfig()), **defaults}
    help_text = " ".join(parser.format_help().split())
    assert "--model.lr LR peak learning rate of AdamW." in help_text
    assert "--model.weight_decay WEIGHT_DECAY AdamW weight decay (not applied" in help_text
    assert "--model.schedule SCHEDULE learning-rate schedule: a module of" in help_text


def test_the_optimizer_options_reach_the_module_and_its_checkpoint(tmp_path):
    model = ClassificationTask(**TINY, lr=3e-3, weight_decay=0.0, betas=(0.8, 0.9), min_lr=1e-4)
    optim = OptimizerConfig(lr=3e-3, weight_decay=0.0, betas=(0.8, 0.9), min_lr=1e-4)
    assert model.optim == optim
    assert {k: model.hparams[k] for k in ("lr", "weight_decay", "betas", "schedule")} == {
        "lr": 3e-3, "weight_decay": 0.0, "betas": (0.8, 0.9), "schedule": "cosine",
    }  # fmt: skip
    state = read_checkpoint(_fit_one_step(model, tmp_path))
    assert ClassificationTask.from_checkpoint(state).optim == optim


def test_a_checkpoint_from_before_the_schedule_option_loads_with_cosine():
    model = ClassificationTask(**TINY, lr=3e-3)
    hparams = {k: v for k, v in model.hparams.items() if k != "schedule"}  # as written before
    state = {"hyper_parameters": hparams, "state_dict": model.state_dict()}
    loaded = ClassificationTask.from_checkpoint(state)
    assert loaded.optim == model.optim and loaded.optim.schedule == "cosine"


def test_a_registered_schedule_is_taken_by_name_from_the_command_line(monkeypatch):
    monkeypatch.setitem(SCHEDULES, "half", lambda total, warmup, min_ratio: lambda step: 0.5)
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(ClassificationTask, "model")
    args = [f"--model.{k}={v}" for k, v in TINY.items()]
    model = parser.instantiate(parser.parse_args([*args, "--model.schedule=half"])).model
    model._trainer = SimpleNamespace(
        estimated_stepping_batches=10, gradient_clip_val=None, precision_plugin=None
    )
    optimizer = model.configure_optimizers()["optimizer"]
    assert [g["lr"] for g in optimizer.param_groups] == [pytest.approx(1e-4 * 0.5)] * 2
