"""Exported models of text pairs: config.json records the pair column, PyTorch and ONNX take
token types, and `predict(texts, pairs)` refuses what does not fit the model.

A tiny untrained pair classifier packed the way fit.py packs checkpoints (fast); the real
training run on BBC pairs is in tests/cli/test_pairs.py.
"""

from __future__ import annotations

import json

import pytest
import torch

import tscratch
from tests.test_export import CORPUS, LABELS
from tests.test_export import checkpoint as single_checkpoint  # noqa: F401 - a fixture
from tscratch.config import EncoderConfig
from tscratch.data.encoding import encode_texts
from tscratch.data.tokenizer import train_tokenizer
from tscratch.errors import UserError
from tscratch.export import export, from_checkpoint, load
from tscratch.export.onnx_graph import export_onnx, onnx_forward
from tscratch.model import TransformerClassifier

TEXTS = ["cheap prizes", "the lazy dog " * 8, "eggs", "a sunny breakfast with ham"]
PAIRS = ["a spam message", "ham", "the quick brown fox jumps over the lazy dog " * 3, "eggs"]


@pytest.fixture(scope="module")
def pair_checkpoint() -> dict:
    """A fit.py-shaped checkpoint of an untrained d_model 16 classifier of text pairs (columns
    `question` and `answer`, two token types)."""
    torch.manual_seed(0)
    tokenizer = train_tokenizer(CORPUS, "wordpiece", vocab_size=80, max_chars=1000)
    config = EncoderConfig(
        vocab_size=tokenizer.get_vocab_size(), d_model=16, num_heads=2, d_ff=32, num_layers=2,
        max_len=32, dropout=0.0, norm_first=True, pad_id=tokenizer.token_to_id("[PAD]"),
        type_vocab_size=2,
    )  # fmt: skip
    model = TransformerClassifier(config, len(LABELS), pooling="mean")
    with torch.no_grad():  # large type embeddings: a runtime that dropped them would show
        model.encoder.type_emb.weight.normal_(std=1.0)
    hparams = {**config.to_dict(), "num_classes": len(LABELS), "label_names": LABELS}
    return {
        "hyper_parameters": {**hparams, "pooling": "mean", "lr": 1e-3},
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "datamodule_hyper_parameters": {
            "dataset": "qa.csv",
            "text_column": "question",
            "text_pair_column": "answer",
        },
        "tokenizer_json": tokenizer.to_str(),
        "max_length": 20,
        "label_names": LABELS,
    }


@pytest.fixture(scope="module")
def pair_folder(pair_checkpoint, tmp_path_factory):
    """The pair checkpoint exported with model.onnx."""
    pytest.importorskip("onnxruntime")
    return export(pair_checkpoint, tmp_path_factory.mktemp("exports") / "qa", onnx=True)


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


def _reference(checkpoint: dict, texts, pairs) -> torch.Tensor:
    """The checkpoint's network on `encode_texts` batches: what every runtime must match."""
    model = tscratch.export.classifier_from_checkpoint(checkpoint).eval()
    classifier = from_checkpoint(checkpoint)
    batch = encode_texts(classifier.tokenizer, texts, checkpoint["max_length"], 0, pairs=pairs)
    with torch.no_grad():
        return model(
            batch["input_ids"], batch["attention_mask"], token_type_ids=batch["token_type_ids"]
        ).logits


def test_config_records_the_pair_columns_and_format_2(pair_folder):
    config = json.loads((pair_folder / "config.json").read_text())
    assert (config["text_column"], config["text_pair_column"]) == ("question", "answer")
    assert config["format_version"] == tscratch.export.FORMAT_VERSION == 2
    assert config["encoder"]["type_vocab_size"] == 2
    card = (pair_folder / "README.md").read_text()
    assert "reads text pairs as `[CLS] text [SEP] text_pair [SEP]`" in card
    assert "text_pair_column `answer`" in card and "`token_type_ids` (batch, sequence)" in card
    assert 'classifier.predict(["a first text"], ["its pair"])' in card


def test_a_single_text_export_stays_as_it_was(single_checkpoint, tmp_path):  # noqa: F811
    config = json.loads((export(single_checkpoint, tmp_path / "one") / "config.json").read_text())
    assert "text_pair_column" not in config and "text_column" not in config
    assert config["format_version"] == 1


def test_torch_and_onnx_match_the_network_on_pairs(pair_folder, pair_checkpoint):
    expected = _reference(pair_checkpoint, TEXTS, PAIRS)
    torch_run, onnx_run = tscratch.load(pair_folder), load(pair_folder, runtime="onnx")

    torch.testing.assert_close(
        torch_run.logits(TEXTS, PAIRS, batch_size=3), expected, atol=1e-6, rtol=0
    )
    torch.testing.assert_close(onnx_run.logits(TEXTS, PAIRS), expected, atol=1e-4, rtol=0)
    in_memory = from_checkpoint(pair_checkpoint)
    assert in_memory.predict(TEXTS, PAIRS) == torch_run.predict(TEXTS, PAIRS)
    # The token types reach the network: with all of them 0 the logits move.
    ids, types = torch_run.encode_pairs(TEXTS, PAIRS)
    zeros = [[0] * len(t) for t in types]
    assert not torch.allclose(torch_run.logits_of_ids(ids, 4, zeros), expected, atol=1e-3)


def test_predict_returns_both_texts(pair_folder):
    results = load(pair_folder).predict(TEXTS, PAIRS, batch_size=2)
    assert [(r["text"], r["text_pair"]) for r in results] == list(zip(TEXTS, PAIRS, strict=True))
    for result in results:
        assert list(result) == ["text", "text_pair", "label", "probabilities"]
        assert sum(result["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)


def test_the_onnx_graph_takes_token_types_only_for_pairs(pair_folder, tmp_path, tiny_config):
    onnx = pytest.importorskip("onnx")
    inputs = [i.name for i in onnx.load(str(pair_folder / "model.onnx")).graph.input]
    assert inputs == ["input_ids", "attention_mask", "token_type_ids"]
    single = TransformerClassifier(tiny_config, 3).eval()
    export_onnx(single, 16, tmp_path / "single.onnx")
    single_inputs = [i.name for i in onnx.load(str(tmp_path / "single.onnx")).graph.input]
    assert single_inputs == ["input_ids", "attention_mask"]
    ids = torch.randint(4, 23, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    with torch.no_grad():
        expected = single(ids, mask).logits
    torch.testing.assert_close(onnx_forward(tmp_path / "single.onnx")(ids, mask), expected,
                               atol=1e-4, rtol=0)  # fmt: skip


# --- what does not fit the model: one line ------------------------------------------------------


def test_a_pair_model_refuses_single_texts(pair_folder):
    with pytest.raises(
        UserError,
        match=r"^this model reads text pairs \(trained with text_pair_column 'answer'\); pass one "
        r"pair per text: predict\(texts, pairs\)$",
    ):
        load(pair_folder).predict(TEXTS)


def test_a_single_text_model_refuses_pairs(single_checkpoint):  # noqa: F811
    with pytest.raises(
        UserError, match=r"^this model reads single texts, not pairs; call predict\(texts\)$"
    ):
        from_checkpoint(single_checkpoint).predict(TEXTS, PAIRS)


def test_pairs_and_texts_must_match_in_number(pair_folder):
    with pytest.raises(UserError, match=r"^4 texts but 1 text pairs; give one pair per text$"):
        load(pair_folder).predict(TEXTS, PAIRS[:1])


def test_a_pair_checkpoint_without_token_types_is_refused(single_checkpoint, tmp_path):  # noqa: F811
    data = {**single_checkpoint["datamodule_hyper_parameters"], "text_pair_column": "answer"}
    broken = {**single_checkpoint, "datamodule_hyper_parameters": data}
    with pytest.raises(
        UserError,
        match=r"^the checkpoint was trained on text pairs \('answer'\) but its model has "
        r"type_vocab_size 0; was it written by tscratch fit\?$",
    ):
        export(broken, tmp_path / "out")
    assert not (tmp_path / "out").exists()
