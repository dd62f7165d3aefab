"""Length-bucketed, epoch-seeded, shardable batch sampler and a DataLoader that resumes mid-epoch.

Batches of similar lengths waste little padding; shuffling within windows of ``bucket_size``
batches keeps them random enough. The order depends only on ``seed + epoch`` (never on the
global RNG), and the loader records how many batches it has handed out, so a run restored from a
mid-epoch checkpoint sees exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler


def _world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


class LengthBucketBatchSampler(Sampler[list[int]]):
    """Yields index batches of similar lengths in an order fixed by ``seed + epoch``.

    Each epoch: shuffle all indices, cut them into windows of ``bucket_size * batch_size``,
    sort each window by length (alternately ascending and descending, so batches that straddle
    two windows still hold similar lengths), cut the result into ``num_batches`` nearly equal
    contiguous batches and shuffle the batch order. Rank ``r`` of ``num_replicas`` takes batches
    ``r, r + num_replicas, ...``; ``num_batches`` is a multiple of ``num_replicas``, so the shards
    are disjoint, complete and equally long (batches shrink slightly rather than repeat rows).

    Args:
        lengths: Token count of every row of the dataset.
        batch_size: Largest number of rows in a batch.
        bucket_size: Batches per length-sorting window; 1 sorts within a batch only (most
            random), larger values waste less padding.
        seed: Base seed; epoch ``e`` uses ``seed + e``.
        num_replicas: Number of data-parallel processes (default: the torch.distributed world).
        rank: This process's rank (default: the torch.distributed rank).
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        bucket_size: int = 100,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        world, this_rank = _world()
        self.num_replicas = world if num_replicas is None else num_replicas
        self.rank = this_rank if rank is None else rank
        if batch_size < 1 or bucket_size < 1:
            raise ValueError(
                f"batch_size ({batch_size}) and bucket_size ({bucket_size}) must be >= 1"
            )
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank ({self.rank}) must be in [0, num_replicas={self.num_replicas})")
        self.lengths = torch.as_tensor(lengths, dtype=torch.long)
        self.batch_size, self.bucket_size, self.seed = batch_size, bucket_size, seed
        per_rank = math.ceil(math.ceil(len(self.lengths) / batch_size) / self.num_replicas)
        self.num_batches = per_rank * self.num_replicas
        if len(self.lengths) < self.num_batches:
            raise ValueError(
                f"{len(self.lengths)} rows cannot fill {self.num_batches} batches across "
                f"{self.num_replicas} processes; use fewer processes or more data"
            )
        self.epoch = 0
        self.start = 0  # batches of this epoch to skip, set when resuming mid-epoch

    @property
    def sampler(self) -> LengthBucketBatchSampler:
        """Itself: Lightning calls ``set_epoch`` on ``loader.batch_sampler.sampler``."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose order to yield; a pending resume survives only the same epoch."""
        if epoch != self.epoch:
            self.start = 0
        self.epoch = epoch

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """All ranks' batches of ``epoch``, in order, before sharding."""
        generator = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(len(self.lengths), generator=generator)
        window = self.bucket_size * self.batch_size
        pieces = []
        for k, chunk in enumerate(order.split(window)):
            ranked = torch.sort(self.lengths[chunk], stable=True, descending=k % 2 == 1).indices
            pieces.append(chunk[ranked])
        flat = torch.cat(pieces).tolist()
        size, extra = divmod(len(flat), self.num_batches)
        ends = itertools.accumulate(size + (i < extra) for i in range(self.num_batches))
        batches = [flat[a:b] for a, b in itertools.pairwise([0, *ends])]
        return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]

    def __iter__(self) -> Iterator[list[int]]:
        start, self.start = self.start, 0
        yield from self.epoch_batches(self.epoch)[self.rank :: self.num_replicas][start:]

    def __len__(self) -> int:
        return self.num_batches // self.num_replicas


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` over a :class:`LengthBucketBatchSampler` with a mid-epoch position.

    ``state_dict()`` holds the epoch and the number of batches this loader has yielded in it,
    counted in the main process (worker prefetching does not count). Lightning saves it in
    checkpoints; on a mid-epoch restart ``load_state_dict()`` must run before iterating (the
    LightningModule does it at train start, since Lightning's own call comes too late when
    ``configure_optimizers`` has already built the loader); the next epoch iterated then skips
    the consumed batches without loading them. Lightning fetches
    batches of a sized loader one at a time (no look-ahead), so the count equals the number of
    batches trained on when a checkpoint is written at the end of a training step.

    The sampler's epoch is read at the first ``next()``, not at ``iter()``, because Lightning
    creates the iterator before calling ``set_epoch`` when it resumes.
    """

    def __init__(
        self, dataset: Any, batch_sampler: LengthBucketBatchSampler, **kwargs: Any
    ) -> None:
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        self._counted_epoch = -1
        self._yielded = 0

    def __iter__(self) -> Iterator[Any]:
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        sampler: LengthBucketBatchSampler = self.batch_sampler
        self._counted_epoch, self._yielded = sampler.epoch, sampler.start
        for batch in super().__iter__():
            self._yielded += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """The epoch and the number of its batches already yielded."""
        sampler: LengthBucketBatchSampler = self.batch_sampler
        if sampler.epoch != self._counted_epoch:  # a new epoch that has not started yet
            return {"epoch": sampler.epoch, "batches_consumed": sampler.start}
        return {"epoch": self._counted_epoch, "batches_consumed": self._yielded}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Makes the next iteration continue ``state_dict``'s epoch after its consumed batches."""
        sampler: LengthBucketBatchSampler = self.batch_sampler
        sampler.epoch = int(state_dict["epoch"])
        sampler.start = int(state_dict["batches_consumed"])
