"""Raw text for masked-LM pretraining, and the LightningDataModule that serves it masked.

Documents come from any source `TextClassificationData` reads (the text column of its training
split only, cut exactly as tscratch fit cuts it, so the downstream validation and test texts are
never seen; labels are ignored) or from plain `.txt` files. Exact duplicates are dropped, a seeded
`heldout_fraction` of the documents is kept apart for perplexity, and the tokenizer (with a
real [MASK] special token) is trained on the rest. Each document is cut into chunks of at most
`max_length` tokens, each starting with [CLS], so long documents are used whole rather than
truncated.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Literal

from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from tscratch.data.base import TokenizedData, check_batching
from tscratch.data.documents import (
    TokenRows,
    chunk_rows,
    heldout_split,
    is_text_source,
    read_text_files,
)
from tscratch.data.encoding import PadWidths
from tscratch.data.loading import load_source
from tscratch.data.masking import MASK_TOKEN, MaskedLMCollator, TokenMasker
from tscratch.data.sampler import ResumableDataLoader
from tscratch.data.sources import column, prepare_splits
from tscratch.data.tokenizer import cached_tokenizer, default_cache_dir, load_tokenizer
from tscratch.data.words import SEGMENTERS, require_jieba
from tscratch.errors import UserError

logger = logging.getLogger(__name__)

TOKENIZER_CHARS = 100_000  # characters of each document the tokenizer trains on


@dataclass(frozen=True)
class _Prepared:
    tokenizer: Tokenizer
    documents: dict[str, list[str]]  # "train", "validation"


class PretrainingTextData(TokenizedData):
    """Documents for masked-LM pretraining, tokenized, chunked and served as masked batches.

    Batches hold `input_ids` (B, T) with masks applied, `attention_mask` (B, T) bool (True = real
    token), `labels` (B, T) (the original id at masked positions, -100 elsewhere) and `index`
    (B,). Training masks are drawn afresh at every step; validation masks are fixed. The
    training loader is length-bucketed and resumable mid-epoch, as tscratch fit's.

    Args:
        dataset: "bbc_news" (built in), any source tscratch fit takes ("csv"/"json"/"parquet" with
            data_files, a .csv/.json/.jsonl/.parquet file or folder, a hub id): only the text
            column of its training split, cut as tscratch fit cuts it, labels ignored; or a .txt
            file or a folder of .txt files (searched at any depth).
        line_per_document: for .txt sources: each non-blank line is a document (default: each
            file is one).
        name: Configuration name of a hub dataset.
        data_files: Files for the csv/json/parquet builders, as datasets.load_dataset takes them.
        text_column: Column holding the text (default: guessed, as in tscratch fit).
        label_column: Column holding the label (only to cut tscratch fit's splits; default:
            guessed).
        val_fraction: tscratch fit's validation share carved from train (to leave those texts out).
        test_fraction: tscratch fit's test share carved from train (to leave those texts out).
        heldout_fraction: Share of the pretraining documents kept apart for val/perplexity.
        seed: Seed of tscratch fit's split, of the held-out slice and of the training order.
        encoding: Of local CSV/JSON files, as tscratch fit's `data.encoding`.
        tokenizer: Path to a tokenizer.json with a [MASK] token, instead of training one.
        tokenizer_model: Subword model trained on the pretraining text: "wordpiece" or "bpe".
        segmenter: "jieba" trains the tokenizer on jieba's words (as tscratch fit's
            `data.segmenter`); null makes each CJK ideograph a token.
        vocab_size: Target vocabulary size of the trained tokenizer.
        max_length: Most tokens per row, [CLS] included; documents are cut into such rows.
        mlm_probability: Share of real tokens (or words) selected for prediction.
        whole_word_masking: Select whole words instead of single tokens.
        words_from: What a word is to whole-word masking: "tokenizer", a token and its ## pieces
            (each CJK character a word of its own), or "jieba", the words the jieba segmenter
            finds (Chinese words of several characters; needs `pip install jieba`).
        batch_size: Training batch size (per process).
        eval_batch_size: Validation batch size (default: 2 * batch_size).
        num_workers: DataLoader worker processes (0 keeps masking exactly resumable).
        cache_dir: Where tokenizers and datasets are cached (default: $TSCRATCH_CACHE or
            ~/.cache/tscratch).
        bucket_size: Batches per length-sorting window of the training order.
        pad_widths: What batches are padded to: "multiple_of_8" (the longest row rounded up) or
            "fixed" (the next of 16, 24, 32, 48, 64, 96, 128, ... up to max_length: few shapes
            for a compiled model; meant for GPUs).
        max_tokens: Size training batches by tokens: as many rows as fit in this many padded
            tokens (rows x padded width, per process), as in tscratch fit; batch_size and
            bucket_size then do not apply to training.
    """

    def __init__(
        self,
        dataset: str = "bbc_news",
        line_per_document: bool = False,
        name: str | None = None,
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        text_column: str | None = None,
        label_column: str | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        heldout_fraction: float = 0.05,
        seed: int = 42,
        tokenizer: str | None = None,
        tokenizer_model: Literal["wordpiece", "bpe"] = "wordpiece",
        segmenter: Literal["jieba"] | None = None,
        vocab_size: int = 8000,
        max_length: int = 256,
        mlm_probability: float = 0.15,
        whole_word_masking: bool = False,
        words_from: Literal["tokenizer", "jieba"] = "tokenizer",
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        cache_dir: str | None = None,
        bucket_size: int = 100,
        encoding: str = "utf-8",
        pad_widths: PadWidths = "multiple_of_8",
        max_tokens: int | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 < heldout_fraction < 1.0:
            raise UserError(f"heldout_fraction ({heldout_fraction}) must be in (0, 1)")
        for arg, value in (("vocab_size", vocab_size), ("max_length", max_length)):
            if value < 2:
                raise UserError(f"{arg} ({value}) must be at least 2")
        if batch_size < 1:
            raise UserError(f"batch_size ({batch_size}) must be at least 1")
        check_batching(pad_widths, max_tokens, max_length)
        if words_from not in SEGMENTERS:
            raise UserError(f"words_from ({words_from!r}) must be one of {', '.join(SEGMENTERS)}")
        for arg, value in (("words_from", words_from), ("segmenter", segmenter)):
            require_jieba(arg, value)  # before minutes of tokenizing
        if words_from != "tokenizer" and not whole_word_masking:
            raise UserError(
                f"words_from {words_from} says what whole-word masking masks together; add "
                "--data.whole_word_masking true"
            )
        # As in TextClassificationData: the model's vocab_size is the real one, often smaller.
        self.save_hyperparameters(ignore=["vocab_size"])
        self._target_vocab_size = vocab_size
        self._cache_dir = cache_dir or default_cache_dir()
        self._eval_batch_size = eval_batch_size or 2 * batch_size
        self._prepared: _Prepared | None = None
        self._rows: dict[str, list[list[int]]] = {}
        self._starts: dict[str, list[list[bool]] | None] = {}
        self._masker: TokenMasker | None = None

    @property
    def max_length(self) -> int:
        return self.hparams.max_length

    @property
    def masker(self) -> TokenMasker:
        if self._masker is None:
            self._masker = TokenMasker.from_tokenizer(
                self.tokenizer,
                mlm_probability=self.hparams.mlm_probability,
                whole_word=self.hparams.whole_word_masking,
            )
        return self._masker

    def documents(self) -> list[str]:
        """Every pretraining document (before the held-out cut), duplicates dropped."""
        hp = self.hparams
        if is_text_source(hp.dataset):
            texts = read_text_files(hp.dataset, hp.line_per_document)
        else:
            cache = os.path.join(self._cache_dir, "datasets")
            raw = load_source(
                hp.dataset, hp.name, hp.data_files, cache_dir=cache, encoding=hp.encoding
            )
            splits = prepare_splits(
                raw, hp.text_column, hp.label_column, hp.val_fraction, hp.test_fraction, hp.seed
            )
            texts = column(splits.train, "text")  # never the validation or test texts
        return list(dict.fromkeys(texts))

    def _prepare(self) -> _Prepared:
        if self._prepared is None:
            hp = self.hparams
            train, heldout = heldout_split(self.documents(), hp.heldout_fraction, hp.seed)
            if hp.tokenizer is not None:
                tokenizer = load_tokenizer(hp.tokenizer)
            else:
                tokenizer = cached_tokenizer(
                    train,
                    hp.tokenizer_model,
                    self._target_vocab_size,
                    TOKENIZER_CHARS,
                    self._cache_dir,
                    extra_special_tokens=(MASK_TOKEN,),
                    segmenter=hp.segmenter,
                )
            self._prepared = _Prepared(tokenizer, {"train": train, "validation": heldout})
            self._masker = None
            self.masker  # noqa: B018 -- a tokenizer without [MASK] fails here, at start-up
        return self._prepared

    def setup(self, stage: str | None = None) -> None:
        """Tokenizes and chunks the documents."""
        if self._rows:
            return
        prepared = self._prepare()
        hp = self.hparams
        for split, documents in prepared.documents.items():
            self._rows[split], self._starts[split] = chunk_rows(
                prepared.tokenizer, documents, hp.max_length, hp.words_from
            )
        if stage in (None, "fit"):
            self.describe()

    def rows(self, split: Literal["train", "validation"]) -> list[list[int]]:
        """The token-id rows of a split (chunks of documents)."""
        self.setup()
        return self._rows[split]

    def train_dataloader(self) -> ResumableDataLoader:
        """Length-bucketed, epoch-seeded, resumable batches, masked afresh at each step."""
        rows = self.rows("train")
        sampler = self.bucket_sampler([len(r) for r in rows])
        return self.training_loader(
            TokenRows(rows, self._starts["train"]),
            sampler,
            MaskedLMCollator(self.pad_id, self.masker, widths=self.widths),
        )

    def val_dataloader(self) -> DataLoader:
        """Held-out batches, longest first, with the same masks at every epoch."""
        rows = self.rows("validation")
        return self.longest_first_loader(
            TokenRows(rows, self._starts["validation"]),
            [len(r) for r in rows],
            self._eval_batch_size,
            MaskedLMCollator(self.pad_id, self.masker, self.hparams.seed, self.widths),
        )

    def state_dict(self) -> dict:
        """Nothing: the model checkpoint stores the tokenizer."""
        return {}

    def masking_note(self) -> str:
        """What one masked-LM target is: a token, a word of ## pieces or a jieba word."""
        hp = self.hparams
        share = f"{hp.mlm_probability:.0%}"
        if not hp.whole_word_masking:
            return f"masking {share} of the tokens"
        if hp.words_from == "jieba":
            return f"masking {share} of the words, Chinese words as jieba segments them"
        return f"masking {share} of the words (a token and its ## pieces)"

    def describe(self) -> str:
        """Logs and returns a one-paragraph summary of the documents, rows and padding."""
        prepared = self._prepare()
        train, held = self.rows("train"), self.rows("validation")
        lengths = [len(r) for r in train]
        note = self.padding_note(self.bucket_sampler(lengths, num_replicas=1, rank=0), lengths)
        summary = (
            f"pretraining on {self.hparams.dataset}: {len(prepared.documents['train']):,} "
            f"documents ({len(train):,} rows, {sum(lengths):,} tokens), held out "
            f"{len(prepared.documents['validation']):,} documents ({len(held):,} rows); "
            f"vocabulary {self.vocab_size:,} tokens with {MASK_TOKEN}; rows of at most "
            f"{self.hparams.max_length} tokens; {note}; {self.masking_note()}."
        )
        logger.info(summary)
        return summary
