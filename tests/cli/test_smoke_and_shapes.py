"""Issue 40's frictions replayed through `tscratch fit` as a new user meets them: a `.tsv` file
with a `stars` column trains as it is (item 3), and the smoke config, continued with
`--ckpt_path last`, reports validation accuracy on rows of every class (item 4: the splits were
stored grouped by class, so its two batches read three of the five classes, and once the model
favoured one of the other two, `val/acc` read 0.000)."""

from __future__ import annotations

import csv
import re
from collections import Counter

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import TINY_YAML, fit_in_process
from tscratch.data.sources import column
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits

WORDS = ["great", "awful", "fine", "broken", "lovely", "slow", "cheap", "sturdy", "loud", "neat"]


@pytest.mark.slow
def test_a_tsv_with_a_stars_column_trains_as_it_is(shared_cache, tmp_path):
    table = tmp_path / "reviews.tsv"
    with table.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["id", "Review", "Stars"])
        for i in range(300):
            stars = 1 + i % 5
            words = " ".join(WORDS[(i * k + stars) % 10] for k in range(1, 8))
            writer.writerow([i, f"{WORDS[stars]} product, {words}; review {i}", stars])
    code, log = fit_in_process(
        ["--config", TINY_YAML, "--data.dataset", table, "--trainer.default_root_dir", tmp_path],
        shared_cache,
    )
    assert code == 0, log[-3000:]
    assert re.search(r"^test accuracy \d\.\d{4}, macro-F1 \d\.\d{4} ", log, re.M), log[-3000:]
    (run,) = (tmp_path / "lightning_logs").iterdir()
    data = yaml.safe_load((run / "config.yaml").read_text())["data"]
    splits = load_labeled_splits(**{k: data[k] for k in SPLIT_ARGS}, cache_dir=str(shared_cache))
    assert splits.label_names == ["1", "2", "3", "4", "5"]  # the stars, as the file writes them


@pytest.mark.slow
def test_the_resumed_smoke_run_scores_rows_of_every_class(shared_cache, tmp_path):
    args = ["--config", TINY_YAML, "--trainer.default_root_dir", tmp_path]
    code, log = fit_in_process(args, shared_cache)
    assert code == 0, log[-3000:]
    assert "on 128 of 224 test rows (--trainer.limit_test_batches 2; " in log
    code, log = fit_in_process([*args, "--ckpt_path", "last", "--trainer.max_epochs", "2"],
                               shared_cache)  # fmt: skip
    assert code == 0, log[-3000:]
    (run,) = (tmp_path / "lightning_logs").iterdir()
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    accuracies = {event.step: event.value for event in events.Scalars("val/acc")}
    assert sorted(accuracies) == [7, 15]  # one validation per epoch, the second after resuming
    data = yaml.safe_load((run / "config.yaml").read_text())["data"]
    splits = load_labeled_splits(**{k: data[k] for k in SPLIT_ARGS}, cache_dir=str(shared_cache))
    read = Counter(column(splits.validation, "labels")[:128])  # what the two batches read
    assert set(read) == set(range(5)), read
    # The tiny model says one class for (nearly) every row: it now scores about that class's
    # share of the rows read (0.18 to 0.23), where it scored 0.000 on three other classes.
    assert min(accuracies.values()) >= 0.1, accuracies
