"""Length-bucketed, epoch-seeded, shardable batch sampler and a DataLoader that resumes mid-epoch.

Batches of similar lengths waste little padding; shuffling within windows of ``bucket_size``
batches keeps them random enough. Batches hold ``batch_size`` rows, or as many rows as fit in
``max_tokens`` padded tokens (large batches by tokens, for GPUs; fairseq's ``--max-tokens``). The
order depends only on ``seed + epoch`` (never on the global RNG), and the loader records how many
batches it has handed out, so a run restored from a mid-epoch checkpoint sees exactly the batches
an uninterrupted run would have seen.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from tscratch.data.encoding import pad_width


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

    With ``max_tokens``, a batch of ``r`` rows whose longest pads to width ``w`` (`pad_width` over
    ``widths``, as the collate pads it) has ``r * w <= max_tokens``; a row wider than that is a
    batch alone. Each epoch then shuffles all indices, sorts them by padded width as a whole
    (stable: rows of one width stay shuffled), cuts them into batches of the sizes `token_budget`
    gives and shuffles the batch order. The widths in sorted order do not change with the epoch,
    so neither do the sizes nor the number of batches (Lightning reads it once per run);
    ``batch_size`` and ``bucket_size`` do not apply. The largest batches are halved until the
    number is a multiple of ``num_replicas``.

    Args:
        lengths: Token count of every row of the dataset.
        batch_size: Largest number of rows in a batch.
        bucket_size: Batches per length-sorting window; 1 sorts within a batch only (most
            random), larger values waste less padding.
        seed: Base seed; epoch ``e`` uses ``seed + e``.
        num_replicas: Number of data-parallel processes (default: the torch.distributed world).
        rank: This process's rank (default: the torch.distributed rank).
        max_tokens: Most padded tokens per batch (rows x padded width), instead of
            ``batch_size`` rows; None: ``batch_size`` rows.
        widths: The ascending widths the collate pads to (`widths_for`); () is the longest row
            rounded up to a multiple of 8. Only ``max_tokens`` reads it.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        bucket_size: int = 100,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        *,
        max_tokens: int | None = None,
        widths: Sequence[int] = (),
    ) -> None:
        world, this_rank = _world()
        self.num_replicas = world if num_replicas is None else num_replicas
        self.rank = this_rank if rank is None else rank
        if batch_size < 1 or bucket_size < 1:
            raise ValueError(
                f"batch_size ({batch_size}) and bucket_size ({bucket_size}) must be >= 1"
            )
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens ({max_tokens}) must be >= 1")
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank ({self.rank}) must be in [0, num_replicas={self.num_replicas})")
        self.lengths = torch.as_tensor(lengths, dtype=torch.long)
        self.batch_size, self.bucket_size, self.seed = batch_size, bucket_size, seed
        self.max_tokens = max_tokens
        if max_tokens is None:
            batches = math.ceil(len(self.lengths) / batch_size)
        else:
            self.padded = padded_widths(self.lengths, widths)  # (N,)
            budget = token_budget(*torch.unique(self.padded, return_counts=True), max_tokens)
            batches = len(budget)
        self.num_batches = math.ceil(batches / self.num_replicas) * self.num_replicas
        if len(self.lengths) < self.num_batches:
            raise ValueError(
                f"{len(self.lengths)} rows cannot fill {self.num_batches} batches across "
                f"{self.num_replicas} processes; use fewer processes or more data"
            )
        self.sizes = None if max_tokens is None else halved_to(budget, self.num_batches)
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
        if self.sizes is None:
            window = self.bucket_size * self.batch_size
            pieces = []
            for k, chunk in enumerate(order.split(window)):
                ranked = torch.sort(self.lengths[chunk], stable=True, descending=k % 2 == 1)
                pieces.append(chunk[ranked.indices])
            flat = torch.cat(pieces).tolist()
            size, extra = divmod(len(flat), self.num_batches)
            sizes = [size + (i < extra) for i in range(self.num_batches)]
        else:  # by tokens: the whole epoch sorted by padded width, ties in shuffled order
            flat = order[torch.sort(self.padded[order], stable=True).indices].tolist()
            sizes = self.sizes
        ends = itertools.accumulate(sizes)
        batches = [flat[a:b] for a, b in itertools.pairwise([0, *ends])]
        return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]

    def __iter__(self) -> Iterator[list[int]]:
        start, self.start = self.start, 0
        yield from self.epoch_batches(self.epoch)[self.rank :: self.num_replicas][start:]

    def __len__(self) -> int:
        return self.num_batches // self.num_replicas


def padded_widths(lengths: torch.Tensor, widths: Sequence[int] = ()) -> torch.Tensor:
    """(N,) long: the width `pad_width` pads a row of each of ``lengths`` (N,) to."""
    longest = int(lengths.max()) if len(lengths) else 0
    table = torch.as_tensor([pad_width(n, widths) for n in range(longest + 1)], dtype=torch.long)
    return table[lengths]


def token_budget(widths: torch.Tensor, counts: torch.Tensor, max_tokens: int) -> list[int]:
    """Rows per batch when rows sorted by padded width are cut greedily into batches of at most
    ``max_tokens`` padded tokens (a row wider than that alone); ``counts[i]`` rows have width
    ``widths[i]``, widths ascending (as `torch.unique` gives them)."""
    sizes, rows = [], 0  # rows: in the open batch, all no wider than the current width
    for width, left in zip(widths.tolist(), counts.tolist(), strict=True):
        fit = max(1, max_tokens // max(1, width))  # rows of a batch this wide (an empty row: 1)
        while left:
            if rows >= fit:
                sizes.append(rows)
                rows = 0
            take = min(left, fit - rows)
            rows, left = rows + take, left - take
    return [*sizes, rows] if rows else sizes


def halved_to(sizes: list[int], count: int) -> list[int]:
    """``sizes`` with its largest batch halved, in place, until there are ``count`` batches
    (halves of a batch within the budget are within it too); needs ``count <= sum(sizes)``."""
    sizes = list(sizes)
    while len(sizes) < count:
        at = max(range(len(sizes)), key=sizes.__getitem__)
        sizes[at : at + 1] = [sizes[at] - sizes[at] // 2, sizes[at] // 2]
    return sizes


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
