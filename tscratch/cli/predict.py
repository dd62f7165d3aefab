"""Labels for one text or a million: `tscratch predict`.

`tscratch predict --model SOURCE [TEXT ...] [--input FILE|-] [--output FILE]` prints
(or writes) one object per text, in input order: `{"text", "label", "probabilities"}`. SOURCE is
whatever `open_classifier` opens: a tscratch fit checkpoint (read as data only), an exported folder,
or its `model.onnx` / `model.int8.onnx`. File formats are described in `tscratch.cli.predict_io`.

A model trained on text pairs (`--data.text_pair_column`) reads pairs only: `--pair TEXT
TEXT_PAIR` (repeatable) or `--input` a table with a column of texts and one of their pairs
(`--data.text_column`, `--data.text_pair_column`); its objects also hold `text_pair`. A
single-text model refuses pairs, and a pair model single texts, with one line.

A multi-label model (trained on a label column of lists) prints `{"text", "labels",
"probabilities"}`: `labels` maps every label whose probability reaches its threshold (tuned on
validation, stored in the checkpoint) to that probability, most probable first.

The probabilities are softmax(logits / T), T fitted on the validation split at the end of fit
(temperature scaling; 1 for a model without one). `--min_confidence P` prints `label` null for
a text whose top probability is below P.

Texts are run longest first in batches of similar length, so batches carry little padding; the
results are put back in input order. A text longer than the model's `max_length` is read as
the model was trained: cut, or for a model trained with `--data.long_text windows`, whole in
overlapping windows whose logits are averaged (`--long_text chunk`, see `document_logits`);
`--long_text` chooses either for any model.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from tscratch.cli.parsing import ArgumentParser
from tscratch.errors import UserError, run_command

if TYPE_CHECKING:
    from tscratch.export import ExportedClassifier


def keep_top(result: dict, k: int) -> dict:
    """`result` with only its `k` most probable labels, most probable first."""
    ranked = sorted(result["probabilities"].items(), key=lambda item: -item[1])
    return {**result, "probabilities": dict(ranked[:k])}


# Old spellings, still accepted with a notice (see tscratch.cli.parsing).
RENAMED = {
    "--ckpt_path": "--model",
    "--text_column": "--data.text_column",
    "--text_pair_column": "--data.text_pair_column",
    "--batch_size": "--data.batch_size",
    "--device": "--trainer.accelerator",
}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__.splitlines()[0], renamed=RENAMED)
    add = parser.add_argument
    add("texts", nargs="*", help="texts to classify (before those of --input)")
    add(
        "--pair", nargs=2, action="append", dest="pairs", default=[],
        metavar=("TEXT", "TEXT_PAIR"), help="for a model trained on text pairs: a text and its "
        "pair to classify together (repeat the flag for more; before those of --input)",
    )  # fmt: skip
    add(
        "--model", required=True, metavar="SOURCE",
        help="a tscratch fit .ckpt, an exported folder, or its model.onnx / model.int8.onnx",
    )  # fmt: skip
    add(
        "--input", metavar="FILE", help="'-' (stdin) or .txt: one text per line; "
        ".csv/.jsonl/.json/.parquet: one text per row, in --data.text_column (for a pair model, "
        "one pair per row, in --data.text_column and --data.text_pair_column)",
    )  # fmt: skip
    add(
        "--data.text_column", dest="text_column", metavar="NAME",
        help="the column of texts in a table file "
        "(default: guessed from common names such as text, content, review)",
    )  # fmt: skip
    add(
        "--data.text_pair_column", dest="text_pair_column",
        metavar="NAME", help="for a model trained on text pairs: the column of second texts in "
        "a table file (default: the column name the model was trained with)",
    )  # fmt: skip
    add(
        "--data.encoding", dest="encoding", default="utf-8", metavar="NAME",
        help="the encoding of the --input file (utf-8, gb18030, cp1252, ...); a file that is "
        "not valid in it is refused with the encoding it looks like",
    )  # fmt: skip
    add(
        "--output", metavar="FILE", help="write the results to a .jsonl (JSON lines) or .csv "
        "file (columns text, label, prob_<label>...) instead of JSON lines on stdout",
    )  # fmt: skip
    add("--top_k", type=int, metavar="K", help="keep only the K most probable labels")
    add(
        "--min_confidence", type=float, metavar="P", help="a probability in [0, 1): a text "
        "whose top probability is below P gets label null (an empty cell in a .csv), its "
        "probabilities still given",
    )  # fmt: skip
    add(
        "--long_text", choices=["truncate", "chunk"],
        help="texts longer than the model's max_length: cut them, or read them whole in "
        "overlapping windows and average the windows' logits (the geometric mean of their "
        "probabilities, normalised); default: as the model was trained (chunk for a model "
        "trained with --data.long_text windows, else truncate)",
    )  # fmt: skip
    add(
        "--stride", type=int, metavar="N", help="with --long_text chunk: tokens shared by "
        "neighbouring windows (default: the model's --data.stride if it was trained on "
        "windows, else max_length // 4)",
    )  # fmt: skip
    add(
        "--data.batch_size", dest="batch_size", type=int, default=32,
        metavar="N", help="texts (or windows) per pass",
    )  # fmt: skip
    add(
        "--trainer.accelerator", dest="device", default="cpu",
        help="where a PyTorch model runs: cpu, cuda, cuda:1, mps; gpu or auto as in fit",
    )  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> None:
    """Check the flags, read the texts and the model, and write the results."""
    # Imported here, after the flags parse: `--help` and a bad flag answer without torch.
    from tscratch.cli.classifiers import open_classifier
    from tscratch.cli.predict_io import check_output, write_results
    from tscratch.cli.predict_logits import document_logits, pair_logits
    from tscratch.export.classifier import check_min_confidence

    output = check_output(args.output) if args.output is not None else None
    if args.top_k is not None and args.top_k < 1:
        raise UserError(f"--top_k ({args.top_k}) must be at least 1")
    check_min_confidence(args.min_confidence, "--min_confidence")
    if args.batch_size < 1:
        raise UserError(f"--data.batch_size ({args.batch_size}) must be at least 1")
    if args.stride is not None and args.long_text == "truncate":
        raise UserError(f"--stride ({args.stride}) applies only with --long_text chunk")
    if not (args.texts or args.pairs or args.input is not None):  # before the slow load
        raise UserError(
            "no input: pass texts as arguments, --pair TEXT TEXT_PAIR (for a pair model) or "
            "--input FILE"
        )
    classifier = open_classifier(args.model, args.device)
    texts, pairs = _inputs(args, classifier)
    if args.top_k is not None and args.top_k > len(classifier.labels):
        raise UserError(
            f"--top_k ({args.top_k}) must be at most the number of labels "
            f"({len(classifier.labels)})"
        )
    if pairs is None:  # the model's own reading unless the flags choose (one line if bad)
        long_text, stride = _reading(args, classifier)
    start = time.perf_counter()
    progress = args.input is not None
    if pairs is None:
        logits = document_logits(classifier, texts, long_text, stride, args.batch_size, progress)
    else:
        logits = pair_logits(classifier, texts, pairs, args.batch_size, progress)
    seconds = time.perf_counter() - start
    results = classifier.results(texts, logits, pairs, args.min_confidence)
    if args.top_k is not None:
        results = [keep_top(result, args.top_k) for result in results]
    write_results(results, classifier.labels, output)
    rate = len(texts) / max(seconds, 1e-9)
    unit = "texts" if pairs is None else "pairs"
    count = f"{len(texts)} {unit if len(texts) != 1 else unit[:-1]}"  # "1 text", "2 texts"
    sys.stderr.write(f"{count} in {seconds:.2f} s ({rate:.1f} {unit}/s)\n")


def _reading(args: argparse.Namespace, classifier: ExportedClassifier) -> tuple[str, int | None]:
    """`--long_text` and `--stride`, the model's own where not given."""
    if args.stride is not None and (args.long_text or classifier.long_text) == "truncate":
        raise UserError(
            f"--stride ({args.stride}) applies only with --long_text chunk (this model reads "
            "long texts cut: it was not trained with --data.long_text windows)"
        )
    return classifier.reading(args.long_text, args.stride, "--stride")


def _inputs(
    args: argparse.Namespace, classifier: ExportedClassifier
) -> tuple[list[str], list[str] | None]:
    """The texts, and their pairs for a pair model; one line when the inputs do not fit it."""
    from tscratch.cli.predict_io import read_inputs, read_pair_inputs

    if not classifier.reads_pairs:
        if args.pairs or args.text_pair_column is not None:
            flag = "--pair" if args.pairs else "--data.text_pair_column"
            raise UserError(
                f"{flag}: this model reads single texts (it was trained without "
                "--data.text_pair_column); pass texts as arguments or --input FILE"
            )
        return read_inputs(args.texts, args.input, args.text_column, args.encoding), None
    trained = f"trained with --data.text_pair_column {classifier.text_pair_column}"
    if args.texts:
        raise UserError(
            f"this model reads text pairs ({trained}); pass --pair TEXT TEXT_PAIR or --input "
            "FILE with a column of texts and one of their pairs, not single texts"
        )
    if args.long_text == "chunk" or args.stride is not None:  # windows: single texts only
        what = (
            "--long_text chunk reads single texts"
            if args.long_text == "chunk"
            else f"--stride ({args.stride}) applies to single texts read in windows"
        )
        raise UserError(
            f"{what}; this model reads text pairs ({trained}), each cut longest-first to its "
            f"max_length ({classifier.max_length})"
        )
    columns = (classifier.text_column, classifier.text_pair_column)
    return read_pair_inputs(
        args.pairs, args.input, args.text_column, args.text_pair_column, columns, args.encoding
    )


def main(argv: list[str] | None = None) -> int:
    return run_command(run, build_parser().parse_args(argv))
