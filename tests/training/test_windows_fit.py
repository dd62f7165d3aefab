"""Training on windows (`--data.long_text windows`): fit's own validation and test score each
text by the mean of its windows' logits, as the checkpoint then reads texts in predict and
`tscratch test`; a run resumed mid-epoch trains on the same batches. With `pooled`, training
scores each text as evaluation does.

A d_model 16 model on tests/data/test_windows.py's CSV of long texts (max_length 16), in
process, with the CLI's callbacks and trainer settings (as tests/training/test_resume.py).
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger

from tests.data.test_windows import long_csv  # noqa: F401 - a fixture
from tests.training.test_resume import Interrupted, Recorder
from tscratch.checkpoint_files import read_checkpoint
from tscratch.cli.evaluate_export import checkpoint_split_settings, evaluate_checkpoint
from tscratch.cli.fit import trainer_defaults
from tscratch.data.classification import TextClassificationData
from tscratch.data.splits import load_labeled_splits
from tscratch.data.windows import mean_of_windows
from tscratch.export import from_checkpoint
from tscratch.training.checkpointing import LatestCheckpoint
from tscratch.training.classification import ClassificationTask

STEPS = 6


class TextLogits(L.Callback):
    """The logits fit's validation and test give each text, by split and row number."""

    def __init__(self) -> None:
        self.logits: dict[str, dict[int, torch.Tensor]] = {"validation": {}, "test": {}}

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, *_) -> None:
        self._keep("validation", outputs, batch)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, *_) -> None:
        self._keep("test", outputs, batch)

    def _keep(self, split: str, outputs: torch.Tensor, batch: dict) -> None:
        assert outputs.shape == (len(batch["labels"]), 3)  # a row per text, not per window
        assert len(batch["input_ids"]) > len(batch["labels"])  # ... read in several windows
        for row, index in enumerate(batch["index"].tolist()):
            self.logits[split][index] = outputs[row].detach().float()


def _fit(
    root: Path,
    cache: Path,
    recorder: L.Callback,
    every: int | None = None,
    ckpt: Path | None = None,
    long_text: str = "windows",
) -> tuple[ClassificationTask, L.Trainer, TextClassificationData]:
    """One epoch of `STEPS` steps on the long texts, `last.ckpt` every `every` steps."""
    L.seed_everything(0, verbose=False)
    data = _data(cache, long_text)
    model = ClassificationTask(
        vocab_size=data.vocab_size, num_classes=data.num_classes, pad_id=data.pad_id,
        label_names=data.label_names, d_model=16, num_heads=2, d_ff=32, num_layers=1,
        max_len=16, dropout=0.1, lr=3e-3,
    )  # fmt: skip
    settings = trainer_defaults()
    settings.update(
        callbacks=[*settings["callbacks"], LatestCheckpoint(every), recorder],
        accelerator="cpu", precision="32-true", max_epochs=1, limit_train_batches=STEPS,
        num_sanity_val_steps=0, log_every_n_steps=2, enable_progress_bar=False,
        enable_model_summary=False,
        logger=TensorBoardLogger(root, name="lightning_logs", version=0, default_hp_metric=False),
        default_root_dir=root,
    )  # fmt: skip
    trainer = L.Trainer(**settings)
    trainer.fit(model, datamodule=data, ckpt_path=ckpt)
    return model, trainer, data


def _data(cache: Path, long_text: str) -> TextClassificationData:
    return TextClassificationData(
        dataset=str(cache.parent / "long.csv"), vocab_size=60, max_length=16,
        long_text=long_text, stride=3, batch_size=8, cache_dir=str(cache),
    )  # fmt: skip


@pytest.fixture(scope="module")
def cache(long_csv) -> Path:  # noqa: F811
    """The cache of every run here (one tokenizer), beside the CSV."""
    return Path(long_csv).parent / "cache"


@pytest.fixture(scope="module")
def straight(cache, tmp_path_factory, single_thread_module):
    """The uninterrupted run, then fit's own test and a validation, their logits kept."""
    recorder, texts = Recorder(), TextLogits()
    root = tmp_path_factory.mktemp("windows") / "straight"
    model, trainer, data = _fit(root, cache, recorder)
    trainer.callbacks.append(texts)
    (tested,) = trainer.test(model, datamodule=data, verbose=False)
    texts.logits["validation"] = {}
    trainer.validate(model, datamodule=data, verbose=False)
    return root, recorder, texts, tested


@pytest.fixture(scope="module")
def single_thread_module():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_fit_scores_each_text_as_the_checkpoint_reads_it(straight):
    root, _, texts, tested = straight
    last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint = read_checkpoint(last)
    data = checkpoint["datamodule_hyper_parameters"]
    assert (data["long_text"], data["stride"]) == ("windows", 3)
    classifier = from_checkpoint(checkpoint)
    assert (classifier.long_text, classifier.stride) == ("chunk", 3)
    splits = load_labeled_splits(**checkpoint_split_settings(checkpoint))

    for split in ("validation", "test"):
        rows = splits[split]
        assert sorted(texts.logits[split]) == list(range(len(rows)))  # each text once
        fit_logits = torch.stack([texts.logits[split][i] for i in range(len(rows))])
        torch.testing.assert_close(fit_logits, classifier.logits(rows["text"]), atol=1e-5, rtol=0)
    report = evaluate_checkpoint(last, {})  # `tscratch test`, per text as fit's test
    assert report["test/acc"] == pytest.approx(tested["test/acc"], abs=1e-6)
    assert report["report"]["num_examples"] == len(splits.test)  # texts, not windows


def test_a_run_resumed_mid_epoch_trains_on_the_same_windows(straight, cache, tmp_path):
    _, recorder, _, _ = straight
    before = Recorder(stop_at_step=3)
    with pytest.raises(Interrupted):
        _fit(tmp_path / "run", cache, before, every=3)
    last = tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert read_checkpoint(last)["global_step"] == 3

    after = Recorder()
    _fit(tmp_path / "run", cache, after, every=3, ckpt=last)

    assert len(recorder.seen) == STEPS
    assert before.seen + after.seen == recorder.seen  # the same windows, the same RNG states


def test_pooled_training_scores_each_text_by_its_mean_logits(cache, single_thread_module):
    """``long_text="pooled"``: a training batch of 8 texts holds all their windows, and the
    loss is the cross-entropy of each text's mean of its windows' logits."""
    data = _data(cache, "pooled")
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    torch.manual_seed(0)
    model = ClassificationTask(
        vocab_size=data.vocab_size, num_classes=data.num_classes, pad_id=data.pad_id,
        d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=16, dropout=0.0,
    )  # fmt: skip
    model.train()

    loss = model.training_step(batch, 0)

    logits = model(batch["input_ids"], batch["attention_mask"])  # (W, C): one per window
    texts = mean_of_windows(logits, batch["window_owner"], 8)
    torch.testing.assert_close(
        loss, F.cross_entropy(texts, batch["labels"], label_smoothing=model.hparams.label_smoothing)
    )
    per_window = F.cross_entropy(
        logits, batch["labels"][batch["window_owner"]], label_smoothing=0.1
    )
    assert not torch.isclose(loss, per_window)  # not each window carrying the label
    loss.backward()  # the mean passes the gradient to every window
    assert model.model.encoder.tok_emb.weight.grad.abs().sum() > 0


def test_a_pooled_run_resumes_mid_epoch_and_reads_long_texts_in_windows(
    cache, tmp_path, single_thread_module
):
    straight = Recorder()
    _, _, data = _fit(tmp_path / "straight", cache, straight, long_text="pooled")
    windowed = _data(cache, "windows")
    # batches of 8 of the 48 training texts, where a row per window makes far more batches
    assert len(data.train_dataloader()) == 6 < len(windowed.train_dataloader())
    last = tmp_path / "straight" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint = read_checkpoint(last)
    hparams = checkpoint["datamodule_hyper_parameters"]
    assert (hparams["long_text"], hparams["stride"]) == ("pooled", 3)
    classifier = from_checkpoint(checkpoint)
    assert (classifier.long_text, classifier.stride) == ("chunk", 3)

    before = Recorder(stop_at_step=3)
    with pytest.raises(Interrupted):
        _fit(tmp_path / "run", cache, before, every=3, long_text="pooled")
    stopped = tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    after = Recorder()
    _fit(tmp_path / "run", cache, after, every=3, ckpt=stopped, long_text="pooled")

    assert len(straight.seen) == STEPS
    assert before.seen + after.seen == straight.seen  # the same texts, the same RNG states
