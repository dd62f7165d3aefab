"""What both data modules share: the tokenizer they expose to the CLI, and how they batch.

`TextClassificationData` (tscratch fit) and `PretrainingTextData` (tscratch pretrain) differ in what
a row is and how it is collated; the tokenizer properties the CLI links into the model, the
length-bucketed resumable training loader and the longest-first evaluation loader are the same and
live here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from tscratch.data.sampler import LengthBucketBatchSampler, ResumableDataLoader


class TokenizedData(L.LightningDataModule):
    """A data module whose `_prepare()` returns an object with a `tokenizer` attribute.

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

    def bucket_sampler(self, lengths: Sequence[int]) -> LengthBucketBatchSampler:
        """Training batches of rows with these lengths, sharded over the Trainer's processes
        when one is attached."""
        hp = self.hparams
        world = (
            (self.trainer.world_size, self.trainer.global_rank) if self.trainer else (None, None)
        )
        return LengthBucketBatchSampler(
            lengths,
            hp.batch_size,
            bucket_size=hp.bucket_size,
            seed=hp.seed,
            num_replicas=world[0],
            rank=world[1],
        )

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
        self, dataset: Any, lengths: Sequence[int], batch_size: int, collate_fn: Callable
    ) -> DataLoader:
        """Evaluation batches, longest rows first: little padding, and an out-of-memory batch
        fails at once. The same batches on every call."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
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
