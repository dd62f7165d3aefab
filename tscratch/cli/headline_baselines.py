"""Extractive baselines for headline generation: `tscratch headline-baselines`.

Two rules that read only the body, scored with the same ROUGE code as the encoder-decoder's
validation and test (`tscratch.training.rouge.rouge`), on the same split (`headline_pairs`,
tscratch fit's split for bbc_news):

- lead-N: the body's first N words, N the mean training headline length in words, rounded;
- first sentence: the body's first sentence (within its first paragraph).

`--model CKPT` (repeatable) scores `tscratch fit-seq2seq` checkpoints on the same rows in the same
table, with their own decoding settings or those given (`--num_beams`,
`--no_repeat_ngram_size`), so decoding choices can be compared without training again.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from tscratch.cli.parsing import ArgumentParser
from tscratch.errors import UserError, run_command

# The data, ROUGE and the model are imported by the functions that use them: `--help` and a
# bad flag answer without torch.
if TYPE_CHECKING:
    from tscratch.data.seq2seq_pairs import Pair

# A sentence ends at . ! or ? (a closing quote or bracket may follow) before a space or the end;
# "1.13bn" and "U.S.-based" do not end one.
_SENTENCE = re.compile(r".*?[.!?][\"'”’)\]]*(?=\s|$)", re.DOTALL)


def lead_words(body: str, n: int) -> str:
    """The body's first `n` words."""
    return " ".join(body.split()[:n])


def first_sentence(body: str) -> str:
    """The body's first sentence, within its first non-blank paragraph (all of that paragraph
    when no sentence end is found)."""
    paragraph = next((line.strip() for line in body.splitlines() if line.strip()), "")
    match = _SENTENCE.match(paragraph)
    return match.group(0).strip() if match else paragraph


def baseline_scores(pairs: dict[str, list[Pair]], split: str = "test") -> list[dict]:
    """ROUGE-1/2/L F-measure of both baselines on `split`; N from the training headlines."""
    from tscratch.training.rouge import rouge

    words = statistics.mean(len(p.target.split()) for p in pairs["train"])
    n = max(1, round(words))
    rows, references = pairs[split], [p.target for p in pairs[split]]
    results = []
    for name, make in (
        (f"lead-{n}", lambda b: lead_words(b, n)),
        ("first sentence", first_sentence),
    ):
        scores = rouge([make(p.source) for p in rows], references)
        results.append({"baseline": name, "split": split, "rows": len(rows), **scores})
    return [{"mean_headline_words": words, "n": n}, *results]


# The data options that decide which rows a split holds (flags named as the data module's).
SPLIT_OPTIONS = (
    "dataset", "source_column", "target_column", "data_files", "seed", "val_fraction",
    "test_fraction",
)  # fmt: skip


def check_same_split(checkpoint: dict, path: str, args: argparse.Namespace) -> None:
    """One line when the checkpoint was trained on another split than the flags give (its
    training rows could then be scored)."""
    data = checkpoint.get("datamodule_hyper_parameters") or {}
    for key in SPLIT_OPTIONS:
        if key in data and data[key] != getattr(args, key):
            raise UserError(
                f"--model {path} was trained with data.{key} {data[key]!r}, these rows "
                f"come from --data.{key} {getattr(args, key)!r}; pass --data.{key} {data[key]} to "
                "score it on its own split"
            )


def checkpoint_scores(
    args: argparse.Namespace, pairs: dict[str, list[Pair]], split: str, options: dict
) -> list[dict]:
    """ROUGE of each --model's generations on `split`; `options` override its decoding."""
    from tscratch.cli.generate import generator_from, headlines
    from tscratch.training.checkpointing import read_checkpoint
    from tscratch.training.rouge import rouge

    rows, references = pairs[split], [p.target for p in pairs[split]]
    results = []
    for path in args.ckpt_path:
        checkpoint = read_checkpoint(Path(path))
        check_same_split(checkpoint, path, args)
        task = generator_from(checkpoint, path)
        for name, value in options.items():
            if value is not None:
                task.hparams[name] = value
        hp = task.hparams
        generated = headlines(task, [p.source for p in rows], hp.num_beams)
        name = f"{Path(path).name} (beams {hp.num_beams}, no-repeat {hp.no_repeat_ngram_size})"
        results.append({"baseline": name, "split": split, "rows": len(rows),
                        **rouge(generated, references)})  # fmt: skip
    return results


def build_parser() -> ArgumentParser:
    old = ("dataset", "source_column", "target_column", "data_files", "seed", "val_fraction",
           "test_fraction")  # fmt: skip
    parser = ArgumentParser(
        description=__doc__.splitlines()[0],
        renamed={"--ckpt_path": "--model", **{f"--{k}": f"--data.{k}" for k in old}},
    )
    add = parser.add_argument
    add("--data.dataset", dest="dataset", default="bbc_news", help="as fit-seq2seq's")
    add("--data.source_column", dest="source_column", help="as fit-seq2seq's (not bbc_news)")
    add("--data.target_column", dest="target_column", help="as fit-seq2seq's (not bbc_news)")
    add("--data.data_files", dest="data_files", help="for the csv/json/parquet builders")
    add("--data.seed", dest="seed", type=int, default=42, help="the split's seed")
    add("--data.val_fraction", dest="val_fraction", type=float, default=0.1, help="as fit's")
    add("--data.test_fraction", dest="test_fraction", type=float, default=0.1, help="as fit's")
    add("--split", choices=["validation", "test"], default="test", help="the split scored")
    add(
        "--model", dest="ckpt_path", action="append", default=[], metavar="CKPT",
        help="also score this tscratch fit-seq2seq checkpoint (repeatable)",
    )  # fmt: skip
    add("--num_beams", type=int, metavar="K", help="beams for --model (default: its own)")
    add(
        "--no_repeat_ngram_size", type=int, metavar="N",
        help="n-gram blocking for --model (default: its own; 0 off)",
    )  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> None:
    if args.num_beams is not None and args.num_beams < 1:  # before the slow load
        raise UserError(f"--num_beams ({args.num_beams}) must be at least 1")
    if args.no_repeat_ngram_size is not None and args.no_repeat_ngram_size < 0:
        raise UserError(
            f"--no_repeat_ngram_size ({args.no_repeat_ngram_size}) must be 0 (off) or positive"
        )
    from tscratch.data.seq2seq_pairs import headline_pairs

    pairs = headline_pairs(
        args.dataset, args.source_column, args.target_column, args.val_fraction,
        args.test_fraction, args.seed, data_files=args.data_files,
    )  # fmt: skip
    header, *results = baseline_scores(pairs, args.split)
    options = {"num_beams": args.num_beams, "no_repeat_ngram_size": args.no_repeat_ngram_size}
    results += checkpoint_scores(args, pairs, args.split, options)
    print(
        f"mean training headline: {header['mean_headline_words']:.2f} words -> lead-{header['n']}"
    )
    width = max(16, *(len(r["baseline"]) + 2 for r in results))
    print(
        f"{'baseline':<{width}}{'split':<12}{'rows':>6}{'ROUGE-1':>9}{'ROUGE-2':>9}{'ROUGE-L':>9}"
    )
    for r in results:
        print(
            f"{r['baseline']:<{width}}{r['split']:<12}{r['rows']:>6}{r['rouge1']:>9.4f}"
            f"{r['rouge2']:>9.4f}{r['rougeL']:>9.4f}"
        )


def main(argv: list[str] | None = None) -> int:
    return run_command(run, build_parser().parse_args(argv))
