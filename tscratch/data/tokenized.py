"""The tokenized splits of `TextClassificationData`, cached by `datasets` under the cache folder.

A split's cache key names the tokenizer, how its texts become rows (`ENCODING` for single texts
cut at `max_length`, `PAIR_ENCODING` for pairs, `WINDOWS` and the stride for texts read whole,
and "pooled" for a training split whose texts stay whole rows), `max_length`, and the split's
texts and labels: a change to any of them tokenizes it again. The keys of cut single texts and
of pairs are those they had before windows existed.
"""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset
from tokenizers import Tokenizer

from tscratch.data.encoding import ENCODING, PAIR_ENCODING, PairEncoder, encode_ids
from tscratch.data.sources import column
from tscratch.data.tokenizer import fingerprint
from tscratch.data.windows import encode_windows

WINDOWS = "windows-v1"
"""Names how `encode_windows` reads texts (with its stride); part of a windowed split's key."""


def tokenize_split(
    ds: Dataset,
    split: str,
    tokenizer: Tokenizer,
    max_length: int,
    cache_dir: str,
    pairs: bool = False,
    stride: int | None = None,
    key: str | None = None,
    pooled: bool = False,
) -> Dataset:
    """``ds`` (``text``, maybe ``text_pair``, ``labels``) tokenized: ``input_ids``, ``labels``,
    ``length`` (and ``token_type_ids`` for ``pairs``); with a ``stride``, texts are read in
    windows (`encode_windows`: the training split's rows are windows unless ``pooled``, another
    split's rows hold each text's ``windows``). Cached under ``key`` (default: the module
    docstring's), so the same split is read back, not tokenized again."""
    training_windows = stride is not None and split == "train"
    window_rows = training_windows and not pooled
    if key is None:
        texts, labels = column(ds, "text"), map(str, column(ds, "labels"))
        if pairs:
            parts = (PAIR_ENCODING, str(max_length), texts, column(ds, "text_pair"), labels)
        else:
            reading = () if stride is None else (WINDOWS, f"stride-{stride}")
            if training_windows and pooled:  # texts, not windows, as rows
                reading += ("pooled",)
            parts = (ENCODING, *reading, str(max_length), texts, labels)
        key = fingerprint(fingerprint(tokenizer.to_str()), *parts)
    encoder = PairEncoder(tokenizer, max_length) if pairs else None

    def encode(batch: dict[str, list]) -> dict[str, list]:
        if stride is not None:
            return encode_windows(batch, tokenizer, max_length, stride, window_rows)
        if encoder is not None:
            ids, types = encoder(batch["text"], batch["text_pair"])
            return {"input_ids": ids, "token_type_ids": types, "length": list(map(len, ids))}
        ids = encode_ids(tokenizer, batch["text"], max_length)
        return {"input_ids": ids, "length": [len(i) for i in ids]}

    removed = ["text", "text_pair"] if pairs else ["text"]
    if window_rows:  # each window a row: every old column goes
        removed = ds.column_names
    folder = Path(cache_dir) / "tokenized"
    folder.mkdir(parents=True, exist_ok=True)
    return ds.map(
        encode,
        batched=True,
        remove_columns=removed,
        cache_file_name=str(folder / f"{split}-{key}.arrow"),
        new_fingerprint=key,
        desc=f"Tokenizing {split}",
    )
