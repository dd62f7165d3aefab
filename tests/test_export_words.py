"""The model card of a model that reads Chinese as jieba's words says so, where a program that
reads `tokenizer.json` itself (the ONNX recipe) needs to know it; a character model's card does
not."""

from __future__ import annotations

import pytest
import torch

from tests.test_export import checkpoint  # noqa: F401 - a fixture
from tscratch.config import EncoderConfig
from tscratch.data.tokenizer import train_tokenizer
from tscratch.data.words import jieba_installed
from tscratch.export import export
from tscratch.model import TransformerClassifier

REVIEWS = ["酒店的服务很不错，房间也干净。", "房间太小，早餐很一般，非常失望。"] * 4
CUT_FIRST = "Tokenize with `tokenizer.json` (the text cut into jieba's words first, as above)"


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


def words_checkpoint() -> dict:
    """A fit.py-shaped checkpoint of an untrained d_model 16 model reading jieba's words."""
    torch.manual_seed(0)
    tokenizer = train_tokenizer(REVIEWS, "wordpiece", 60, 1000, segmenter="jieba")
    config = EncoderConfig(
        vocab_size=tokenizer.get_vocab_size(), d_model=16, num_heads=2, d_ff=32, num_layers=1,
        max_len=32, pad_id=tokenizer.token_to_id("[PAD]"),
    )  # fmt: skip
    model = TransformerClassifier(config, 2, pooling="mean")
    hparams = {**config.to_dict(), "num_classes": 2, "label_names": ["好", "差"]}
    return {
        "hyper_parameters": {**hparams, "pooling": "mean"},
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "datamodule_hyper_parameters": {"dataset": "reviews.csv", "segmenter": "jieba"},
        "tokenizer_json": tokenizer.to_str(),
        "max_length": 24,
        "label_names": ["好", "差"],
    }


@pytest.mark.skipif(not jieba_installed(), reason="needs jieba (the zh extra)")
def test_the_card_of_a_words_model_says_texts_are_cut_into_words(tmp_path, checkpoint):  # noqa: F811
    pytest.importorskip("onnxruntime")
    card = (export(words_checkpoint(), tmp_path / "words", onnx=True) / "README.md").read_text()
    assert "Chinese is read as jieba's words (`[JIEBA]` in `tokenizer.json` records it)" in card
    assert CUT_FIRST in card  # the ONNX recipe
    chars = (export(checkpoint, tmp_path / "chars", onnx=True) / "README.md").read_text()
    assert "jieba" not in chars and "Tokenize with `tokenizer.json`, cut to" in chars
