"""Headline generation data: article bodies in, headlines out, for the encoder-decoder.

On the built-in BBC News corpus each article's first line is its headline and the rest (after a
blank line) its body. The articles are split exactly as tscratch fit splits them for classification
(`load_labeled_splits` with the same seed and fractions), so the test articles are the
classifier's test articles, and a tscratch pretrain checkpoint, which read only that training split,
never saw them. Any other source tscratch fit reads works too, given the columns of its sources and
targets (`source_column`, `target_column`); its missing validation/test splits are carved with
the same seeded, duplicate-grouped dealing, from one stratum.

Batches (Hugging Face's layout, True/1 = real token):
- `input_ids`, `attention_mask` (B, S): `[CLS] body...` (a BERT-family tokenizer also closes it
  with `[SEP]`), cut at `max_length`;
- `decoder_input_ids`, `decoder_attention_mask` (B, T): `[CLS] headline...`, the start token
  first (targets shifted right);
- `labels` (B, T): `headline... [SEP]`, -100 at padding;
- `index` (B,): row numbers in the split; evaluation batches also carry `references`, the raw
  headlines (a list of B strings) that ROUGE compares against.
The target is cut to `target_max_length` tokens, start (or end) token included.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from tscratch.data.base import TokenizedData, check_batching
from tscratch.data.encoding import PadWidths, encode_ids, widths_for
from tscratch.data.loading import BBC_NEWS
from tscratch.data.sampler import ResumableDataLoader
from tscratch.data.seq2seq_pairs import SPLITS, Pair, Seq2SeqCollator, headline_pairs
from tscratch.data.tokenizer import cached_tokenizer, char_limit, default_cache_dir, load_tokenizer
from tscratch.errors import UserError

logger = logging.getLogger(__name__)

START, END = "[CLS]", "[SEP]"  # the decoder's start and end tokens (in every tscratch tokenizer)


@dataclass(frozen=True)
class _Prepared:
    pairs: dict[str, list[Pair]]
    tokenizer: Tokenizer


class HeadlineData(TokenizedData):
    """Articles and their headlines, tokenized and served as encoder-decoder batches.

    The tokenizer is trained on the training split's texts (sources and targets; cached on disk
    as tscratch fit's), or loaded from `tokenizer` (what tscratch fit-seq2seq passes with
    `--model.init_from`, so the ids are the pretrained encoder's). The training loader is
    length-bucketed and resumable mid-epoch, as tscratch fit's; evaluation loaders run longest
    first.

    Args:
        dataset: "bbc_news" (built in: first line headline, rest body), or any source tscratch fit
            reads ("csv"/"json"/"parquet" with data_files, a .csv/.json/.jsonl/.parquet file or
            folder, a hub id) with source_column and target_column.
        source_column: Column of the texts to summarise (not for bbc_news).
        target_column: Column of their headlines (not for bbc_news).
        name: Configuration name of a hub dataset.
        data_files: Files for the csv/json/parquet builders, as datasets.load_dataset takes them.
        val_fraction: Share carved for validation (bbc_news: tscratch fit's, per class).
        test_fraction: Share carved for test (bbc_news: tscratch fit's, per class).
        seed: Seed of the split (tscratch fit's default 42 keeps its test articles) and of the
            training order.
        tokenizer: Path to a tokenizer.json with [CLS] and [SEP], instead of training one.
        tokenizer_model: Subword model trained on the training split: "wordpiece" or "bpe".
        vocab_size: Target vocabulary size of the trained tokenizer.
        max_length: Most source tokens, [CLS] included; longer bodies are cut.
        target_max_length: Most target tokens, the start (or end) token included; longer
            headlines are cut.
        batch_size: Training batch size (per process).
        eval_batch_size: Validation/test batch size (default: 2 * batch_size).
        num_workers: DataLoader worker processes.
        cache_dir: Where tokenizers and datasets are cached (default: $TSCRATCH_CACHE or
            ~/.cache/tscratch).
        bucket_size: Batches per length-sorting window of the training order.
        pad_widths: What batches are padded to: "multiple_of_8" (the longest row rounded up) or
            "fixed" (the next of 16, 24, 32, 48, 64, 96, 128, ... up to max_length, or
            target_max_length for targets: few shapes for a compiled model; meant for GPUs).
        max_tokens: Size training batches by source tokens: as many rows as fit in this many
            padded source tokens (rows x padded width, per process), as in tscratch fit;
            batch_size and bucket_size then do not apply to training.
    """

    def __init__(
        self,
        dataset: str = BBC_NEWS,
        source_column: str | None = None,
        target_column: str | None = None,
        name: str | None = None,
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 42,
        tokenizer: str | None = None,
        tokenizer_model: Literal["wordpiece", "bpe"] = "wordpiece",
        vocab_size: int = 8000,
        max_length: int = 256,
        target_max_length: int = 32,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        cache_dir: str | None = None,
        bucket_size: int = 100,
        pad_widths: PadWidths = "multiple_of_8",
        max_tokens: int | None = None,
    ) -> None:
        super().__init__()
        for arg, value, least in (
            ("vocab_size", vocab_size, 8),
            ("max_length", max_length, 2),
            ("target_max_length", target_max_length, 2),
            ("batch_size", batch_size, 1),
            ("bucket_size", bucket_size, 1),
        ):
            if value < least:
                raise UserError(f"data.{arg} ({value}) must be at least {least}")
        check_batching(pad_widths, max_tokens, max_length)
        self.save_hyperparameters(ignore=["vocab_size"])  # the model's is the real size
        self._target_vocab_size = vocab_size
        self._cache_dir = cache_dir or default_cache_dir()
        self._eval_batch_size = eval_batch_size or 2 * batch_size
        self._prepared: _Prepared | None = None
        self._rows: dict[str, list[dict]] = {}

    @property
    def max_length(self) -> int:
        """Most source tokens, `[CLS]` included."""
        return self.hparams.max_length

    @property
    def target_max_length(self) -> int:
        """Most target tokens, the start or end token included."""
        return self.hparams.target_max_length

    @property
    def bos_id(self) -> int:
        """Id of the decoder's start token, `[CLS]`."""
        return self._special(START)

    @property
    def eos_id(self) -> int:
        """Id of the end token, `[SEP]`."""
        return self._special(END)

    def _special(self, token: str) -> int:
        token_id = self.tokenizer.token_to_id(token)
        if token_id is None:
            raise UserError(
                f"the tokenizer has no {token} token (the decoder's start is {START}, its end "
                f"{END}); use a tokenizer trained by tscratch or a BERT tokenizer"
            )
        return token_id

    def pairs(self, split: Literal["train", "validation", "test"]) -> list[Pair]:
        """The split's examples as raw text."""
        return self._prepare().pairs[split]

    def _prepare(self) -> _Prepared:
        if self._prepared is None:
            hp = self.hparams
            pairs = headline_pairs(
                hp.dataset, hp.source_column, hp.target_column, hp.val_fraction,
                hp.test_fraction, hp.seed, hp.name, hp.data_files, self._cache_dir,
            )  # fmt: skip
            if hp.tokenizer is not None:
                tokenizer = load_tokenizer(hp.tokenizer)
            else:
                texts = [t for p in pairs["train"] for t in (p.target, p.source)]
                tokenizer = cached_tokenizer(
                    texts, hp.tokenizer_model, self._target_vocab_size,
                    char_limit(hp.max_length), self._cache_dir,
                )  # fmt: skip
            self._prepared = _Prepared(pairs, tokenizer)
            self.bos_id, self.eos_id  # noqa: B018 -- a tokenizer without them fails at start-up
        return self._prepared

    def setup(self, stage: str | None = None) -> None:
        """Tokenizes every split (in memory: a few thousand short rows)."""
        if self._rows:
            return
        prepared = self._prepare()
        for split, pairs in prepared.pairs.items():
            self._rows[split] = self.encode(pairs, with_references=split != "train")
        if stage in (None, "fit"):
            self.describe()

    def encode(self, pairs: Sequence[Pair], with_references: bool = False) -> list[dict]:
        """Rows for `Seq2SeqCollator`: source ids cut at max_length, target ids (no special
        tokens) cut to leave room for the start or end token."""
        tokenizer, hp = self.tokenizer, self.hparams
        sources = encode_ids(tokenizer, [p.source for p in pairs], hp.max_length)
        limit = char_limit(hp.target_max_length)
        targets = tokenizer.encode_batch(
            [p.target[:limit] for p in pairs], add_special_tokens=False
        )
        rows = []
        for i, (source, target) in enumerate(zip(sources, targets, strict=True)):
            row = {"input_ids": source, "target_ids": target.ids[: hp.target_max_length - 1]}
            row["index"] = i
            if with_references:
                row["reference"] = pairs[i].target
            rows.append(row)
        return rows

    def rows(self, split: Literal["train", "validation", "test"]) -> list[dict]:
        self.setup()
        return self._rows[split]

    def collator(self) -> Seq2SeqCollator:
        targets = widths_for(self.hparams.pad_widths, self.target_max_length)
        return Seq2SeqCollator(self.pad_id, self.bos_id, self.eos_id, self.widths, targets)

    def train_dataloader(self) -> ResumableDataLoader:
        """Length-bucketed (by source length), epoch-seeded, resumable training batches."""
        rows = self.rows("train")
        sampler = self.bucket_sampler([len(r["input_ids"]) for r in rows])
        return self.training_loader(rows, sampler, self.collator())

    def _eval_loader(self, split: Literal["validation", "test"]) -> DataLoader:
        rows = self.rows(split)
        lengths = [len(r["input_ids"]) for r in rows]
        return self.longest_first_loader(rows, lengths, self._eval_batch_size, self.collator())

    def val_dataloader(self) -> DataLoader:
        """Validation batches, longest sources first, the same on every call."""
        return self._eval_loader("validation")

    def test_dataloader(self) -> DataLoader:
        """Test batches, longest sources first, the same on every call."""
        return self._eval_loader("test")

    def state_dict(self) -> dict:
        """Nothing: the model checkpoint stores the tokenizer."""
        return {}

    def describe(self) -> str:
        """Logs and returns a one-paragraph summary of the splits and lengths."""
        sizes = ", ".join(f"{s} {len(self.rows(s)):,}" for s in SPLITS)
        train = self.rows("train")
        cut = sum(len(r["input_ids"]) >= self.max_length for r in train) / len(train)
        words = statistics.mean(len(p.target.split()) for p in self.pairs("train"))
        summary = (
            f"headlines from {self.hparams.dataset}: {sizes} articles; vocabulary "
            f"{self.vocab_size:,} tokens; sources cut at {self.max_length} tokens "
            f"({cut:.0%} of training bodies reach it), targets at {self.target_max_length}; "
            f"training headlines average {words:.1f} words."
        )
        logger.info(summary)
        return summary
