"""The validation pictures callback and its fonts: state, tags, other loggers, Chinese text."""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tscratch.config import EncoderConfig
from tscratch.data.classification import TextClassificationData
from tscratch.model import TransformerClassifier
from tscratch.training import fonts, pictures
from tscratch.training.pictures import (
    ValidationPictures,
    attention_heads_figure,
    attention_mean_figure,
    confusion_figure,
)

CHINESE_TOKENS = ["[CLS]", "中", "##文", "新闻", "体育", "财经", "abc"]
LABELS = ["体育", "财经", "科技"]


def _render(fig: Figure) -> None:
    """Draw to PNG: missing glyphs are only found (and warned about) at draw time."""
    FigureCanvasAgg(fig).print_png(io.BytesIO())


def _missing_glyph_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if "missing from font" in str(w.message)]


@pytest.fixture
def fresh_font_caches():
    """Clear the font lookups' caches before and after, so monkeypatched fonts do not leak."""
    caches = (fonts.covering_family, fonts._candidates, fonts._default_family, fonts._charmap)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


# --- fonts ----------------------------------------------------------------------------------


def test_chinese_heatmaps_and_labels_draw_without_missing_glyphs():
    weights = torch.rand(2, len(CHINESE_TOKENS), len(CHINESE_TOKENS)).softmax(-1)  # (H, T, T)
    figures = [
        attention_mean_figure(weights, CHINESE_TOKENS, layer=0),
        attention_heads_figure(weights, CHINESE_TOKENS, layer=0),
        confusion_figure(torch.tensor([[3, 1, 0], [0, 2, 1], [1, 0, 4]]), LABELS),
    ]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for fig in figures:
            _render(fig)
    assert not _missing_glyph_warnings(record)
    # Each Chinese character is drawn (a CJK font is installed) or named (none is).
    ticks = [t.get_text() for t in figures[0].axes[0].get_xticklabels()]
    assert ticks[0] == "[CLS]" and ticks[-1] == "abc"
    assert ticks[1] in ("中", "U+4E2D") and ticks[2] in ("##文", "##U+6587")


def test_the_default_font_warns_on_chinese_so_the_test_above_can_fail():
    fig = Figure()
    fig.subplots().set_xticks([0], ["中"], fontfamily="DejaVu Sans")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _render(fig)
    assert _missing_glyph_warnings(record)


def test_characters_no_font_covers_become_code_points(monkeypatch, fresh_font_caches):
    default = (fonts._default_family(), fonts._default_path())
    monkeypatch.setattr(fonts, "_candidates", lambda: (default,))  # as on a machine without CJK
    shown, families = fonts.readable_labels(["中文", "##新", "abc"])
    assert shown == ["U+4E2DU+6587", "##U+65B0", "abc"]
    assert families == ["sans-serif"]


def test_a_font_that_covers_a_character_joins_the_fallback(fresh_font_caches):
    # SCRIPT SMALL G: not in DejaVu Sans, but in the STIX fonts matplotlib ships.
    shown, families = fonts.readable_labels(["x\u210a"])
    assert shown == ["x\u210a"]
    assert families[0] == "sans-serif" and len(families) == 2
    fig = Figure()
    fig.subplots().set_xticks([0], shown, fontfamily=families)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _render(fig)
    assert not _missing_glyph_warnings(record)


# --- the callback ---------------------------------------------------------------------------


def _stand_ins(
    tmp_path: Path,
    datamodule=None,
    num_classes: int = 3,
    vocab_size: int = 50,
    type_vocab_size: int = 0,
):
    """A Trainer and a LightningModule reduced to the public attributes the callback reads."""
    config = EncoderConfig(
        vocab_size=vocab_size,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_layers=2,
        max_len=64,
        dropout=0.0,
        type_vocab_size=type_vocab_size,
    )
    module = SimpleNamespace(
        model=TransformerClassifier(config, num_classes).eval(),
        label_names=LABELS[:num_classes],
        device=torch.device("cpu"),
    )
    trainer = SimpleNamespace(
        loggers=[TensorBoardLogger(str(tmp_path), name="", version=0)],
        sanity_checking=False,
        is_global_zero=True,
        current_epoch=0,
        global_step=7,
        datamodule=datamodule,
        lightning_module=module,  # the callback asks it whether the labels are multi-label
    )
    return trainer, module


def _wrong_logits(labels: torch.Tensor, num_classes: int = 3) -> torch.Tensor:
    """Logits (B, C) that predict the next class: every row misclassified."""
    return torch.nn.functional.one_hot((labels + 1) % num_classes, num_classes).float()


def _run_epoch(callback, trainer, module, batches) -> None:
    callback.setup(trainer, module, "fit")
    callback.on_validation_epoch_start(trainer, module)
    for i, batch in enumerate(batches):
        logits = _wrong_logits(batch["labels"])
        callback.on_validation_batch_end(trainer, module, logits, batch, i)
    callback.on_validation_epoch_end(trainer, module)


def _events(trainer) -> EventAccumulator:
    logger = trainer.loggers[0]
    logger.experiment.flush()
    accumulator = EventAccumulator(logger.log_dir, size_guidance={"images": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def _misclassified_text(events: EventAccumulator) -> str:
    return events.Tensors("misclassified/text_summary")[-1].tensor_proto.string_val[0].decode()


def _batch(texts_index: list[int] | None = None) -> dict[str, torch.Tensor]:
    ids = torch.tensor([[2, 5, 6, 7, 0, 0, 0, 0], [2, 8, 9, 0, 0, 0, 0, 0]])
    batch = {"input_ids": ids, "attention_mask": ids != 0, "labels": torch.tensor([0, 2])}
    if texts_index is not None:
        batch["index"] = torch.tensor(texts_index)
    return batch


def test_callback_logs_the_tags_from_its_own_state(tmp_path):
    trainer, module = _stand_ins(tmp_path)
    callback = ValidationPictures()
    _run_epoch(callback, trainer, module, [_batch()])
    tags = _events(trainer).Tags()
    assert "confusion" in tags["images"]
    for layer in (0, 1):
        assert {f"attention/layer_{layer}/mean", f"attention/layer_{layer}/heads"} <= set(
            tags["images"]
        )
    assert "misclassified/text_summary" in tags["tensors"]  # add_text's tag for "misclassified"
    assert callback.heatmap_example.tolist() == [2, 5, 6, 7]  # the first row's real tokens
    assert [(t, p) for _, t, p in callback.misclassified] == [("体育", "财经"), ("科技", "体育")]
    assert callback.confusion.compute().sum() == 2


def test_misclassified_rows_show_the_datamodule_text_or_decoded_ids(tmp_path):
    data = SimpleNamespace(text=lambda split, i: f"{split} row {i}：原文")
    trainer, module = _stand_ins(tmp_path, datamodule=data)
    callback = ValidationPictures()
    _run_epoch(callback, trainer, module, [_batch(texts_index=[4, 9])])
    assert [text for text, _, _ in callback.misclassified] == [
        "validation row 4：原文",
        "validation row 9：原文",
    ]
    _run_epoch(callback, trainer, module, [_batch()])  # no index: ids, as no tokenizer is known
    assert [text for text, _, _ in callback.misclassified] == ["[2, 5, 6, 7]", "[2, 8, 9]"]


def test_the_heatmap_of_a_text_pair_is_drawn_with_its_token_types(tmp_path):
    trainer, module = _stand_ins(tmp_path, type_vocab_size=2)
    model, calls = module.model, []
    forward = model.forward

    def spy(*args, **kwargs):  # records what the heatmap hands the model
        calls.append(kwargs.get("token_type_ids"))
        return forward(*args, **kwargs)

    model.forward = spy
    pair = _batch()  # rows [CLS] 5 [SEP] 7 and [CLS] 8 [SEP] as ids 2 5 6 7 / 2 8 9
    pair["token_type_ids"] = torch.tensor([[0, 0, 0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]])
    callback = ValidationPictures()
    _run_epoch(callback, trainer, module, [pair])

    assert callback.heatmap_types.tolist() == [0, 0, 0, 1]  # the first row's, real tokens only
    assert [t.tolist() for t in calls] == [[[0, 0, 0, 1]]]
    # The types change what the model attends to, so leaving them out would draw another map.
    ids, types = callback.heatmap_example[None], callback.heatmap_types[None]
    with torch.no_grad():
        typed = forward(ids, token_type_ids=types, need_weights=True).attentions[0]
        untyped = forward(ids, need_weights=True).attentions[0]
    assert not torch.allclose(typed, untyped)
    # Single texts: no types are passed (and none are kept).
    plain = ValidationPictures()
    calls.clear()
    _run_epoch(plain, trainer, module, [_batch()])
    assert plain.heatmap_types is None and calls == [None]


def _image_steps(events: EventAccumulator, tag: str) -> list[int]:
    return [image.step for image in events.Images(tag)]


def _validate(callback, trainer, module, epochs: list[int], end: bool = True) -> list[int]:
    """One validation per entry of `epochs` (0-based, repeats allowed), at steps 10, 20, ...;
    then the end of training. The steps the attention maps were drawn at."""
    for i, epoch in enumerate(epochs):
        trainer.current_epoch, trainer.global_step = epoch, 10 * (i + 1)
        _run_epoch(callback, trainer, module, [_batch()])
    if end:
        callback.on_train_end(trainer, module)
    events = _events(trainer)
    assert _image_steps(events, "confusion") == [10 * (i + 1) for i in range(len(epochs))]
    drawn = _image_steps(events, "attention/layer_0/mean")
    assert _image_steps(events, "attention/layer_1/heads") == drawn
    return drawn


@pytest.mark.parametrize(
    ("epochs", "drawn"),
    [
        (range(10), [10, 20, 40, 80, 100]),  # after epochs 1, 2, 4, 8, and the end
        (range(8), [10, 20, 40, 80]),  # the 8th epoch drew the end's maps already
        ([0], [10]),
        ([2, 5, 8, 11], [10, 20, 30, 40]),  # validation every 3rd epoch: 3, 6 (>= 4), 9 (>= 8), end
        ([0, 0, 1, 1, 2, 2, 3, 3], [10, 30, 70, 80]),  # twice per epoch: once in epochs 1, 2, 4
        ([4, 5, 6, 7, 8], [10, 40, 50]),  # resumed in epoch 5: its first validation, 8, the end
    ],
)
def test_attention_maps_are_drawn_on_a_doubling_schedule_and_at_the_end(tmp_path, epochs, drawn):
    trainer, module = _stand_ins(tmp_path)
    assert _validate(ValidationPictures(), trainer, module, list(epochs)) == drawn


def test_every_epoch_draws_attention_when_asked(tmp_path):
    trainer, module = _stand_ins(tmp_path)
    callback = ValidationPictures(attention_every_epoch=True)
    assert _validate(callback, trainer, module, [0, 1, 2], end=False) == [10, 20, 30]


def test_the_end_of_training_draws_in_eval_mode(tmp_path, monkeypatch):
    trainer, module = _stand_ins(tmp_path)
    modes = []
    monkeypatch.setattr(
        pictures, "attention_figures", lambda model, *_: modes.append(model.training) or []
    )
    callback = ValidationPictures()
    trainer.current_epoch, trainer.global_step = 2, 30  # the first validation: drawn
    _run_epoch(callback, trainer, module, [_batch()])
    assert modes == [False]
    trainer.global_step = 40  # trained on without validating
    module.model.train()  # as Lightning leaves it after the last training step
    callback.on_train_end(trainer, module)
    assert modes == [False, False] and module.model.training  # drawn in eval mode, restored


def test_nothing_is_collected_or_drawn_during_the_sanity_check(tmp_path):
    trainer, module = _stand_ins(tmp_path)
    trainer.sanity_checking = True
    callback = ValidationPictures()
    _run_epoch(callback, trainer, module, [_batch()])
    assert callback.misclassified == [] and callback.heatmap_example is None
    assert not list(tmp_path.rglob("events.*"))


def test_other_loggers_get_one_notice_and_no_pictures(tmp_path, caplog):
    trainer, module = _stand_ins(tmp_path)
    trainer.loggers = [CSVLogger(str(tmp_path))]
    callback = ValidationPictures()
    with caplog.at_level(logging.INFO, logger="tscratch"):
        for _ in range(3):  # fit, then validate and test again with the same callback
            _run_epoch(callback, trainer, module, [_batch()])
    notices = [r for r in caplog.records if "TensorBoard only" in r.getMessage()]
    assert len(notices) == 1 and "CSVLogger" in notices[0].getMessage()
    assert callback.misclassified == [] and callback.confusion is None


# --- Chinese data through the data module ---------------------------------------------------

TOPICS = {
    "体育": "足球比赛球队进球冠军",
    "财经": "股票市场银行利率投资",
    "科技": "手机芯片软件网络电脑",
}


@pytest.fixture
def chinese_data(tmp_path: Path, data_cache: str) -> TextClassificationData:
    rows = {"text": [], "label": []}
    for i in range(60):
        label = list(TOPICS)[i % 3]
        words = TOPICS[label]
        rows["text"].append(f"第{i}条：{words[i % 5 :]}{words[: i % 5]}，今天的新闻。")
        rows["label"].append(label)
    path = tmp_path / "news.csv"
    Dataset.from_dict(rows).to_csv(str(path), index=False)
    data = TextClassificationData(
        dataset=str(path), vocab_size=200, max_length=32, batch_size=4, cache_dir=data_cache
    )
    data.setup("fit")
    return data


def test_chinese_misclassified_texts_are_the_original_strings(tmp_path, chinese_data):
    batches = list(chinese_data.val_dataloader())
    assert all("index" in b for b in batches)
    originals = {chinese_data.text("validation", i) for b in batches for i in b["index"].tolist()}
    assert len(originals) == len(chinese_data.split("validation"))
    trainer, module = _stand_ins(tmp_path, chinese_data, vocab_size=chinese_data.vocab_size)
    module.label_names = chinese_data.label_names

    callback = ValidationPictures()
    _run_epoch(callback, trainer, module, batches)

    texts = [text for text, _, _ in callback.misclassified]
    assert texts and set(texts) <= originals  # "第3条：…", not "第 3 条 ：…" decoded from ids
    logged = _misclassified_text(_events(trainer))
    assert all(text in logged for text in texts)


def test_head_panels_name_tokens_on_the_outer_panels_only():
    tokens = [f"t{i}" for i in range(5)]
    fig = attention_heads_figure(torch.rand(6, 5, 5).softmax(-1), tokens, layer=0)  # 2 x 4 grid
    named = [
        (bool([t for t in ax.get_xticklabels() if t.get_text()]),
         bool([t for t in ax.get_yticklabels() if t.get_text()]))
        for ax in fig.axes[:6]
    ]  # fmt: skip
    # keys under the lowest panel of each column, queries left of each row's first panel
    assert named == [
        (False, True), (False, False), (True, False), (True, False), (True, True), (True, False)
    ]  # fmt: skip
    assert [t.get_text() for t in fig.axes[4].get_xticklabels()] == tokens
