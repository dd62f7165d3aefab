"""Tests for tscratch.data.sampler: epoch-seeded bucketing, sharding and mid-epoch resume."""

from __future__ import annotations

import itertools
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import Dataset

from tscratch.data.sampler import LengthBucketBatchSampler, ResumableDataLoader

LENGTHS = [(i * 37) % 101 + 1 for i in range(1000)]


class Rows(Dataset):
    """Row ``i`` is ``{"index": i}``; batches collate to the list of their indices."""

    def __len__(self) -> int:
        return len(LENGTHS)

    def __getitem__(self, i: int) -> int:
        return i


def make_loader(epoch: int = 0, num_workers: int = 0) -> ResumableDataLoader:
    sampler = LengthBucketBatchSampler(LENGTHS, batch_size=16, bucket_size=4, seed=7)
    sampler.set_epoch(epoch)
    return ResumableDataLoader(
        Rows(), batch_sampler=sampler, collate_fn=list, num_workers=num_workers
    )


def test_every_index_once_and_batches_bounded() -> None:
    sampler = LengthBucketBatchSampler(LENGTHS, batch_size=16, bucket_size=4, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 63  # ceil(1000 / 16)
    assert sorted(itertools.chain(*batches)) == list(range(1000))
    assert all(15 <= len(b) <= 16 for b in batches)


def test_epoch_seeds_order_not_global_rng() -> None:
    sampler = LengthBucketBatchSampler(LENGTHS, batch_size=16, seed=0)
    torch.manual_seed(1)
    first = list(sampler)
    torch.manual_seed(2)
    assert list(sampler) == first
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_bucketing_cuts_padding() -> None:
    def waste(batches: list[list[int]]) -> float:
        padded = sum(len(b) * max(LENGTHS[i] for i in b) for b in batches)
        return 1 - sum(LENGTHS) / padded

    random_order = LengthBucketBatchSampler(LENGTHS, batch_size=16, bucket_size=1, seed=0)
    bucketed = LengthBucketBatchSampler(LENGTHS, batch_size=16, bucket_size=16, seed=0)
    assert waste(list(bucketed)) < 0.1 < 0.3 < waste(list(random_order))


@pytest.mark.parametrize("consumed", [0, 1, 30, 62, 63])
def test_mid_epoch_resume_reproduces_epoch(consumed: int) -> None:
    uninterrupted = list(make_loader(epoch=3))
    loader = make_loader(epoch=3)
    head = list(itertools.islice(loader, consumed))
    state = loader.state_dict()
    assert state == {"epoch": 3, "batches_consumed": consumed}

    resumed = make_loader()  # a fresh process: the sampler starts at epoch 0
    resumed.load_state_dict(state)
    resumed.batch_sampler.set_epoch(3)  # Lightning calls set_epoch after load_state_dict
    assert head + list(resumed) == uninterrupted
    assert resumed.state_dict() == {"epoch": 3, "batches_consumed": 63}
    resumed.batch_sampler.set_epoch(4)  # the skip applied to epoch 3 only
    assert list(resumed) == list(make_loader(epoch=4))


def test_state_at_epoch_end_moves_on_to_next_epoch() -> None:
    loader = make_loader(epoch=2)
    list(loader)
    resumed = make_loader()
    resumed.load_state_dict(loader.state_dict())
    resumed.batch_sampler.set_epoch(3)
    assert resumed.state_dict() == {"epoch": 3, "batches_consumed": 0}
    assert list(resumed) == list(make_loader(epoch=3))


def test_resume_counts_batches_not_worker_prefetch() -> None:
    sampler = LengthBucketBatchSampler(LENGTHS, batch_size=16, bucket_size=4, seed=7)
    loader = ResumableDataLoader(Rows(), batch_sampler=sampler, collate_fn=list, num_workers=1)
    head = list(itertools.islice(iter(loader), 5))
    assert loader.state_dict() == {"epoch": 0, "batches_consumed": 5}
    resumed = make_loader()
    resumed.load_state_dict(loader.state_dict())
    assert head + list(resumed) == list(make_loader())


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ddp_shards_are_disjoint_complete_and_equal(world: int) -> None:
    shards = [
        list(
            LengthBucketBatchSampler(LENGTHS, 16, bucket_size=4, seed=5, num_replicas=world, rank=r)
        )
        for r in range(world)
    ]
    assert len({len(s) for s in shards}) == 1
    rows = [i for shard in shards for batch in shard for i in batch]
    assert sorted(rows) == list(range(1000))


def test_too_few_rows_for_ranks() -> None:
    with pytest.raises(ValueError, match=r"3 rows cannot fill 4 batches across 4 processes"):
        LengthBucketBatchSampler([1, 2, 3], batch_size=2, num_replicas=4, rank=0)
    with pytest.raises(ValueError, match=r"rank \(2\) must be in \[0, num_replicas=2\)"):
        LengthBucketBatchSampler([1, 2, 3], batch_size=2, num_replicas=2, rank=2)


class Recorder(L.LightningModule):
    """Records the rows of every training batch; one weight so the optimizer has work."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[int]] = []

    def training_step(self, batch: list[int], batch_idx: int) -> torch.Tensor:
        self.seen.append(list(batch))
        return self.weight.sum() * 0 + self.weight.square().sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(root: Path, ckpt_path: str | None = None, num_workers: int = 0) -> list[list[int]]:
    """Trains 2 epochs (126 steps), checkpointing every 3 steps; returns the batches seen."""
    model = Recorder()
    every_30 = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=root, filename="{step}", every_n_train_steps=3, save_top_k=-1
    )
    trainer = L.Trainer(
        max_epochs=2,
        callbacks=[every_30],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    trainer.fit(model, train_dataloaders=make_loader(num_workers=num_workers), ckpt_path=ckpt_path)
    return model.seen


@pytest.mark.filterwarnings("ignore:The dirpath has changed")
@pytest.mark.parametrize("num_workers", [0, 1])
def test_lightning_resume_replays_exactly(tmp_path: Path, num_workers: int) -> None:
    full = fit(tmp_path / "full")
    assert len(full) == 126  # 2 epochs of 63 batches
    # Mid-epoch 0, end of epoch 0 (the last batch), mid-epoch 1.
    for step in (30, 63, 90):
        checkpoint = str(tmp_path / "full" / f"step={step}.ckpt")
        tail = fit(tmp_path / f"resumed{step}", checkpoint, num_workers=num_workers)
        assert tail == full[step:], step
