"""Does reading long articles whole pay, and how fast is each runtime? Trains nothing.

For a classifier trained on BBC News (the project measures one trained with max_length 128):
  1. test-split accuracy with `predict.py --long_text truncate` (the first max_length tokens,
     as a model trained without windows reads them) and with `--long_text chunk` (every token,
     in windows overlapping by the model's stride: max_length // 4 unless it was trained with
     another --data.stride; the windows' logits averaged), and how many test articles are
     longer than max_length;
  2. the same truncate accuracy for each runtime (int8 against fp32);
  3. texts/s (tokenizing included, `--long_text truncate`, after one warm-up batch) at batch
     sizes 1 and 32, for PyTorch fp32 and, when SOURCE is an export folder holding them, for
     model.onnx and model.int8.onnx on onnxruntime's CPU provider.
The test split is the one fit.py evaluates bbc_news on (val/test fractions 0.1, seed 42).

Usage: `python scripts/predict_check.py --model SOURCE [--limit N] [--time_texts N]
[--device cpu]`; SOURCE is a fit.py checkpoint, an export folder (`scripts/export.py --onnx
--quantize` for all three runtimes) or one of its .onnx files. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from tscratch.cli.classifiers import open_classifier
from tscratch.cli.predict_logits import document_logits
from tscratch.data.sources import column
from tscratch.data.splits import load_labeled_splits
from tscratch.errors import UserError, report
from tscratch.export import ONNX, ONNX_INT8, ExportedClassifier, load


def accuracies(classifier: ExportedClassifier, texts: list[str], labels: list[int]) -> list[str]:
    """Markdown rows: accuracy with each --long_text mode."""
    lengths = [len(e.ids) for e in classifier.tokenizer.encode_batch(texts)]
    long = sum(n > classifier.max_length for n in lengths)
    rows = []
    for mode in ("truncate", "chunk"):
        logits = document_logits(classifier, texts, mode, batch_size=32)  # the model's stride
        acc = (logits.argmax(-1) == torch.tensor(labels)).float().mean().item()
        rows.append(
            f"| accuracy, --long_text {mode} | {100 * acc:.2f} % of {len(texts)} "
            f"({long} longer than {classifier.max_length} tokens) |"
        )
    return rows


def quantized_accuracy(
    name: str, classifier: ExportedClassifier, texts: list[str], labels: list[int]
) -> str:
    """A Markdown row: one runtime's accuracy with --long_text truncate (int8 vs fp32)."""
    logits = document_logits(classifier, texts, "truncate", batch_size=32)
    acc = (logits.argmax(-1) == torch.tensor(labels)).float().mean().item()
    return f"| accuracy, {name}, --long_text truncate | {100 * acc:.2f} % of {len(texts)} |"


def speeds(runtimes: dict[str, ExportedClassifier], texts: list[str]) -> list[str]:
    """Markdown rows: texts/s of each runtime at batch sizes 1 and 32."""
    rows = []
    for name, classifier in runtimes.items():
        for batch_size in (1, 32):
            document_logits(classifier, texts[:batch_size], "truncate", batch_size=batch_size)
            start = time.perf_counter()  # after a warm-up batch
            document_logits(classifier, texts, "truncate", batch_size=batch_size)
            rate = len(texts) / (time.perf_counter() - start)
            rows.append(
                f"| {name}, batch {batch_size} | {rate:.1f} texts/s "
                f"({torch.get_num_threads()} threads) |"
            )
    return rows


def runtimes_of(source: str, classifier: ExportedClassifier) -> dict[str, ExportedClassifier]:
    """The source's own runtime, plus the ONNX files an export folder holds."""
    path = Path(source)
    found = {path.name if path.suffix == ".onnx" else "PyTorch fp32": classifier}
    if path.is_dir():
        for runtime, file in (("onnx", ONNX), ("onnx-int8", ONNX_INT8)):
            if (path / file).is_file():
                found[file] = load(path, runtime=runtime)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="checkpoint, export folder or .onnx")
    parser.add_argument("--limit", type=int, help="use only the first N test articles")
    parser.add_argument("--time_texts", type=int, default=256, help="articles per timing")
    parser.add_argument("--device", default="cpu", help="where the PyTorch model runs")
    args = parser.parse_args(argv)
    try:
        splits = load_labeled_splits("bbc_news", None, None, None, None, 0.1, 0.1, 42, None)
        texts, labels = column(splits.test, "text"), column(splits.test, "labels")
        texts, labels = texts[: args.limit], labels[: args.limit]
        classifier = open_classifier(args.model, args.device)
        if classifier.labels != splits.label_names:
            raise UserError(
                f"--model {args.model} has labels {classifier.labels}, not BBC News's "
                f"{splits.label_names}; pass a model trained on bbc_news"
            )
        runtimes = runtimes_of(args.model, classifier)
        rows = accuracies(classifier, texts, labels)
        rows += [quantized_accuracy(name, c, texts, labels) for name, c in runtimes.items()]
        rows += speeds(runtimes, texts[: args.time_texts])
    except UserError as error:
        return report(error)
    print(f"| {Path(args.model).name} | |\n|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
