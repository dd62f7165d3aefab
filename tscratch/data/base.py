"""What both data modules share: the tokenizer they expose to the CLI, and how they batch.

`TextClassificationData` (tscratch fit) and `PretrainingTextData` (tscratch pretrain) differ in what
a row is and how it is collated; the tokenizer properties the CLI links into the model, the
length-bucketed resumable training loader, the longest-first evaluation loader and the batching
options they read (``batch_size``, ``bucket_size``, ``pad_widths``, ``max_tokens``: checked by
`check_batching`) are the same and live here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from tscratch.data.encoding import PAD_WIDTHS, PadWidths, pad_width, padding_fraction, widths_for
from tscratch.data.sampler import LengthBucketBatchSampler, ResumableDataLoader
from tscratch.errors import UserError

if TYPE_CHECKING:
    from datasets import Dataset


def check_batching(pad_widths: PadWidths, max_tokens: int | None, max_length: int) -> None:
    """Refuses, in one line, a ``pad_widths`` or ``max_tokens`` no batch can be made with.

    ``max_tokens`` must hold one row of ``max_length`` tokens as padded: below that, the longest
    rows would each be a batch of one, which no one asks for on purpose.
    """
    if pad_widths not in PAD_WIDTHS:
        names = " or ".join(map(repr, PAD_WIDTHS))
        raise UserError(f"data.pad_widths {pad_widths!r} must be {names}")
    if max_tokens is None:
        return
    widest = pad_width(max_length, widths_for(pad_widths, max_length))
    if max_tokens < widest:
        raise UserError(
            f"data.max_tokens ({max_tokens}) is less than one row of data.max_length "
            f"({max_length}, padded to {widest} tokens); raise it to at least {widest}, or leave "
            "it unset to batch by data.batch_size"
        )


def evaluated_rows(rows: int, batch_size: int, limit: int | float | None) -> int:
    """How many of ``rows`` a Trainer's ``limit_val_batches`` / ``limit_test_batches`` (an int:
    batches; a float: a share of them; None: all) lets an evaluation loop read, in batches of
    ``batch_size``: Lightning's own count (`_parse_num_batches`) of whole batches."""
    batches = math.ceil(rows / batch_size)
    if limit is None or (isinstance(limit, float) and limit >= 1.0):
        return rows
    taken = min(batches, limit) if isinstance(limit, int) else int(batches * limit)
    return min(rows, taken * batch_size)


class IndexedRows(torch.utils.data.Dataset):
    """The rows of a split, each with its row number under ``index``.

    Eval batches carry it so that a callback can show a row as the dataset wrote it
    (:meth:`TextClassificationData.text`) rather than as decoded token ids.
    """

    def __init__(self, rows: Dataset) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return {**self.rows[index], "index": index}

    def __getitems__(self, indices: list[int]) -> list[dict]:
        # DataLoader fetches a whole batch through this when it exists: one Arrow read per batch.
        rows = self.rows.__getitems__(indices)
        return [{**row, "index": i} for row, i in zip(rows, indices, strict=True)]


class TokenizedData(L.LightningDataModule):
    """A data module whose `_prepare()` returns an object with a `tokenizer` attribute, with a
    ``max_length`` and the batching options (see the module docstring) among its hparams.

    Reading any of these properties prepares the data and the tokenizer (the CLI reads them to
    size the model).
    """

    def _prepare(self) -> Any:
        raise NotImplementedError

    def prepare_data(self) -> None:
        """Reads the data and trains or loads the tokenizer (cached on disk)."""
        self._prepare()

    @property
    def tokenizer(self) -> Tokenizer:
        """The ``tokenizers.Tokenizer`` (trained on the training texts, or loaded)."""
        return self._prepare().tokenizer

    @property
    def vocab_size(self) -> int:
        """The tokenizer's actual vocabulary size (the ``vocab_size`` argument is only a target)."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def pad_id(self) -> int:
        """Id of ``[PAD]``."""
        return self.tokenizer.token_to_id("[PAD]")

    def tokenizer_json(self) -> str:
        """The tokenizer serialized as JSON (what a checkpoint stores; ``Tokenizer.from_str``)."""
        return self.tokenizer.to_str()

    @property
    def widths(self) -> tuple[int, ...]:
        """The widths batches are padded to (``pad_widths``, up to ``max_length``; see
        `widths_for`): () pads to the longest row rounded up to a multiple of 8."""
        return widths_for(self.hparams.pad_widths, self.max_length)

    def bucket_sampler(
        self, lengths: Sequence[int], num_replicas: int | None = None, rank: int | None = None
    ) -> LengthBucketBatchSampler:
        """Training batches of rows with these lengths (``batch_size`` rows, or ``max_tokens``
        padded tokens), sharded over the Trainer's processes when one is attached."""
        hp = self.hparams
        if num_replicas is None and self.trainer:
            num_replicas, rank = self.trainer.world_size, self.trainer.global_rank
        return LengthBucketBatchSampler(
            lengths,
            hp.batch_size,
            bucket_size=hp.bucket_size,
            seed=hp.seed,
            num_replicas=num_replicas,
            rank=rank,
            max_tokens=hp.max_tokens,
            widths=self.widths,
        )

    def padding_note(self, sampler: LengthBucketBatchSampler, lengths: Sequence[int]) -> str:
        """``padding X% of training tokens at batch size B`` (or ``at max_tokens N``): how much
        of epoch 0 of ``sampler`` is padding, for ``describe()``."""
        waste = padding_fraction(sampler.epoch_batches(0), lengths, self.widths)
        hp = self.hparams
        size = f"batch size {hp.batch_size}"
        if hp.max_tokens is not None:
            size = f"max_tokens {hp.max_tokens:,}"
        return f"padding {waste:.1%} of training tokens at {size}"

    def training_loader(
        self, dataset: Any, sampler: LengthBucketBatchSampler, collate_fn: Callable
    ) -> ResumableDataLoader:
        """Length-bucketed, epoch-seeded, resumable training batches."""
        hp = self.hparams
        return ResumableDataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate_fn,
            num_workers=hp.num_workers,
            pin_memory=torch.cuda.is_available(),  # faster, asynchronous host-to-GPU copies
            persistent_workers=hp.num_workers > 0,
            # Its own generator: iter() then leaves the global RNG (dropout) untouched.
            generator=torch.Generator().manual_seed(hp.seed),
        )

    def longest_first_loader(
        self,
        dataset: Any,
        lengths: Sequence[int],
        batch_size: int,
        collate_fn: Callable,
        first: int | None = None,
    ) -> DataLoader:
        """Evaluation batches, longest rows first: little padding, and an out-of-memory batch
        fails at once. The same batches on every call.

        With ``first``, the batches that hold the first ``first`` rows of the dataset (as it is
        stored) come before the rest, each part longest first: a run limited to the batches
        that hold them (`evaluated_rows`) evaluates the split's first rows, which its stored
        order makes a fair sample (`tscratch.data.sources.spread_order`), not its longest."""
        first = len(lengths) if first is None else min(first, len(lengths))
        parts = (range(first), range(first, len(lengths)))
        order = [i for part in parts for i in sorted(part, key=lambda i: -lengths[i])]
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=order,
            collate_fn=collate_fn,
            num_workers=self.hparams.num_workers,
            pin_memory=torch.cuda.is_available(),
            # Its own generator: a loader without one draws from the global RNG at iter().
            generator=torch.Generator().manual_seed(self.hparams.seed),
        )


def check_data_args(
    val_fraction: float,
    test_fraction: float,
    vocab_size: int,
    max_length: int,
    batch_size: int,
    tokenizer_model: str,
    auto: Iterable[tuple[str, object]] = (),
) -> None:
    """Refuses out-of-range arguments of a classification data module in one line each;
    ``auto``: (name, value) pairs where only `tscratch fit` may pass "auto"."""
    for arg, value in auto:
        if value == "auto":
            raise UserError(
                f"data.{arg} 'auto' is chosen from the data by tscratch fit; pass a number "
                "when building TextClassificationData yourself"
            )
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise UserError(
            f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must be in (0, 1) "
            "and sum to less than 1"
        )
    for arg, value in (
        ("vocab_size", vocab_size),
        ("max_length", max_length),
        ("batch_size", batch_size),
    ):
        if value < 2:
            raise UserError(f"{arg} ({value}) must be at least 2")
    if tokenizer_model not in ("wordpiece", "bpe"):
        raise UserError(f"tokenizer_model {tokenizer_model!r} must be 'wordpiece' or 'bpe'")
