"""Chinese text end to end: a CSV of Chinese news snippets with Chinese label names through the
real fit.py (tiny config, ~10 s), then the checkpoint's predictions and the TF-IDF bar on the
same split. The topic is carried by two-character words inside shared filler, so neither
whitespace nor a lucky character decides it."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from tests.helpers import TINY_YAML, fit_in_process
from tscratch.cli.classifiers import open_classifier
from tscratch.data.splits import load_labeled_splits
from tscratch.export import export, load

TOPICS = {
    "体育": ["足球", "比赛", "球队", "进球", "冠军", "球员"],
    "财经": ["股票", "市场", "银行", "利率", "投资", "企业"],
    "科技": ["手机", "芯片", "软件", "网络", "电脑", "数据"],
}
FILLER = "今天记者报道说这件事情引起了很多人的关注大家都在讨论未来会怎样"
LEARNED = 0.8
"""Test accuracy the run must reach (chance is 1/3): each text holds two words of its topic."""


def _rows(n: int, rng: random.Random) -> dict[str, list[str]]:
    rows = {"text": [], "label": []}
    for _ in range(n):
        label = rng.choice(list(TOPICS))
        words = rng.sample(TOPICS[label], 2)
        start = rng.randrange(len(FILLER) - 12)
        pieces = [FILLER[start : start + 5], words[0], FILLER[start + 5 : start + 9], words[1]]
        rows["text"].append("".join(pieces) + "。")
        rows["label"].append(label)
    return rows


@pytest.fixture(scope="module")
def chinese_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chinese") / "新闻.csv"
    Dataset.from_dict(_rows(300, random.Random(0))).to_csv(str(path), index=False)
    return path


@pytest.mark.slow
def test_fit_learns_chinese_topics_and_predicts_their_names(chinese_csv, shared_cache, tmp_path):
    root = tmp_path / "root"
    args = [
        "--config", TINY_YAML, "--data.dataset", chinese_csv, "--data.vocab_size", "200",
        "--data.max_length", "auto", "--data.batch_size", "16", "--trainer.max_epochs", "8",
        "--model.bigram_buckets", "auto", "--model.ema_steps", "0.25",
        "--trainer.limit_train_batches", "1.0", "--trainer.limit_val_batches", "1.0",
        "--trainer.limit_test_batches", "1.0", "--trainer.default_root_dir", root,
        "--trainer.enable_progress_bar", "false",
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", root,
    ]  # fmt: skip
    code, log = fit_in_process(args, shared_cache)
    assert code == 0, log

    # Lengths are estimated one token per ideograph: ~20 characters, so 32 positions; the
    # tokens are single characters, so adjacent pairs get embeddings.
    assert re.search(r"data\.max_length\s+32\s", log), log
    assert re.search(r"model\.bigram_buckets\s+65536\s+\d+% of the tokens are single CJK", log)
    assert "3 classes ['体育', '科技', '财经']" in log  # the CSV's own label names
    average = re.search(r"averaging the weights over about the last (\d+) of (\d+) steps", log)
    assert average and int(average[1]) == round(0.25 * int(average[2])), log
    tested = float(re.search(r"test accuracy (\d\.\d+)", log)[1])
    assert tested >= LEARNED, log

    best = next((root / "lightning_logs" / "version_0" / "checkpoints").glob("best-*.ckpt"))
    classifier = open_classifier(best)
    assert sorted(classifier.labels) == sorted(TOPICS)
    # Each ideograph is a token of its own, as in BERT: the vocabulary holds the characters.
    assert classifier.tokenizer.encode("足球", add_special_tokens=False).tokens == ["足", "球"]
    probe = {"体育": "记者报道球队在比赛中进球", "财经": "记者报道银行利率和股票市场"}
    predicted = classifier.predict(list(probe.values()))
    assert [p["label"] for p in predicted] == list(probe)

    # Training wrote the pair table (it starts at zero), and an exported folder keeps it.
    table = torch.load(best, weights_only=True)["state_dict"]["model.encoder.bigram_emb.weight"]
    assert table.shape == (65536, 32) and table.abs().sum(-1).count_nonzero() > 100
    folder = export(best, tmp_path / "exported")
    assert json.loads((folder / "config.json").read_text())["encoder"]["bigram_buckets"] == 65536
    exported = load(folder).predict(list(probe.values()))
    assert [p["label"] for p in exported] == list(probe)


def test_the_tfidf_bar_reads_chinese_on_the_same_split(chinese_csv, shared_cache):
    pytest.importorskip("sklearn")
    from tscratch.baseline import tfidf_scores

    splits = load_labeled_splits(
        str(chinese_csv), None, None, None, None, 0.1, 0.1, 42, None, cache_dir=str(shared_cache)
    )
    assert sorted(splits.label_names) == sorted(TOPICS)
    _, test = tfidf_scores(splits)
    assert test["acc"] >= LEARNED
