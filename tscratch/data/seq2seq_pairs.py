"""Source/target pairs for the encoder-decoder and the batches made of them.

`headline_pairs` reads the examples `HeadlineData` serves: on the built-in BBC News corpus each
article cut into its body (the source) and its first line, the headline (the target), on
tscratch fit's classification split; for any other source, two columns. `Seq2SeqCollator` turns
tokenized pairs into the batches described in `tscratch.data.headlines`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
from datasets import Dataset

from tscratch.data.encoding import pad_batch
from tscratch.data.loading import BBC_NEWS, load_source
from tscratch.data.masking import IGNORE_INDEX
from tscratch.data.sources import SPLIT_ALIASES, column, grouped_stratified_split, pick_column
from tscratch.data.splits import load_labeled_splits
from tscratch.data.tokenizer import default_cache_dir
from tscratch.errors import UserError

SPLITS = ("train", "validation", "test")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pair:
    """One example: the text to summarise and its headline."""

    source: str
    target: str


def split_headline(text: str) -> Pair:
    """A BBC article as (body, headline): the first line is the headline, the rest the body."""
    headline, _, body = text.strip().partition("\n")
    return Pair(body.strip(), headline.strip())


def headline_pairs(
    dataset: str = BBC_NEWS,
    source_column: str | None = None,
    target_column: str | None = None,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 42,
    name: str | None = None,
    data_files: str | list[str] | dict[str, str | list[str]] | None = None,
    cache_dir: str | None = None,
) -> dict[str, list[Pair]]:
    """The train/validation/test examples a `HeadlineData` with these arguments serves.

    BBC News without columns: tscratch fit's classification split (same seed and fractions), each
    article cut by `split_headline`. Otherwise both columns name the source and target text.
    Either way, validation and test keep only sources the training split does not hold: BBC
    News files a few stories twice under edited headlines, and a body seen in training with
    its headline would score the model on what it memorised.
    """
    if (source_column is None) != (target_column is None):
        raise UserError(
            f"--data.source_column ({source_column!r}) and --data.target_column "
            f"({target_column!r}) go together: name both, or neither for bbc_news headlines"
        )
    if source_column is None:
        if dataset != BBC_NEWS:
            raise UserError(
                f"dataset {dataset!r} needs --data.source_column NAME and --data.target_column "
                "NAME (the text to summarise and its headline); only bbc_news has built-in "
                "headlines"
            )
        splits = load_labeled_splits(
            dataset, None, None, None, None, val_fraction, test_fraction, seed, None, cache_dir
        )
        pairs = {s: [split_headline(t) for t in column(splits[s], "text")] for s in SPLITS}
        return unseen_sources(pairs)
    cache = os.path.join(cache_dir or default_cache_dir(), "datasets")
    raw = load_source(dataset, name, data_files, cache_dir=cache)
    pairs = _column_pairs(raw, source_column, target_column, val_fraction, test_fraction, seed)
    return unseen_sources(pairs)


def unseen_sources(pairs: dict[str, list[Pair]]) -> dict[str, list[Pair]]:
    """The splits with every validation/test pair whose source is also a training source
    dropped (the number dropped is logged)."""
    seen = {p.source for p in pairs["train"]}
    kept = {
        s: [p for p in rows if s == "train" or p.source not in seen] for s, rows in pairs.items()
    }
    dropped = {s: len(pairs[s]) - len(kept[s]) for s in ("validation", "test") if s in pairs}
    if any(dropped.values()):
        logger.info(
            "dropped %d validation and %d test pairs whose source text is also in training",
            dropped.get("validation", 0), dropped.get("test", 0),
        )  # fmt: skip
    for split in SPLITS:
        if split in kept and not kept[split]:
            raise UserError(
                f"every {split} source is also a training source; give the {split} split "
                "texts of its own"
            )
    return kept


def _column_pairs(
    raw: dict[str, Dataset], source: str, target: str, val: float, test: float, seed: int
) -> dict[str, list[Pair]]:
    splits = {SPLIT_ALIASES[k.lower()]: v for k, v in raw.items() if k.lower() in SPLIT_ALIASES}
    splits = splits or {"train": next(iter(raw.values()))}
    columns = splits["train"].column_names
    source = pick_column(columns, source, (), "source")
    target = pick_column(columns, target, (), "target")
    pairs = {
        s: [
            Pair(a.strip(), b.strip())
            for a, b in zip(column(ds, source), column(ds, target), strict=True)
            if a and b and a.strip() and b.strip()
        ]
        for s, ds in splits.items()
    }
    missing = {s: f for s, f in (("test", test), ("validation", val)) if s not in pairs}
    if missing:
        train = pairs["train"]
        parts = grouped_stratified_split([p.source for p in train], [0] * len(train), missing, seed)
        pairs.update({s: [train[i] for i in rows] for s, rows in parts.items()})
    for split in SPLITS:
        if not pairs[split]:
            raise UserError(f"the {split} split has no rows with both texts; add data")
    return pairs


class Seq2SeqCollator:
    """Pads source rows and builds the shifted decoder input and the labels (module docstring).

    Rows are `{"input_ids", "target_ids", "index"}` (target ids without start or end), plus
    `"reference"` for evaluation rows. `source_widths` and `target_widths` are what S and T may be
    (`widths_for`); () pads to the longest row's multiple of 8.
    """

    def __init__(
        self,
        pad_id: int,
        start_id: int,
        end_id: int,
        source_widths: tuple[int, ...] = (),
        target_widths: tuple[int, ...] = (),
    ) -> None:
        self.pad_id, self.start_id, self.end_id = pad_id, start_id, end_id
        self.source_widths, self.target_widths = source_widths, target_widths

    def __call__(self, rows: list[dict]) -> dict:
        sources = [r["input_ids"] for r in rows]
        input_ids, attention_mask = pad_batch(sources, self.pad_id, self.source_widths)
        decoder_input_ids, decoder_mask = pad_batch(
            [[self.start_id, *r["target_ids"]] for r in rows], self.pad_id, self.target_widths
        )
        ends = [[*r["target_ids"], self.end_id] for r in rows]
        labels, _ = pad_batch(ends, IGNORE_INDEX, self.target_widths)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_mask,
            "labels": labels,
            "index": torch.as_tensor([r["index"] for r in rows], dtype=torch.long),
        }
        if "reference" in rows[0]:
            batch["references"] = [r["reference"] for r in rows]
        return batch
