"""Multi-label end to end: the BBC topic mixes through the real fit.py on the tiny config (BCE,
tuned thresholds in the checkpoint, test with them), then predict.py, export and load; the
command-line errors.

fit.py runs once, in-process, for the module (~10 s).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY_YAML, fit_in_process
from tscratch.cli.classifiers import open_classifier
from tscratch.cli.evaluate import main as evaluate_main
from tscratch.cli.predict import main as predict
from tscratch.data.bbc_multilabel import write_topic_mixes
from tscratch.data.classification import TextClassificationData
from tscratch.export import FORMAT_VERSION, export, load
from tscratch.training.checkpointing import read_checkpoint
from tscratch.training.classification import ClassificationTask
from tscratch.training.multilabel import THRESHOLDS, tune_thresholds

TOPICS = ["business", "entertainment", "politics", "sports", "tech"]
TUNED = re.compile(
    r"test metrics use the per-label thresholds tuned on validation: business \d\.\d\d, "
    r"entertainment \d\.\d\d, politics \d\.\d\d, sports \d\.\d\d, tech \d\.\d\d"
)


@dataclass(frozen=True)
class Run:
    data: Path
    root: Path
    best: Path
    log: str


@pytest.fixture(scope="module")
def mixes(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bbc_multilabel")
    write_topic_mixes(out, train_rows=96, eval_rows=16, words=24, seed=0)
    return out


def _base(data: Path, root: Path) -> list:
    return [
        "--config", TINY_YAML, "--data.dataset", data, "--data.vocab_size", "300",
        "--data.batch_size", "16", "--trainer.default_root_dir", root,
        "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1",
        "--trainer.limit_test_batches", "1",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def run(mixes, shared_cache, tmp_path_factory) -> Run:
    """`fit.py --config tiny --data.dataset DIR` on the topic mixes (JSON lines), 3 steps."""
    root = tmp_path_factory.mktemp("multilabel_run")
    code, log = fit_in_process(_base(mixes, root), shared_cache)
    assert code == 0
    best = next((root / "lightning_logs" / "version_0" / "checkpoints").glob("best-*.ckpt"))
    return Run(mixes, root, best, log)


def _texts(run: Run, split: str) -> list[str]:
    lines = (run.data / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines]


@pytest.mark.slow
def test_fit_trains_a_multi_label_model_and_stores_tuned_thresholds(run, shared_cache):
    state = read_checkpoint(run.best)
    assert state["hyper_parameters"]["multi_label"] is True
    assert state["label_names"] == TOPICS
    thresholds = state["state_dict"]["multi_label.thresholds"]
    assert thresholds.shape == (5,)
    assert all(torch.isclose(THRESHOLDS, t).any() for t in thresholds)  # on the grid
    assert "5 labels (multi-label)" in run.log
    assert TUNED.search(run.log)
    assert re.search(r"test exact match \(multi-label, tuned thresholds\) \d\.\d{4}, macro-F1",
                     run.log)  # fmt: skip
    # The thresholds are those the checkpoint's own weights get when tuned on validation.
    task = ClassificationTask.from_checkpoint(state).eval()
    data = TextClassificationData(
        str(run.data), vocab_size=300, max_length=64, batch_size=16, cache_dir=str(shared_cache)
    )
    with torch.no_grad():
        batches = list(data.val_dataloader())
        logits = torch.cat([task(b["input_ids"], b["attention_mask"]) for b in batches])
        labels = torch.cat([b["labels"] for b in batches])
    torch.testing.assert_close(tune_thresholds(logits.sigmoid(), labels), thresholds)
    # ... and its loss on a batch is BCE with label smoothing 0.1, by hand.
    p, y = logits.sigmoid().double(), labels.double() * 0.9 + 0.05
    by_hand = -(y * p.log() + (1 - y) * (1 - p).log()).mean()
    assert task._loss(logits, labels).item() == pytest.approx(by_hand.item(), rel=1e-5)


@pytest.mark.slow
def test_predict_returns_every_label_above_its_threshold(run, capsys, tmp_path, single_thread):
    texts = _texts(run, "test")[:4]
    thresholds = read_checkpoint(run.best)["state_dict"]["multi_label.thresholds"].tolist()

    assert predict(["--model", str(run.best), *texts]) == 0

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["text"] for line in lines] == texts
    for line in lines:
        probs = line["probabilities"]
        assert list(probs) == TOPICS and set(line) == {"text", "labels", "probabilities"}
        above = {n: p for (n, p), t in zip(probs.items(), thresholds, strict=True) if p >= t}
        assert line["labels"] == above
        assert list(line["labels"].values()) == sorted(above.values(), reverse=True)
    out = tmp_path / "out.csv"
    assert predict(["--model", str(run.best), "--output", str(out), *texts]) == 0
    with out.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["text", "labels", *(f"prob_{n}" for n in TOPICS)]
    assert [r["labels"] for r in rows] == ["|".join(line["labels"]) for line in lines]


@pytest.mark.slow
def test_thresholds_decide_what_predict_returns(run, single_thread):
    state = read_checkpoint(run.best)
    state["state_dict"]["multi_label.thresholds"] = torch.tensor([0.0, 1.1, 0.0, 1.1, 0.0])
    from tscratch.export import from_checkpoint

    results = from_checkpoint(state).predict(_texts(run, "test")[:3])

    assert [sorted(r["labels"]) for r in results] == [["business", "politics", "tech"]] * 3


@pytest.mark.slow
def test_export_and_load_carry_the_thresholds(run, tmp_path, single_thread):
    texts = _texts(run, "validation")
    folder = export(run.best, tmp_path / "topics")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    thresholds = read_checkpoint(run.best)["state_dict"]["multi_label.thresholds"].tolist()

    assert config["multi_label"] is True and config["format_version"] == FORMAT_VERSION
    assert config["thresholds"] == pytest.approx(thresholds)
    exported = load(folder)
    assert exported.multi_label and exported.predict(texts) == open_classifier(run.best).predict(
        texts
    )


@pytest.mark.slow
def test_the_server_answers_with_labels_above_their_thresholds(run, tmp_path, single_thread):
    pytest.importorskip("litserve")
    from tscratch.cli.serve import ClassifierAPI
    from tscratch.cli.serve_requests import Limits

    texts = _texts(run, "test")[:3]
    api = ClassifierAPI(str(export(run.best, tmp_path / "served")), Limits(8, 5000), 1, 0.0)
    api.setup("cpu")
    expected = open_classifier(run.best).predict(texts)

    answer = api.encode_response(api.predict(api.decode_request({"texts": texts})))

    # Probabilities are rounded to 6 decimals: two fp32 passes (checkpoint and exported
    # weights) may land on either side of a rounding boundary, so they agree within 1e-6.
    predictions = answer["predictions"]
    assert list(answer) == ["predictions"] and len(predictions) == len(expected)
    for got, want in zip(predictions, expected, strict=True):
        assert list(got) == ["labels", "probabilities"]
        assert list(got["labels"]) == list(want["labels"])  # the same labels, same order
        for key in ("labels", "probabilities"):
            assert got[key] == pytest.approx(want[key], abs=1.01e-6, rel=0)


@pytest.mark.slow
def test_resuming_carries_the_thresholds(run, shared_cache, tmp_path):
    """A resumed run starts from the checkpoint's thresholds: with validation off, the next
    epoch retunes nothing and its last.ckpt holds them unchanged."""
    saved = read_checkpoint(run.best)["state_dict"]["multi_label.thresholds"]
    assert not torch.equal(saved, torch.full((5,), 0.5))  # else a reset would go unseen
    root = tmp_path / "resumed"
    args = [*_base(run.data, root), "--ckpt_path", run.best, "--trainer.max_epochs", "2"]
    args += ["--trainer.limit_val_batches", "0", "--test", "false", "--checkpoint.monitor", "null"]
    code, _ = fit_in_process(args, shared_cache)
    assert code == 0
    last = read_checkpoint(root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    assert last["epoch"] == 1
    torch.testing.assert_close(last["state_dict"]["multi_label.thresholds"], saved)
    task = ClassificationTask.from_checkpoint(last)
    torch.testing.assert_close(task.multi_label.thresholds, saved)


def test_a_csv_with_a_delimiter_trains_too(mixes, shared_cache, tmp_path):
    csv_dir = tmp_path / "csv"
    write_topic_mixes(csv_dir, train_rows=32, eval_rows=8, words=12, seed=1, fmt="csv")
    args = [*_base(csv_dir, tmp_path), "--data.label_delimiter", "|", "--test", "false"]
    args += ["--trainer.limit_train_batches", "1"]
    code, log = fit_in_process(args, shared_cache)
    assert code == 0
    assert "5 labels (multi-label)" in log


@pytest.mark.slow
def test_scripts_test_refuses_a_multi_label_checkpoint_in_one_line(run, capsys):
    assert evaluate_main(["--model", str(run.best)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {run.best} is a multi-label model; tscratch test reports single-label models "
        "only: tscratch fit tests it at the end of training with its tuned thresholds (test/f1 "
        "macro, test/f1_micro, test/acc exact match)"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--data.label_delimiter", "|"],
            r"^error: data.label_delimiter '\|' was given but the train split's label column "
            r"holds lists \(row 0: \[.*\]\); drop --data.label_delimiter$",
        ),
        (
            ["--model.class_weights", "auto"],
            r"^error: model.class_weights 'auto' is for single-label data; this data is "
            r"multi-label \(one sigmoid per label, BCE\): drop --model.class_weights$",
        ),
        (
            ["--model.loss", "focal"],
            r"^error: model.loss 'focal' is for single-label data; this data is multi-label",
        ),
    ],
)
def test_bad_combinations_exit_2_in_one_line(mixes, shared_cache, tmp_path, capsys, extra,
                                             message):  # fmt: skip
    code, _ = fit_in_process([*_base(mixes, tmp_path), *extra], shared_cache)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and re.match(message, err), err
