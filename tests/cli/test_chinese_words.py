"""Chinese read as jieba's words (`--data.segmenter jieba`), end to end: the real fit on a tiny
config, then the checkpoint, the exported folder and its ONNX graph must all read the same words,
so an exported model predicts what it was trained on."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from tests.cli.test_chinese import LEARNED, TOPICS, _rows
from tests.helpers import TINY_YAML, fit_in_process
from tscratch.cli.classifiers import open_classifier
from tscratch.data.encoding import encode_ids
from tscratch.data.words import WORDS_MARK, jieba_installed
from tscratch.errors import UserError
from tscratch.export import export, load

pytestmark = pytest.mark.skipif(not jieba_installed(), reason="needs jieba (the zh extra)")

PROBE = {"体育": "记者报道球队在比赛中进球", "财经": "记者报道银行利率和股票市场"}


def _fit_words(tmp_path_factory, shared_cache, *extra: str) -> Path:
    folder = tmp_path_factory.mktemp("words")
    data = folder / "新闻.csv"
    Dataset.from_dict(_rows(300, random.Random(1))).to_csv(str(data), index=False)
    root = folder / "root"
    args = [
        "--config", TINY_YAML, "--data.dataset", data, "--data.segmenter", "jieba",
        "--data.vocab_size", "200", "--data.max_length", "32", "--data.batch_size", "16",
        "--trainer.max_epochs", "6", "--trainer.limit_train_batches", "1.0",
        "--trainer.limit_val_batches", "1.0", "--trainer.limit_test_batches", "1.0",
        "--trainer.default_root_dir", root, "--trainer.enable_progress_bar", "false",
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", root, "--baseline", "false", *extra,
    ]  # fmt: skip
    code, log = fit_in_process(args, shared_cache)
    assert code == 0, log
    return next((root / "lightning_logs" / "version_0" / "checkpoints").glob("best-*.ckpt"))


@pytest.fixture(scope="module")
def best(tmp_path_factory, shared_cache) -> Path:
    return _fit_words(tmp_path_factory, shared_cache)


def test_the_model_reads_words_and_predicts_the_topics(best):
    classifier = open_classifier(best)
    tokenizer = classifier.tokenizer
    assert tokenizer.token_to_id(WORDS_MARK) is not None
    ids = encode_ids(tokenizer, ["记者报道球队"], 32)[0]
    assert [tokenizer.id_to_token(i) for i in ids] == ["[CLS]", "记者", "报道", "球队"]
    unseen = _rows(60, random.Random(7))  # new texts of the training texts' kind
    predicted = [p["label"] for p in classifier.predict(unseen["text"])]
    hits = sum(p == label for p, label in zip(predicted, unseen["label"], strict=True))
    assert hits / len(predicted) >= LEARNED


def test_export_and_onnx_read_the_same_words_as_the_checkpoint(best, tmp_path):
    pytest.importorskip("onnxruntime")
    folder = export(best, tmp_path / "exported", onnx=True)
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert WORDS_MARK in [t["content"] for t in saved["added_tokens"]]
    texts = [*PROBE.values(), "今天的比赛很精彩", "hello 手机"]
    reference = open_classifier(best).logits(texts)
    assert torch.allclose(load(folder).logits(texts), reference, atol=1e-5)
    assert torch.allclose(load(folder, runtime="onnx").logits(texts), reference, atol=1e-4)
    # The same ids read as characters (what a folder that forgot the words would do) differ.
    chars = load(folder).logits_of_ids(
        [[2, *[load(folder).tokenizer.token_to_id(c) or 1 for c in t]] for t in texts[:2]]
    )
    assert not torch.allclose(chars, reference[:2], atol=1e-3)
    assert set(TOPICS) == set(load(folder).labels)


def test_words_mixed_with_their_characters_read_the_same_after_export(
    tmp_path_factory, shared_cache, tmp_path
):
    # --model.word_chars: the checkpoint carries each word's characters, filled from the
    # tokenizer when the fit started, and the folder and ONNX read them as the checkpoint does.
    pytest.importorskip("onnxruntime")
    best = _fit_words(tmp_path_factory, shared_cache, "--model.word_chars", "3")
    classifier = open_classifier(best)
    table = torch.load(best, weights_only=True)["state_dict"]["model.encoder.word_char_ids"]
    ids = [classifier.tokenizer.token_to_id(t) for t in ("记者", "记", "者", "[PAD]")]
    assert table[ids[0]].tolist() == ids[1:]
    folder = export(best, tmp_path / "exported", onnx=True)
    assert json.loads((folder / "config.json").read_text())["encoder"]["word_chars"] == 3
    texts = [*PROBE.values(), "今天的比赛很精彩"]
    reference = classifier.logits(texts)
    assert torch.allclose(load(folder).logits(texts), reference, atol=1e-5)
    assert torch.allclose(load(folder, runtime="onnx").logits(texts), reference, atol=1e-4)
    unseen = _rows(60, random.Random(7))
    predicted = [p["label"] for p in classifier.predict(unseen["text"])]
    hits = sum(p == label for p, label in zip(predicted, unseen["label"], strict=True))
    assert hits / len(predicted) >= LEARNED


def test_the_plan_chooses_words_for_chinese_and_counts_them(tmp_path, shared_cache):
    data = tmp_path / "新闻.csv"
    Dataset.from_dict(_rows(300, random.Random(1))).to_csv(str(data), index=False)
    args = ["--data.dataset", data, "--data.segmenter", "auto", "--data.max_length", "auto",
            "--trainer.default_root_dir", tmp_path / "root", "--plan"]  # fmt: skip
    code, log = fit_in_process(args, shared_cache)
    assert code == 0, log
    assert re.search(r"  data.segmenter\s+jieba\s+Chinese: jieba's words are the tokens", log)
    # The texts' words, not their characters, are what the plan counts: "记者报道球队" is 3.
    words = re.search(r"about (\d+) tokens per text", log)
    chars = fit_in_process([*args[:3], "null", *args[4:]], shared_cache)[1]
    assert words and int(words[1]) < int(re.search(r"about (\d+) tokens per text", chars)[1])
    assert re.search(r"  data.segmenter\s+None\s+", chars) is None  # asked for, not chosen


def test_a_student_reading_its_teachers_tokenizer_is_not_planned_in_words(tmp_path, shared_cache):
    from tscratch.recipe import commands

    if not commands.teacher_installed("minilm"):  # its student reads MiniLM's vocabulary
        pytest.skip("needs the MiniLM teacher package")
    data = tmp_path / "新闻.csv"
    Dataset.from_dict(_rows(300, random.Random(1))).to_csv(str(data), index=False)
    args = ["--data.dataset", data, "--data.segmenter", "auto", "--recipe", "distil",
            "--teacher_init", "minilm", "--trainer.default_root_dir", tmp_path / "root",
            "--plan"]  # fmt: skip
    code, log = fit_in_process(args, shared_cache)
    assert code == 0, log
    assert re.search(r"  data.segmenter\s+None\s+the student reads the teacher's tokenizer", log)
    assert "jieba's words are the tokens" not in log


def test_a_words_model_without_jieba_is_one_line(best, monkeypatch):
    classifier = open_classifier(best)
    monkeypatch.setitem(sys.modules, "jieba", None)
    with pytest.raises(UserError, match=r"jieba package: pip install jieba \(the zh extra\)"):
        classifier.predict(["记者报道球队"])
