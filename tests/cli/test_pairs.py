"""Text pairs end to end: the BBC "same topic?" task through the real fit.py on the tiny config,
then predict.py on a pairs CSV, export and load, and scripts/test.py; the command-line errors.

fit.py runs once, in-process, for the module (~15 s). The predict errors use the tiny untrained
pair classifier of tests/test_export_pairs.py, exported without ONNX.
"""

from __future__ import annotations

import csv
import json
import logging
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from jsonargparse import Namespace

from tests.helpers import TINY_YAML, fit_in_process
from tests.test_export import checkpoint  # noqa: F401 - a fixture
from tests.test_export_pairs import pair_checkpoint  # noqa: F401 - a fixture
from tscratch.cli.classifiers import open_classifier
from tscratch.cli.evaluate import evaluate
from tscratch.cli.fit import main as fit
from tscratch.cli.fit_pairs import settle_token_types
from tscratch.cli.predict import main as predict
from tscratch.data.bbc_pairs import write_same_topic_pairs
from tscratch.data.encoding import encode_texts
from tscratch.errors import UserError
from tscratch.export import export, load
from tscratch.recipe.profile import estimate_tokens
from tscratch.training.checkpointing import read_checkpoint
from tscratch.training.classification import ClassificationTask

SET_TO_2 = "text pairs (--data.text_pair_column text_pair): model.type_vocab_size set to 2"


@dataclass(frozen=True)
class PairRun:
    data: Path  # train.csv, validation.csv, test.csv of BBC pairs
    root: Path
    best: Path  # the best checkpoint
    log: str  # what fit.py logged


@pytest.fixture(scope="module")
def pairs_data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bbc_pairs")
    write_same_topic_pairs(out, train_pairs=96, eval_pairs=16, words=24, seed=0)
    return out


@pytest.fixture(scope="module")
def pair_run(pairs_data, shared_cache, tmp_path_factory) -> PairRun:
    """`fit.py --config tiny --data.dataset DIR --data.text_pair_column text_pair`, 3 steps."""
    root = tmp_path_factory.mktemp("pair_run")
    args = [
        "--config", TINY_YAML, "--data.dataset", pairs_data, "--data.text_pair_column",
        "text_pair", "--data.vocab_size", "300", "--data.batch_size", "16",
        "--trainer.default_root_dir", root, "--trainer.limit_train_batches", "3",
        "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
    ]  # fmt: skip
    code, log = fit_in_process(args, shared_cache)
    assert code == 0
    best = next((root / "lightning_logs" / "version_0" / "checkpoints").glob("best-*.ckpt"))
    return PairRun(pairs_data, root, best, log)


def _rows(file: Path) -> list[dict[str, str]]:
    with file.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# --- the real run -------------------------------------------------------------------------------


@pytest.mark.slow
def test_fit_trains_on_pairs_and_the_checkpoint_records_them(pair_run):
    state = read_checkpoint(pair_run.best)
    assert state["datamodule_hyper_parameters"]["text_pair_column"] == "text_pair"
    assert state["hyper_parameters"]["type_vocab_size"] == 2
    assert state["state_dict"]["model.encoder.type_emb.weight"].shape == (2, 32)
    assert state["label_names"] == ["different", "same"]
    assert SET_TO_2 in pair_run.log
    assert re.search(r"test 16 rows of text pairs \(text \+ text_pair\); 2 classes", pair_run.log)


@pytest.mark.slow
def test_the_checkpoint_predicts_as_the_training_side_does(pair_run, single_thread):
    rows = _rows(pair_run.data / "test.csv")[:5]
    texts, pairs = [r["text"] for r in rows], [r["text_pair"] for r in rows]
    task = ClassificationTask.from_checkpoint(read_checkpoint(pair_run.best)).eval()
    classifier = open_classifier(pair_run.best)
    batch = encode_texts(classifier.tokenizer, texts, 64, classifier.config["encoder"]["pad_id"],
                         pairs=pairs)  # fmt: skip
    with torch.no_grad():
        expected = task(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        without_types = task(batch["input_ids"], batch["attention_mask"])

    torch.testing.assert_close(classifier.logits(texts, pairs, batch_size=2), expected,
                               atol=1e-6, rtol=0)  # fmt: skip
    assert not torch.allclose(without_types, expected, atol=1e-6)  # the types are read


@pytest.mark.slow
def test_predict_on_a_pairs_csv(pair_run, capsys, tmp_path, single_thread):
    test_csv, out = pair_run.data / "test.csv", tmp_path / "out.csv"

    code = predict(["--model", str(pair_run.best), "--input", str(test_csv), "--output", str(out)])

    assert code == 0, capsys.readouterr().err
    assert re.match(r"^16 pairs in [\d.]+ s \([\d.]+ pairs/s\)$",
                    capsys.readouterr().err.splitlines()[-1])  # fmt: skip
    rows, results = _rows(test_csv), _rows(out)
    assert list(results[0]) == ["text", "text_pair", "label", "prob_different", "prob_same"]
    expected = open_classifier(pair_run.best).predict(
        [r["text"] for r in rows], [r["text_pair"] for r in rows]
    )
    assert [(r["text"], r["text_pair"]) for r in results] == [
        (r["text"], r["text_pair"]) for r in rows
    ]
    for got, want in zip(results, expected, strict=True):
        assert got["label"] == want["label"]
        assert float(got["prob_same"]) == pytest.approx(want["probabilities"]["same"], abs=2e-6)
    # The same pairs from the command line, as JSON lines.
    argv = ["--model", str(pair_run.best)]
    for row in rows[:2]:
        argv += ["--pair", row["text"], row["text_pair"]]
    assert predict(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == expected[:2]


@pytest.mark.slow
def test_export_and_load_predict_like_the_checkpoint(pair_run, tmp_path, single_thread):
    pytest.importorskip("onnxruntime")
    rows = _rows(pair_run.data / "validation.csv")
    texts, pairs = [r["text"] for r in rows], [r["text_pair"] for r in rows]
    folder = export(pair_run.best, tmp_path / "same-topic", onnx=True)
    from_ckpt = open_classifier(pair_run.best)

    exported, onnx = load(folder), load(folder, runtime="onnx")

    assert exported.text_pair_column == "text_pair" and exported.reads_pairs
    assert exported.predict(texts, pairs) == from_ckpt.predict(texts, pairs)
    expected = from_ckpt.logits(texts, pairs)
    torch.testing.assert_close(onnx.logits(texts, pairs), expected, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_scripts_test_evaluates_a_pair_checkpoint(pair_run, shared_cache, monkeypatch):
    monkeypatch.setenv("TSCRATCH_CACHE", str(shared_cache))
    metrics = evaluate(str(pair_run.best), trainer_args={"accelerator": "cpu"})
    assert metrics["report"]["num_examples"] == 16  # the whole test split of pairs
    assert metrics["report"]["accuracy"] == pytest.approx(metrics["test/acc"])


# --- learnability: a label carried by one side alone --------------------------------------------

TOPICS = {
    "money": ["shares", "profit", "bank", "market", "price"],
    "sport": ["goal", "striker", "match", "league", "coach"],
}
FILLER = [
    "the", "a", "of", "and", "to", "in", "on", "for", "with", "was", "is", "at", "by", "from",
    "said", "people", "year", "new", "first", "last", "week", "time", "after", "over", "more",
    "about", "city", "day", "group", "report", "plan", "some", "told",
]  # fmt: skip
LEARNED = 0.8
"""Test accuracy a one-sided pair task must reach: chance (0.5) + 30 points. Calibrated once by
hand on this set: with the keyed side blanked (the word "nothing"), the same run scored 50.0%
(keyed text_pair) and 40.6% (keyed text); as below, 97-100% over seeds 0, 1, 2."""


def _sentence(rng: random.Random, filler: int, topic: str) -> str:
    """``filler`` neutral words with two words of ``topic`` put in at random places."""
    words = rng.choices(FILLER, k=filler)
    for _ in range(2):
        words.insert(rng.randrange(len(words) + 1), rng.choice(TOPICS[topic]))
    return " ".join(words)


def _one_sided_pairs(folder: Path, keyed: str, seed: int = 0) -> Path:
    """train/validation/test CSVs (256/64/64 rows, half each label) of ``text,text_pair,label``
    where the label is the topic of column ``keyed`` alone: 10 words, two of them the label's
    topic. The other column holds 42 words, two of them a topic drawn at random (a decoy): too
    long for max_length 32, so the longest-first cut shortens it and leaves the keyed side whole.
    """
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for split, count in (("train", 256), ("validation", 64), ("test", 64)):
        rows = []
        for i in range(count):
            label = sorted(TOPICS)[i % 2]
            key, decoy = _sentence(rng, 8, label), _sentence(rng, 40, rng.choice(sorted(TOPICS)))
            rows.append((decoy, key, label) if keyed == "text_pair" else (key, decoy, label))
        with (folder / f"{split}.csv").open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([("text", "text_pair", "label"), *rows])
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("keyed", ["text_pair", "text"])
def test_a_label_carried_by_one_side_alone_is_learned(keyed, shared_cache, tmp_path, single_thread):
    """fit.py on the tiny config, 6 epochs (~5 s): the test accuracy it reports, and the one
    predict gets from the best checkpoint, are far above chance. Logged to CSV: TensorBoard's
    pictures (drawn by `pair_run` for pairs too) are not what this test is about."""
    data = _one_sided_pairs(tmp_path / "data", keyed)
    root = tmp_path / "root"
    args = [
        "--config", TINY_YAML, "--data.dataset", data, "--data.text_pair_column", "text_pair",
        "--data.vocab_size", "200", "--data.max_length", "32", "--data.batch_size", "16",
        "--trainer.default_root_dir", root, "--trainer.max_epochs", "6",
        "--trainer.limit_train_batches", "1.0", "--trainer.limit_val_batches", "1.0",
        "--trainer.limit_test_batches", "1.0", "--trainer.enable_progress_bar", "false",
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", root,
    ]  # fmt: skip
    code, log = fit_in_process(args, shared_cache)
    assert code == 0, log

    tested = float(re.search(r"test accuracy (\d\.\d+)", log)[1])
    best = next((root / "lightning_logs" / "version_0" / "checkpoints").glob("best-*.ckpt"))
    classifier, rows = open_classifier(best), _rows(data / "test.csv")
    texts, pairs = [r["text"] for r in rows], [r["text_pair"] for r in rows]

    predicted = classifier.predict(texts, pairs)
    hits = sum(p["label"] == r["label"] for p, r in zip(predicted, rows, strict=True))

    assert tested >= LEARNED, log
    # predict agrees with fit's test pass (up to 2 of 64 rows: fit may test in bf16).
    assert hits / len(rows) == pytest.approx(tested, abs=2 / len(rows))


def test_max_length_auto_measures_both_texts_of_a_pair(shared_cache, tmp_path):
    """Short first texts (10 words), long second ones (42): sized from the first texts alone,
    max_length would be 32 and cut every pair."""
    data = _one_sided_pairs(tmp_path / "data", keyed="text")
    root = tmp_path / "root"
    args = [
        "--config", TINY_YAML, "--data.dataset", data, "--data.text_pair_column", "text_pair",
        "--data.vocab_size", "200", "--data.max_length", "auto", "--model.max_len", "256",
        "--trainer.default_root_dir", root, "--trainer.limit_train_batches", "1",
        "--trainer.limit_val_batches", "1", "--test", "false",
    ]  # fmt: skip
    code, log = fit_in_process(args, shared_cache)
    assert code == 0, log

    saved = yaml.safe_load((root / "lightning_logs/version_0/config.yaml").read_text())
    chosen = saved["data"]["max_length"]
    rows = _rows(data / "train.csv")
    longest = max(estimate_tokens(r["text"]) + estimate_tokens(r["text_pair"]) + 1 for r in rows)
    assert chosen >= longest  # every row has the same word counts: p95 is the longest
    assert "the plan measures each row as [CLS] text [SEP] text_pair [SEP]" in log
    assert re.search(rf"max_length {chosen} \(0% of training rows truncated\)", log)


# --- fit.py: token types and errors -------------------------------------------------------------


def _config(types: int, init_from: str | None = None, pairs: str | None = "b") -> Namespace:
    model = Namespace(type_vocab_size=types, init_from=init_from)
    return Namespace(model=model, data=Namespace(text_pair_column=pairs))


def test_token_types_are_set_for_a_model_trained_from_scratch(caplog):
    config = _config(0, pairs="text_pair")
    with caplog.at_level(logging.INFO, logger="tscratch"):
        settle_token_types(config)
    assert config.model.type_vocab_size == 2 and SET_TO_2 in caplog.text
    kept = [_config(3), _config(2, init_from="minilm"), _config(0, pairs=None)]
    for config in kept:
        before = config.model.type_vocab_size
        settle_token_types(config)
        assert config.model.type_vocab_size == before


def test_a_source_without_token_types_is_refused():
    with pytest.raises(
        UserError,
        match=r"^--data.text_pair_column b needs 2 token types, but --model.init_from x.ckpt has "
        r"type_vocab_size 0; pick a source with token types \(e.g. minilm or a BERT\) or drop "
        r"--data.text_pair_column$",
    ):
        settle_token_types(_config(0, init_from="x.ckpt"))


@pytest.fixture
def argv(monkeypatch, shared_cache):
    monkeypatch.setattr(sys, "argv", ["fit.py"])
    monkeypatch.setenv("TSCRATCH_CACHE", str(shared_cache))


def test_fit_refuses_init_from_a_model_without_token_types(
    argv,
    checkpoint,  # noqa: F811 - the imported fixture
    pairs_data,
    tmp_path,
    capsys,
):
    torch.save(checkpoint, tmp_path / "single.ckpt")
    root = tmp_path / "root"
    args = ["--data.dataset", str(pairs_data), "--data.text_pair_column", "text_pair"]
    args += ["--model.init_from", str(tmp_path / "single.ckpt")]

    assert fit([*args, "--trainer.default_root_dir", str(root)]) == 2

    assert capsys.readouterr().err == (
        f"error: --data.text_pair_column text_pair needs 2 token types, but --model.init_from "
        f"{tmp_path / 'single.ckpt'} has type_vocab_size 0; pick a source with token types (e.g. "
        "minilm or a BERT) or drop --data.text_pair_column\n"
    )
    assert not root.exists()


def test_fit_with_a_pair_column_that_does_not_exist(argv, pairs_data, tmp_path, capsys):
    args = ["--config", str(TINY_YAML), "--data.dataset", str(pairs_data)]
    args += ["--data.text_pair_column", "answer", "--trainer.default_root_dir", str(tmp_path)]
    assert fit(args) == 2
    assert capsys.readouterr().err == (
        "error: --data.text_pair_column 'answer' not found; the columns are ['text', "
        "'text_pair', 'label']\n"
    )
    assert list(tmp_path.iterdir()) == []


# --- predict.py errors: one line, exit 2, nothing written ----------------------------------------


@pytest.fixture(scope="module")
def pair_folder(pair_checkpoint, tmp_path_factory) -> str:  # noqa: F811
    """The toy pair classifier (columns question/answer, max_length 20), no ONNX."""
    return str(export(pair_checkpoint, tmp_path_factory.mktemp("exports") / "qa"))


@pytest.fixture(scope="module")
def single_folder(checkpoint, tmp_path_factory) -> str:  # noqa: F811
    return str(export(checkpoint, tmp_path_factory.mktemp("exports") / "toy"))


TRAINED = "trained with --data.text_pair_column answer"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a text"], rf"this model reads text pairs \({TRAINED}\); pass --pair TEXT TEXT_PAIR or "
         r"--input FILE with a column of texts and one of their pairs, not single texts$"),
        (["--pair", "a", "b", "--long_text", "chunk"], r"--long_text chunk reads single texts; "
         rf"this model reads text pairs \({TRAINED}\), each cut longest-first to its max_length "
         r"\(20\)$"),
        (["--pair", "a", "b", "--stride", "3"], r"--stride \(3\) applies to single texts read "
         rf"in windows; this model reads text pairs \({TRAINED}\), each cut longest-first"),
        (["--input", "{in.txt}"], r"--input .*in\.txt: a text-pair model reads a table \(\.csv, "
         r"\.tsv, \.jsonl, \.json, \.parquet\) with a column of texts and one of their pairs, "
         r"not one text per line; or pass --pair TEXT TEXT_PAIR$"),
        (["--input", "-"], r"--input -: a text-pair model reads a table"),
        (["--pair", "a", "b", "--data.text_pair_column", "x"],
         r"--data\.text_pair_column x needs --input FILE with one of \.csv, \.tsv, \.jsonl, "
         r"\.json, \.parquet$"),
        ([], r"no input: pass texts as arguments, --pair TEXT TEXT_PAIR \(for a pair model\) or "
         r"--input FILE$"),
        (["--input", "{t.csv}"], r"--input .*t\.csv: --data\.text_column 'question' not found; "
         r"the columns are \['a', 'b'\]$"),
        (["--input", "{t.csv}", "--data.text_column", "a"], r"--input .*t\.csv: --data\."
         r"text_pair_column 'answer' not found; the columns are \['a', 'b'\]$"),
        (["--input", "{num.jsonl}"], r"--input .*num\.jsonl: column 'answer' holds int values "
         r"\(row 0\), not text; pass the column of texts as --data\.text_pair_column$"),
    ],
)  # fmt: skip
def test_a_pair_model_refuses_what_does_not_fit(pair_folder, capsys, tmp_path, args, message):
    files = {"in.txt": "one\ntwo\n", "t.csv": "a,b\nx,y\n", "num.jsonl": '{"question": "q", '
             '"answer": 7}\n'}  # fmt: skip
    for name, content in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    argv = [str(tmp_path / a[1:-1]) if a.startswith("{") else a for a in args]
    out = tmp_path / "out.jsonl"

    code = predict(["--model", pair_folder, *argv, "--output", str(out)])

    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and len(captured.err.splitlines()) == 1
    assert re.match(f"error: {message}", captured.err), captured.err
    assert not out.exists()


def test_the_trained_columns_are_the_default_columns(pair_folder, capsys, tmp_path):
    table = tmp_path / "qa.jsonl"
    rows = [{"answer": "ham and eggs", "id": 1, "question": "breakfast?"},
            {"answer": "", "id": 2, "question": "spam"}]  # fmt: skip
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert predict(["--model", pair_folder, "--input", str(table), "--pair", "x", "y"]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    texts, pairs = ["x", "breakfast?", "spam"], ["y", "ham and eggs", ""]
    assert got == open_classifier(pair_folder).predict(texts, pairs)


@pytest.mark.parametrize("flags", [["--pair", "a", "b"], ["x", "--data.text_pair_column", "b"]])
def test_a_single_text_model_refuses_pairs(single_folder, capsys, flags):
    assert predict(["--model", single_folder, *flags]) == 2
    flag = flags[0] if flags[0] == "--pair" else "--data.text_pair_column"
    assert capsys.readouterr().err == (
        f"error: {flag}: this model reads single texts (it was trained without "
        "--data.text_pair_column); pass texts as arguments or --input FILE\n"
    )
