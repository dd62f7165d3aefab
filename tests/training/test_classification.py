"""The LightningModule: defaults, optimizer and schedule, checkpoint content, FLOPs, NaN guard."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from tokenizers import Tokenizer
from torch.utils.flop_counter import FlopCounterMode

from tests.helpers import torch_threads
from tscratch.config import EncoderConfig
from tscratch.data.classification import TextClassificationData
from tscratch.errors import UserError
from tscratch.model import forward_flops
from tscratch.training.classification import ClassificationTask

TINY = dict(vocab_size=50, num_classes=3, d_model=16, num_heads=2, d_ff=32, num_layers=2)


def _with_trainer(model: ClassificationTask, **attributes) -> ClassificationTask:
    """Attach a stand-in for the few Trainer attributes a hook reads."""
    stand_in = {"gradient_clip_val": None, "precision_plugin": None, **attributes}
    model._trainer = SimpleNamespace(**stand_in)
    return model


def test_defaults_match_encoder_config():
    module_defaults = {
        name: p.default
        for name, p in inspect.signature(ClassificationTask.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    shared = [
        f
        for f in dataclasses.fields(EncoderConfig)
        if f.name in module_defaults and f.default is not dataclasses.MISSING
    ]
    assert len(shared) >= 15  # d_model ... attention_impl: the architecture switches
    drift = {
        f.name: (module_defaults[f.name], f.default)
        for f in shared
        if module_defaults[f.name] != f.default
    }
    assert not drift, f"ClassificationTask default != EncoderConfig default: {drift}"


def test_config_is_built_from_the_flat_arguments():
    model = ClassificationTask(**TINY, position="learned", ffn="geglu", norm_first=True, pad_id=3)
    assert model.config == EncoderConfig(
        vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=2, position="learned",
        ffn="geglu", norm_first=True, pad_id=3,
    )  # fmt: skip


def test_label_names_must_match_num_classes():
    with pytest.raises(ValueError, match=r"label_names has 2 names but num_classes is 3"):
        ClassificationTask(**TINY, label_names=["a", "b"])


def test_label_names_default_to_class_ids():
    assert ClassificationTask(**TINY).label_names == ["0", "1", "2"]


@pytest.mark.parametrize("warmup_steps", [4, 0.2], ids=["int", "fraction"])
def test_schedule_warms_up_then_decays_to_min_lr(warmup_steps):
    model = ClassificationTask(**TINY, lr=1e-3, min_lr=1e-4, warmup_steps=warmup_steps)
    config = _with_trainer(model, estimated_stepping_batches=20).configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert config["lr_scheduler"]["interval"] == "step"

    lrs = []
    for _ in range(20):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()

    assert lrs[:5] == pytest.approx([1e-3 * k / 5 for k in (1, 2, 3, 4, 5)])  # linear rise
    assert max(lrs) == lrs[4] == pytest.approx(1e-3)  # peak at the end of warmup
    assert all(a > b for a, b in itertools.pairwise(lrs[4:]))
    assert lrs[12] == pytest.approx(1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * 8 / 16)))
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)  # after the last step
    assert [g["lr"] for g in optimizer.param_groups] == [optimizer.param_groups[0]["lr"]] * 2


@pytest.mark.parametrize(
    ("plugin", "clip", "fused"),
    [
        (Precision(), 1.0, True),
        (MixedPrecision("bf16-mixed", "cpu"), 0.0, True),
        (MixedPrecision("bf16-mixed", "cpu"), 1.0, True),  # clipped by the task, not Lightning
        # 16-mixed's scaler: Lightning does not unscale a fused optimizer's gradients before
        # on_before_optimizer_step, so train/grad_norm would read scaled ones.
        (MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu")), 0.0, False),
    ],
)
def test_adamw_is_fused_unless_16_mixed_scales_the_gradients(plugin, clip, fused):
    model = _with_trainer(
        ClassificationTask(**TINY),
        estimated_stepping_batches=10, gradient_clip_val=clip, precision_plugin=plugin,
    )  # fmt: skip
    group = model.configure_optimizers()["optimizer"].param_groups[0]
    assert bool(group["fused"]) is fused and group["foreach"] is not fused


def test_a_resumed_optimizer_takes_this_runs_fused_choice_not_the_saved_one():
    scaled = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    model = _with_trainer(
        ClassificationTask(**TINY),
        estimated_stepping_batches=10, gradient_clip_val=1.0, precision_plugin=scaled,
    )  # fmt: skip
    saved = {"optimizer_states": [{"param_groups": [{"fused": True, "foreach": None}] * 2}]}
    model.on_load_checkpoint(saved)  # saved by a 32-true run, resumed under 16-mixed
    groups = saved["optimizer_states"][0]["param_groups"]
    assert all(g["fused"] is False and g["foreach"] is True for g in groups)


def test_optimizer_decays_only_projection_weights():
    model = ClassificationTask(**TINY, weight_decay=0.05, betas=(0.8, 0.9))
    optimizer = _with_trainer(model, estimated_stepping_batches=10).configure_optimizers()[
        "optimizer"
    ]
    decayed, undecayed = optimizer.param_groups
    assert isinstance(optimizer, torch.optim.AdamW)
    assert (decayed["weight_decay"], undecayed["weight_decay"]) == (0.05, 0.0)
    assert decayed["betas"] == (0.8, 0.9)
    assert all(p.ndim == 2 for p in decayed["params"])
    assert model.model.encoder.tok_emb.weight in undecayed["params"]
    assert len(decayed["params"]) + len(undecayed["params"]) == len(list(model.parameters()))


def test_freezing_keeps_embeddings_and_first_layers_fixed_through_a_step():
    model = ClassificationTask(
        **TINY, position="learned", type_vocab_size=2, embedding_norm=True,
        freeze_embeddings=True, freeze_layers=1, lr=0.1,
    )  # fmt: skip
    optimizer = _with_trainer(model, estimated_stepping_batches=10).configure_optimizers()[
        "optimizer"
    ]
    before = {n: p.detach().clone() for n, p in model.model.named_parameters()}
    ids = torch.randint(0, 50, (4, 7))
    model._loss(model(ids), torch.tensor([0, 1, 2, 0])).backward()
    optimizer.step()

    frozen = (
        "encoder.tok_emb.", "encoder.type_emb.", "encoder.positions.", "encoder.emb_norm.",
        "encoder.layers.0.",
    )  # fmt: skip
    names = [n for n, _ in model.model.named_parameters()]
    assert all(any(n.startswith(f) for n in names) for f in frozen)  # each one exists
    for name, param in model.model.named_parameters():
        changed = not torch.equal(param, before[name])
        assert changed != name.startswith(frozen), name
    in_optimizer = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert in_optimizer == {id(p) for p in model.parameters() if p.requires_grad}


def test_head_rate_and_layer_decay_reach_the_optimizer_and_the_schedule():
    model = ClassificationTask(**TINY, lr=1e-3, head_lr=1e-2, layer_lr_decay=0.5, min_lr=0.0)
    optimizers = _with_trainer(model, estimated_stepping_batches=10).configure_optimizers()
    groups = optimizers["optimizer"].param_groups  # LambdaLR keeps each peak as initial_lr
    peak = {id(p): g["initial_lr"] for g in groups for p in g["params"]}
    named = dict(model.model.named_parameters())
    assert peak[id(named["head.proj.weight"])] == pytest.approx(1e-2)
    assert peak[id(named["encoder.layers.1.ff.fc1.weight"])] == pytest.approx(5e-4)
    assert peak[id(named["encoder.layers.0.ff.fc1.weight"])] == pytest.approx(2.5e-4)
    assert peak[id(named["encoder.tok_emb.weight"])] == pytest.approx(1.25e-4)
    scheduler = optimizers["lr_scheduler"]["scheduler"]
    warmup_factor = scheduler.lr_lambdas[0](0)  # every group follows the same schedule
    assert [g["lr"] for g in groups] == pytest.approx(
        [b * warmup_factor for b in scheduler.base_lrs]
    )


def test_without_fine_tuning_options_there_are_two_groups():
    model = ClassificationTask(**TINY, head_lr=1e-4, lr=1e-4)  # a head rate equal to lr
    assert model.lr_scale() is None
    optimizer = _with_trainer(model, estimated_stepping_batches=10).configure_optimizers()
    assert len(optimizer["optimizer"].param_groups) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"freeze_layers": 3}, r"freeze_layers \(3\) must be between 0 and num_layers \(2\)"),
        ({"freeze_layers": -1}, r"freeze_layers \(-1\) must be between 0"),
        ({"head_lr": 0.0}, r"head_lr \(0.0\) must be positive, or unset to use lr"),
        ({"layer_lr_decay": 0.0}, r"layer_lr_decay \(0.0\) must be in \(0, 1\]"),
        ({"layer_lr_decay": 1.5}, r"layer_lr_decay \(1.5\) must be in \(0, 1\]"),
    ],
)
def test_bad_fine_tuning_options_are_one_line(arguments, message):
    with pytest.raises(UserError, match=message):
        ClassificationTask(**TINY, **arguments)


def test_bad_warmup_fraction_fails_in_configure_optimizers():
    model = ClassificationTask(**TINY, warmup_steps=1.0)
    model = _with_trainer(model, estimated_stepping_batches=10)
    with pytest.raises(
        ValueError, match=r"warmup_steps \(1\.0\) as a fraction must be in \[0, 1\)"
    ):
        model.configure_optimizers()


def test_forward_flops_against_a_hand_count():
    config = EncoderConfig(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=2)
    # per layer and token: qkv 2*16*48 + out 2*16*16 = 2048, feed-forward 2*(16*32 + 32*16) = 2048;
    # per layer and sequence: scores 2*8*8*16 + weighted sum 2*8*8*16 = 4096.
    assert forward_flops(config, batch_size=3, length=8) == 3 * (8 * 2 * 4096 + 2 * 4096)
    swiglu = dataclasses.replace(config, ffn="swiglu")  # three D x F matrices
    assert forward_flops(swiglu, batch_size=3, length=8) == 3 * (8 * 2 * 5120 + 2 * 4096)


@pytest.mark.parametrize("ffn", ["relu", "swiglu"])
def test_forward_flops_match_torch_flop_counter(ffn):
    model = ClassificationTask(**TINY, ffn=ffn, attention_impl="explicit", dropout=0.0).eval()
    ids = torch.randint(1, 50, (3, 8))
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model.model.encoder(ids)
    assert counter.get_total_flops() == forward_flops(model.config, batch_size=3, length=8)


def test_nan_loss_raises_naming_the_step():
    model = _with_trainer(ClassificationTask(**TINY), global_step=7)
    with torch.no_grad():
        model.model.head.proj.weight[0, 0] = float("nan")
    batch = {
        "input_ids": torch.randint(1, 50, (2, 8)),
        "attention_mask": torch.ones(2, 8, dtype=torch.bool),
        "labels": torch.tensor([0, 2]),
    }
    with pytest.raises(FloatingPointError, match=r"loss is nan at step 7; lower --model\.lr"):
        model.training_step(batch, 0)


# --- Checkpoints written by the CLI (tests/conftest.py: tiny_run) -------------------------------


def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str | int) and _plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str | torch.Tensor)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["last.ckpt", "best"])
def test_checkpoint_holds_plain_types_and_the_tokenizer(tiny_run, name):
    checkpoints = tiny_run.run / "checkpoints"
    path = next(checkpoints.glob("best-*.ckpt")) if name == "best" else checkpoints / name

    checkpoint = torch.load(path, map_location="cpu", weights_only=True)

    assert _plain(checkpoint["hyper_parameters"])
    assert _plain(checkpoint["rng_states"])
    labels = ["business", "entertainment", "politics", "sports", "tech"]
    assert checkpoint["label_names"] == checkpoint["hyper_parameters"]["label_names"] == labels
    assert checkpoint["max_length"] == 64
    tokenizer = Tokenizer.from_str(checkpoint["tokenizer_json"])
    assert tokenizer.get_vocab_size() == checkpoint["hyper_parameters"]["vocab_size"]
    assert tokenizer.encode("the market").ids[0] == tokenizer.token_to_id("[CLS]")

    model = ClassificationTask.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    assert model.hparams.d_model == 32
    assert (model.max_length, model.label_names) == (64, labels)
    assert model.tokenizer_json == checkpoint["tokenizer_json"]


def test_token_dropout_hides_real_tokens_but_never_the_first():
    torch.manual_seed(0)
    module = ClassificationTask(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1,
                            token_dropout=0.3)  # fmt: skip
    mask = torch.ones(64, 128, dtype=torch.bool)
    mask[:, 100:] = False  # padding stays padding

    dropped = module._drop_tokens(mask)

    assert dropped[:, 0].all()
    assert not dropped[:, 100:].any()
    hidden = (mask & ~dropped)[:, 1:100].float().mean().item()
    assert 0.27 < hidden < 0.33  # about token_dropout of the real tokens
    assert not (dropped & ~mask).any()


def test_token_dropout_off_returns_the_mask_unchanged():
    module = ClassificationTask(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1)
    mask = torch.ones(2, 8, dtype=torch.bool)

    assert module._drop_tokens(mask) is mask


@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_token_dropout_out_of_range_is_refused(value):
    with pytest.raises(ValueError, match=rf"token_dropout \({value}\) must be in \[0, 1\)"):
        ClassificationTask(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1,
                       token_dropout=value)  # fmt: skip


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, imported by dynamo
def test_compile_keeps_the_plain_state_dict_keys():
    # torch.compile is applied in place, so checkpoints load into an uncompiled model.
    kwargs = dict(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1)
    plain = ClassificationTask(**kwargs).state_dict()
    compiled = ClassificationTask(**kwargs, compile=True)

    assert list(compiled.state_dict()) == list(plain)
    ClassificationTask(**kwargs).load_state_dict(compiled.state_dict())


class GradientNorms(L.Callback):
    """The gradients' total norm as the optimizer stepped on them, and whether it was fused."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.fused: list[bool] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        self.fused.append(bool(trainer.optimizers[0].param_groups[0]["fused"]))


def test_a_fused_adamw_under_bf16_mixed_is_clipped(shared_cache, tmp_path):
    """Lightning's mixed precision refuses to clip a fused optimizer; under bf16-mixed (no
    scaler) the task clips it itself, so the step sees gradients of at most the clipping norm."""
    with torch_threads(1):
        L.seed_everything(0, verbose=False)
        data = TextClassificationData(
            dataset="bbc_news", vocab_size=500, max_length=32, batch_size=8,
            cache_dir=str(shared_cache),
        )  # fmt: skip
        data.prepare_data()
        data.setup("fit")
        model = ClassificationTask(
            **{**TINY, "vocab_size": data.vocab_size, "num_classes": data.num_classes},
            pad_id=data.pad_id, max_len=32, lr=1e-3,
        )  # fmt: skip
        norms = GradientNorms()
        trainer = L.Trainer(
            accelerator="cpu", precision="bf16-mixed", max_steps=3, gradient_clip_val=1e-3,
            limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
            enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
            callbacks=[norms],
        )  # fmt: skip
        trainer.fit(model, datamodule=data)
    assert norms.fused == [True] * 3
    assert len(norms.norms) == 3 and all(n <= 1e-3 * 1.001 for n in norms.norms)
    assert all(n > 0.9e-3 for n in norms.norms)  # clipped down to the norm, not zeroed
