"""Predictions from a checkpoint alone: model, tokenizer and label names all come from the file.

`python scripts/predict.py --ckpt_path CKPT [TEXT ...] [--input FILE]` prints one JSON object per
input: `{"text": ..., "label": ..., "probabilities": {label: p, ...}}`. The checkpoint is read
with `weights_only=True`, so a file from a stranger cannot run code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer

from tscratch.data.encoding import encode_texts
from tscratch.errors import MissingFile, UserError, report
from tscratch.training.checkpointing import read_checkpoint
from tscratch.training.classification import ClassificationTask


class Predictor:
    """A trained classifier with its tokenizer, ready to label raw texts."""

    def __init__(self, ckpt_path: str | Path, device: str = "cpu") -> None:
        path = Path(ckpt_path)
        if not path.is_file():
            raise MissingFile(f"--ckpt_path {ckpt_path}: no such file")
        # Read once, as data only: one clear line for a torn, corrupt or code-carrying file.
        checkpoint = read_checkpoint(path, map_location=device)
        self.model = ClassificationTask.from_checkpoint(checkpoint).to(device).eval()
        if self.model.tokenizer_json is None:
            raise UserError(f"{path} holds no tokenizer; was it saved by tscratch?")
        self.tokenizer = Tokenizer.from_str(self.model.tokenizer_json)
        self.max_length = self.model.max_length or self.model.config.max_len
        self.labels = self.model.label_names

    @torch.inference_mode()
    def predict(self, texts: Sequence[str], batch_size: int = 32) -> Iterator[dict]:
        """Yield one result dict per text, in order."""
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start : start + batch_size])
            batch = encode_texts(self.tokenizer, chunk, self.max_length, self.model.hparams.pad_id)
            batch = {k: v.to(self.model.device) for k, v in batch.items()}
            probs = self.model(batch["input_ids"], batch["attention_mask"]).float().softmax(-1)
            for text, p in zip(chunk, probs.tolist(), strict=True):
                best = max(range(len(p)), key=p.__getitem__)
                yield {
                    "text": text,
                    "label": self.labels[best],
                    "probabilities": {
                        name: round(q, 6) for name, q in zip(self.labels, p, strict=True)
                    },
                }


def _read_inputs(texts: list[str], input_file: str | None) -> list[str]:
    lines = list(texts)
    if input_file is not None:
        if input_file == "-":
            lines += sys.stdin.read().splitlines()
        else:
            path = Path(input_file)
            if not path.is_file():
                raise MissingFile(f"--input {input_file}: no such file")
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise UserError("no input: pass texts as arguments or --input FILE (one text per line)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("texts", nargs="*", help="texts to classify")
    parser.add_argument("--ckpt_path", required=True, help="checkpoint written by fit.py")
    parser.add_argument("--input", help="file with one text per line ('-' for stdin)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    try:
        texts = _read_inputs(args.texts, args.input)
        predictor = Predictor(args.ckpt_path, args.device)
        for result in predictor.predict(texts, args.batch_size):
            sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
    except UserError as error:  # bad input: one line, exit 2; anything else is a bug
        return report(error)
    return 0
