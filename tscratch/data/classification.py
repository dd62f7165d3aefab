"""Text-classification data: the padding collate and the LightningDataModule.

Sources and splits live in `tscratch.data.sources`, the tokenizer in `tscratch.data.tokenizer`,
the length-bucketed resumable loader in `tscratch.data.sampler`. Sequences start with `[CLS]` and
are cut at `max_length`, or with `long_text` "windows" or "pooled" read whole in overlapping
windows (`tscratch.data.windows`); batches are padded to their longest row rounded up
(`pad_widths`). With `text_pair_column`, rows are `[CLS] a [SEP] b [SEP]` with token types
(see `PairEncoder`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from datasets import Dataset
from tokenizers import Tokenizer
from torch import Tensor
from torch.utils.data import DataLoader

from tscratch.data.base import (
    IndexedRows,
    TokenizedData,
    evaluated_rows,
)
from tscratch.data.encoding import PadCollator, PadWidths
from tscratch.data.options import check_options
from tscratch.data.sampler import LengthBucketBatchSampler, ResumableDataLoader
from tscratch.data.sources import LabeledSplits, column
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits
from tscratch.data.tokenized import tokenize_split
from tscratch.data.tokenizer import (
    cached_tokenizer,
    char_limit,
    default_cache_dir,
    load_tokenizer,
)
from tscratch.data.transfer import Augmentation, Teacher, distillation_split
from tscratch.data.windows import (
    LongText,
    check_stride,
    default_stride,
    reads_windows,
    window_room,
)
from tscratch.errors import UserError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Prepared:
    splits: LabeledSplits
    tokenizer: Tokenizer


class TextClassificationData(TokenizedData):
    """Loads, splits and tokenizes a text-classification dataset and serves padded batches.

    Data and tokenizer are prepared on first access to ``vocab_size``, ``num_classes``,
    ``pad_id``, ``label_names`` or ``tokenizer`` (the CLI reads them to size the model) and
    reused by ``setup()``. Batches are dicts of ``input_ids`` (B, T) long, ``attention_mask``
    (B, T) bool (True = real token) and ``labels`` (B,) long, with T the longest row rounded up
    (``pad_widths``); with ``text_pair_column``, batches also carry ``token_type_ids`` (B, T) long
    (0 on ``[CLS] a [SEP]`` and padding, 1 on ``b [SEP]``); validation and test batches also
    carry ``index`` (B,) long, the rows' numbers in their split (``text(split, index)`` gives
    their raw text). The training loader is resumable mid-epoch; under DDP each rank gets a
    disjoint shard, so the Trainer needs ``use_distributed_sampler=False``.

    Args:
        dataset: "bbc_news" (built in, offline), "csv"/"json"/"parquet" with data_files, a path
            to a .csv/.tsv/.json/.jsonl/.parquet file (or a .txt table) or a folder of them, or a
            Hugging Face hub id.
        name: Configuration name of a hub dataset.
        data_files: Files for the csv/json/parquet builders, as datasets.load_dataset takes them.
        text_column: Column holding the text (default: guessed from text, sentence, content...,
            else from the values).
        text_pair_column: Column holding the second text of each row, for pair tasks (same
            question?, does b follow from a?): rows become [CLS] text [SEP] pair [SEP] with
            token types 0 then 1, cut longest-first to max_length (default: single texts).
        label_column: Column holding the label (default: guessed from label, stars, rating,
            sentiment, category, class..., else from the values).
        val_fraction: Share of each class carved from train for validation when there is no
            validation split.
        test_fraction: Share of each class carved from train for test when there is no test split.
        seed: Seed of the carved splits and of the training order (epoch e uses seed + e).
        tokenizer: Path to an existing tokenizer.json to use instead of training one.
        tokenizer_model: Subword model trained on the training split: "wordpiece" or "bpe".
        segmenter: "jieba" cuts Chinese texts into words before the tokenizer reads them (its
            tokens are then words, falling back to characters; needs the zh extra); null makes
            each CJK ideograph a token. "auto" is chosen from the data by `tscratch fit`.
            Ignored with ``tokenizer``, which records its own.
        vocab_size: Target vocabulary size of the trained tokenizer (the real size may be smaller).
            tscratch fit also takes "auto": sized to the amount of training text.
        max_length: Most tokens per sequence, [CLS] included; longer texts are truncated
            (or, with long_text windows, read in windows). tscratch fit also takes "auto":
            enough for 95% of the training texts.
        long_text: Texts longer than max_length: "truncate" reads their first max_length
            tokens; "windows" reads every token, in windows of max_length tokens that overlap
            by stride tokens, each led by [CLS]: each window of a training text is a training
            row with the text's label, and validation and test score each text by the mean of
            its windows' logits, as predict, serve and the exported model then read long texts
            by default (single texts only, not text pairs); "pooled" reads the same windows
            but trains on each text as one example, its loss on the mean of its windows'
            logits (a batch of batch_size texts then holds all their windows).
        stride: With long_text windows or pooled: tokens shared by neighbouring windows
            (default max_length // 4).
        batch_size: Training batch size (per process).
        eval_batch_size: Validation/test batch size (default: 2 * batch_size).
        num_workers: DataLoader worker processes.
        cache_dir: Where tokenizers and tokenized splits are cached (default: $TSCRATCH_CACHE or
            ~/.cache/tscratch).
        bucket_size: Batches per length-sorting window of the training order: larger wastes less
            padding, 1 keeps batches fully random.
        pad_widths: What batches are padded to: "multiple_of_8" (the longest row rounded up) or
            "fixed" (the next of 16, 24, 32, 48, 64, 96, 128, ... up to max_length: a compiled
            model meets few shapes; meant for GPUs with --model.compile true).
        max_tokens: Size training batches by tokens, for large batches on GPUs: as many rows as
            fit in this many padded tokens (rows x padded width, per process), from batches
            sorted by length over the whole epoch; batch_size and bucket_size then do not apply
            to training (batch_size still sets the default eval_batch_size).
        train_rows: Train on only about this many training rows, drawn per class in proportion
            (seeded); validation and test stay whole (for learning curves and quick trials).
        label_delimiter: For multi-label CSV data: the string between a row's labels in the
            label column ("sport|tech" with "|"). A label column of JSON/Parquet lists is
            multi-label without it (one sigmoid per label; docs/tasks.md).
        encoding: Of local CSV/JSON files: utf-8 (a byte-order mark is fine), or gb18030, big5,
            cp1252, utf-16...; a file not valid in it is refused, naming the one it looks like.
        augment_copies: With --model.teacher: augmented copies of each training text, trained on
            the teacher's logits (Tang et al. 2019; by default tscratch fit's plan chooses: 20, or
            fewer on large data); 0: none.
        augment_mask: Probability that a copy masks a word (in CJK text: a character).
        augment_swap: Probability that a copy replaces a word by one of the training texts'.
        augment_ngram: Probability that a copy is cut down to an n-gram of 1-5 words.
    """

    def __init__(
        self,
        dataset: str = "bbc_news",
        name: str | None = None,
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        text_column: str | None = None,
        text_pair_column: str | None = None,
        label_column: str | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 42,
        tokenizer: str | None = None,
        tokenizer_model: Literal["wordpiece", "bpe"] = "wordpiece",
        segmenter: Literal["jieba", "auto"] | None = None,
        vocab_size: int | Literal["auto"] = 8000,
        max_length: int | Literal["auto"] = 256,
        long_text: LongText = "truncate",
        stride: int | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        cache_dir: str | None = None,
        bucket_size: int = 100,
        pad_widths: PadWidths = "multiple_of_8",
        max_tokens: int | None = None,
        train_rows: int | None = None,
        label_delimiter: str | None = None,
        encoding: str = "utf-8",
        augment_copies: int | None = None,
        augment_mask: float = 0.1,
        augment_swap: float = 0.1,
        augment_ngram: float = 0.25,
    ) -> None:
        super().__init__()
        # The target vocab_size stays out of hparams: the model's vocab_size is the real one,
        # often smaller, and Lightning refuses to log two hparams of one name that differ.
        self.save_hyperparameters(ignore=["vocab_size"])
        check_options(self.hparams, vocab_size)  # each bad value in one line, before any data
        if reads_windows(long_text):  # the checkpoint records the stride it was trained on
            self.hparams.stride = default_stride(max_length) if stride is None else stride
        self._target_vocab_size = vocab_size
        self._cache_dir = cache_dir or default_cache_dir()
        self._max_length = max_length
        self._eval_batch_size = eval_batch_size or 2 * batch_size
        self._prepared: _Prepared | None = None
        self._tokenized: dict[str, Dataset] = {}
        self.teacher: Teacher | None = None  # see distill_from
        self.teacher_features: Tensor | None = None  # (N + M, D) pooled vectors, if any
        self.evaluated: dict[str, int] = {}
        """Rows of each evaluation split that the attached Trainer's `limit_val_batches` /
        `limit_test_batches` let it read: the split's first rows (as of its last loader)."""

    # Sizes the CLI links into the model (tokenizer, vocab_size, pad_id: see TokenizedData).
    @property
    def label_names(self) -> list[str]:
        """Class names, indexed by label id."""
        return list(self._prepare().splits.label_names)

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.label_names)

    @property
    def multi_label(self) -> bool:
        """Whether rows carry several labels: ``labels`` is then (B, C) 0/1, not (B,)."""
        train = self._prepare().splits.train
        return len(train) > 0 and isinstance(train[0]["labels"], list)

    @property
    def splits(self) -> LabeledSplits:
        """The raw splits it trains and evaluates on (`train_rows` applied), as
        `load_labeled_splits` gives them: ``text`` (and ``text_pair``) and ``labels`` columns."""
        return self._prepare().splits

    @property
    def cache_dir(self) -> str:
        """Where tokenizers and tokenized splits are cached (the argument, or the default)."""
        return self._cache_dir

    @property
    def max_length(self) -> int:
        """Most tokens per sequence, ``[CLS]`` included."""
        return self._max_length

    @property
    def windows(self) -> bool:
        """Whether long texts are read whole, in windows (``long_text`` "windows" or
        "pooled")."""
        return reads_windows(self.hparams.long_text)

    @property
    def pooled(self) -> bool:
        """Whether a training text is one example scored by the mean of its windows' logits
        (``long_text="pooled"``): its training rows then hold ``windows``, as evaluation's do."""
        return self.hparams.long_text == "pooled"

    @property
    def text_pair_column(self) -> str | None:
        """The column of second texts when rows are text pairs, else None."""
        return self.hparams.text_pair_column

    def _prepare(self) -> _Prepared:
        if self._prepared is None:
            hp = self.hparams
            splits = load_labeled_splits(
                **{k: hp[k] for k in SPLIT_ARGS}, cache_dir=self._cache_dir
            )
            if hp.tokenizer is not None:
                tokenizer = load_tokenizer(hp.tokenizer)
            else:
                texts = column(splits.train, "text")
                if hp.text_pair_column is not None:  # both sides of the pairs
                    texts += column(splits.train, "text_pair")
                limit = char_limit(self._max_length)
                tokenizer = cached_tokenizer(
                    texts,
                    hp.tokenizer_model,
                    self._target_vocab_size,
                    limit,
                    self._cache_dir,
                    segmenter=hp.segmenter,
                )
            self._prepared = _Prepared(splits, tokenizer)
        return self._prepared

    @property
    def augmentation(self) -> Augmentation:
        """The copies distillation makes (``augment_*`` options, ``seed``)."""
        return Augmentation.of(self.hparams)

    def distill_from(self, teacher: Teacher) -> None:
        """Train on ``teacher``'s logits of the training texts and their augmented copies
        (`tscratch.data.transfer`); call before ``setup``."""
        if self.text_pair_column is not None or self.multi_label:
            kind = "text pairs" if self.text_pair_column else "multi-label data"
            raise UserError(f"--model.teacher distils single-label, single-text data, not {kind}")
        if self.windows:  # the teacher gives one set of logits per text, not per window
            raise UserError(
                "--model.teacher learns the teacher's logits of whole texts; drop "
                f"--data.long_text {self.hparams.long_text} (or --model.teacher)"
            )
        self.teacher, self._tokenized = teacher, {}

    def prepare_data(self) -> None:
        """Reads data and tokenizer; runs the teacher unless its logits are cached."""
        super().prepare_data()
        if self.teacher is not None:
            self.setup()

    def setup(self, stage: str | None = None) -> None:
        """Tokenizes all splits (cached by datasets under ``cache_dir``)."""
        if self._tokenized:
            return
        prepared, hp = self._prepare(), self.hparams
        stride = hp.stride if self.windows else None
        if stride is not None:  # now that the tokenizer says how many special tokens it adds
            room = window_room(prepared.tokenizer, self._max_length)
            check_stride(stride, room, self._max_length, "data.stride")
        pairs = self.text_pair_column is not None
        for split in ("train", "validation", "test"):
            self._tokenized[split] = tokenize_split(
                prepared.splits[split], split, prepared.tokenizer, self._max_length,
                self._cache_dir, pairs, stride, pooled=self.pooled,
            )  # fmt: skip
        if self.teacher is not None:  # copies and teacher logits join the training rows
            train, self.teacher_features = distillation_split(self, self._tokenized["train"])
            self._tokenized["train"] = train
        if stage in (None, "fit"):
            self.describe()

    def split(self, name: Literal["train", "validation", "test"]) -> Dataset:
        """The tokenized split: ``input_ids``, ``labels`` and ``length`` columns (and
        ``token_type_ids`` for text pairs). With ``long_text="windows"``, a training row is a
        window, and a validation or test row a text holding its ``windows`` (a training row
        too with ``long_text="pooled"``)."""
        self.setup()
        return self._tokenized[name]

    def text(self, split: Literal["train", "validation", "test"], index: int) -> str:
        """The raw text of row ``index`` of ``split`` (an eval batch's ``index`` names rows);
        a pair reads ``text [SEP] text_pair``."""
        row = self._prepare().splits[split][int(index)]
        if self.text_pair_column is None:
            return row["text"]
        return f"{row['text']} [SEP] {row['text_pair']}"

    def train_sampler(self) -> LengthBucketBatchSampler:
        """The training batch sampler, sharded over the Trainer's processes when attached."""
        return self.bucket_sampler(column(self.split("train"), "length"))

    def train_dataloader(self) -> ResumableDataLoader:
        """Length-bucketed, epoch-seeded, resumable training batches."""
        collate = PadCollator(self.pad_id, self.widths, self.teacher_features)
        return self.training_loader(self.split("train"), self.train_sampler(), collate)

    def _eval_dataloader(self, name: Literal["validation", "test"]) -> DataLoader:
        ds = self.split(name)
        trainer = self.trainer  # a run limited to some batches reads the split's first rows
        limit = getattr(trainer, f"limit_{'val' if name == 'validation' else name}_batches", None)
        self.evaluated[name] = evaluated_rows(len(ds), self._eval_batch_size, limit)
        return self.longest_first_loader(
            IndexedRows(ds),  # batches carry row numbers: see text()
            column(ds, "length"),
            self._eval_batch_size,
            PadCollator(self.pad_id, self.widths),
            first=self.evaluated[name],
        )

    def val_dataloader(self) -> DataLoader:
        """Validation batches, sorted by length, same on every call."""
        return self._eval_dataloader("validation")

    def test_dataloader(self) -> DataLoader:
        """Test batches, sorted by length, same on every call."""
        return self._eval_dataloader("test")

    def state_dict(self) -> dict:
        """Nothing: the model checkpoint stores the tokenizer and label names."""
        return {}

    def _pairs_note(self) -> str:
        if self.text_pair_column is None:
            return ""
        return f" of text pairs ({self.hparams.text_column or 'text'} + {self.text_pair_column})"

    def describe(self) -> str:
        """Logs and returns a one-paragraph summary of the splits, vocabulary and padding."""
        self.setup()
        sizes = ", ".join(f"{s} {len(self._tokenized[s]):,}" for s in self._tokenized)
        lengths = column(self.split("train"), "length")
        truncated = sum(n >= self._max_length for n in lengths) / len(lengths)
        cut = f"{truncated:.0%} of training rows truncated"
        if self.pooled:  # a batch's rows are its texts' windows: name the most one holds
            counts = list(map(len, column(self.split("train"), "windows")))
            most = max(sum(counts[i] for i in b) for b in self.train_sampler().epoch_batches(0))
            made = f"{sum(counts):,} windows, each text one example scored by the mean of its "
            made += "windows' logits"
            padding = f"batches of {self.hparams.batch_size} texts, up to {most:,} windows"
        else:
            made = f"{len(lengths):,} rows"
            padding = self.padding_note(self.train_sampler(), lengths)
        if self.windows:
            texts = len(self._prepare().splits["train"])
            cut = f"texts in windows overlapping by {self.hparams.stride} tokens; the {texts:,} "
            cut += f"training texts make {made}"
        summary = (
            f"{self.hparams.dataset}: {sizes} rows{self._pairs_note()}; {self.num_classes} "
            f"{'labels (multi-label)' if self.multi_label else 'classes'} "
            f"{self.label_names}; vocabulary {self.vocab_size:,} tokens; max_length "
            f"{self._max_length} ({cut}); {padding}."
        )
        logger.info(summary)
        return summary
