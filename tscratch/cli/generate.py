"""Headlines from a trained encoder-decoder: `tscratch generate`.

`tscratch generate --model CKPT [TEXT ...] [--file FILE|- ...] [--per_line]` prints
one generated line per input text, in input order: the texts given as arguments first, then each
`--file` (`-` is stdin), a whole file being one text, or with `--per_line` each non-blank line.
The checkpoint (written by tscratch fit-seq2seq, read as data only) carries the tokenizer and the
start/end ids; texts are cut at its source `max_length`, as in training.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tscratch.cli.parsing import ArgumentParser
from tscratch.errors import MissingFile, UserError, run_command

# torch and the model are imported by the functions that use them: `--help` and a bad flag
# answer without torch.
if TYPE_CHECKING:
    from tscratch.training.seq2seq import Seq2SeqTask


def open_generator(path: str) -> Seq2SeqTask:
    """The trained task of a tscratch fit-seq2seq checkpoint, in eval mode on the CPU; one line for
    a missing or broken file, or another script's checkpoint."""
    from tscratch.training.checkpointing import read_checkpoint

    return generator_from(read_checkpoint(Path(path)), path)


def generator_from(checkpoint: dict, path: str) -> Seq2SeqTask:
    """`open_generator` for a checkpoint already read from `path`."""
    from tscratch.training.checkpointing import CheckpointError
    from tscratch.training.seq2seq import Seq2SeqTask

    hparams = checkpoint.get("hyper_parameters") or {}
    if "num_decoder_layers" not in hparams or checkpoint.get("tokenizer_json") is None:
        if "num_classes" in hparams:
            kind = "a classifier (tscratch fit)"
        elif any(k.startswith("model.head.") for k in checkpoint["state_dict"]):
            kind = "a masked-LM encoder (tscratch pretrain)"
        else:
            kind = "not tscratch's encoder-decoder"
        raise CheckpointError(
            f"--model {path} is {kind}, not a checkpoint written by tscratch fit-seq2seq; pass "
            "one from the checkpoints/ folder of a tscratch fit-seq2seq run"
        )
    return Seq2SeqTask.from_checkpoint(checkpoint).eval()


def read_texts(texts: list[str], files: list[str], per_line: bool) -> list[str]:
    """The arguments' texts, then each file's (`-`: stdin): the whole file or each non-blank
    line."""
    out = list(texts)
    for file in files:
        if file == "-":
            content = sys.stdin.read()
        else:
            if not Path(file).is_file():
                raise MissingFile(f"--file {file}: no such file")
            content = Path(file).read_text(encoding="utf-8", errors="replace")
        if per_line:
            out += [line for line in content.splitlines() if line.strip()]
        elif content.strip():
            out.append(content)
    blank = [i for i, text in enumerate(out) if not text.strip()]
    if blank:
        raise UserError(f"input text {blank[0] + 1} is blank; give text to write a headline for")
    return out


def headlines(
    task: Seq2SeqTask, texts: list[str], num_beams: int, batch_size: int = 16
) -> list[str]:
    """One generation per text, in order (run longest first, in batches of similar length)."""
    import torch

    from tscratch.data.encoding import encode_ids, pad_batch

    ids = encode_ids(task.tokenizer, texts, task.max_length)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    out = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        input_ids, mask = pad_batch([ids[i] for i in rows], task.hparams.pad_id)
        with torch.no_grad():
            generated = task.generate_texts(input_ids, mask, num_beams)
        for i, text in zip(rows, generated, strict=True):
            out[i] = text
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__.splitlines()[0], renamed={"--ckpt_path": "--model"})
    add = parser.add_argument
    add("texts", nargs="*", help="texts to write headlines for (before those of --file)")
    add(
        "--model", dest="ckpt_path", required=True, metavar="CKPT",
        help="a checkpoint written by tscratch fit-seq2seq",
    )  # fmt: skip
    add(
        "--file", action="append", default=[], metavar="FILE",
        help="a file of text, '-' for stdin (repeatable): one text per file, or per line "
        "with --per_line",
    )  # fmt: skip
    add("--per_line", action="store_true", help="each non-blank line of --file is a text")
    add(
        "--num_beams", type=int, metavar="K",
        help="beam search with K beams; 1 is greedy (default: the checkpoint's, as its test)",
    )  # fmt: skip
    add("--max_new_tokens", type=int, metavar="N", help="most tokens per headline")
    add("--length_penalty", type=float, metavar="ALPHA", help="GNMT length penalty alpha")
    add(
        "--no_repeat_ngram_size", type=int, metavar="N",
        help="never repeat an N-gram within a headline; 0 allows repeats (default: the "
        "checkpoint's)",
    )  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> None:
    if not (args.texts or args.file):  # before the slow load
        raise UserError("no input: pass texts as arguments or --file FILE ('-' for stdin)")
    for name in ("num_beams", "max_new_tokens"):
        if (value := getattr(args, name)) is not None and value < 1:
            raise UserError(f"--{name} ({value}) must be at least 1")
    if args.length_penalty is not None and args.length_penalty < 0:
        raise UserError(f"--length_penalty ({args.length_penalty}) must be >= 0")
    if args.no_repeat_ngram_size is not None and args.no_repeat_ngram_size < 0:
        raise UserError(
            f"--no_repeat_ngram_size ({args.no_repeat_ngram_size}) must be 0 (off) or positive"
        )
    texts = read_texts(args.texts, args.file, args.per_line)
    task = open_generator(args.ckpt_path)
    for name in ("max_new_tokens", "length_penalty", "no_repeat_ngram_size"):
        if getattr(args, name) is not None:
            task.hparams[name] = getattr(args, name)
    num_beams = task.hparams.num_beams if args.num_beams is None else args.num_beams
    for line in headlines(task, texts, num_beams):
        print(line)


def main(argv: list[str] | None = None) -> int:
    return run_command(run, build_parser().parse_args(argv))
