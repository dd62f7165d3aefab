"""`--data` mode: one bbc_news training epoch with dynamic padding vs padding to max_length."""

from __future__ import annotations

import argparse
from dataclasses import asdict

import torch.nn.functional as F

from benchmarks.models import PAD_ID, Batch, Shape, build_model
from benchmarks.report import log
from benchmarks.timing import adamw, make_step, timed


def repad(batch: Batch, length: int, pad_id: int) -> Batch:
    """The same batch right-padded to `length` (ids with `pad_id`, mask with False)."""
    extra = length - batch["input_ids"].shape[1]
    return {
        **batch,
        "input_ids": F.pad(batch["input_ids"], (0, extra), value=pad_id),
        "attention_mask": F.pad(batch["attention_mask"].bool(), (0, extra), value=False),
    }


def run_data(args: argparse.Namespace, device: str) -> dict:
    """One bbc_news training epoch: dynamic padding vs every batch padded to max_length.

    Written against `tscratch.data.TextClassificationData` (dicts of `input_ids`,
    `attention_mask`, `labels`; dynamic padding to a multiple of 8 with length bucketing).
    """
    from tscratch.data.classification import TextClassificationData  # lazily: an optional mode

    data = TextClassificationData(dataset="bbc_news", max_length=args.max_length,
                                  batch_size=args.batch_size or 32)  # fmt: skip
    data.prepare_data()
    data.setup("fit")
    batches = [{k: v.to(device) for k, v in b.items()} for b in data.train_dataloader()]
    max_length = getattr(data, "max_length", args.max_length)
    pad_id = getattr(data, "pad_id", PAD_ID)
    vocab = getattr(data, "vocab_size", None) or 1 + max(int(b["input_ids"].max()) for b in batches)
    classes = getattr(data, "num_classes", None) or 1 + max(int(b["labels"].max()) for b in batches)
    shape = Shape(vocab_size=vocab, d_model=128, num_heads=4, d_ff=512, num_layers=2,
                  num_classes=classes)  # fmt: skip
    results = {}
    for variant in ("dynamic", "max_length"):
        epoch = batches if variant == "dynamic" else [repad(b, max_length, pad_id) for b in batches]
        results[variant] = epoch_stats(epoch, shape, max_length, args.precisions[-1], device)
        log(f"{variant}: {results[variant]}")
    speedup = results["dynamic"]["real_tokens_per_s"] / results["max_length"]["real_tokens_per_s"]
    return {"shape": asdict(shape), "precision": args.precisions[-1], "variants": results,
            "real_tokens_per_s_dynamic_over_max_length": speedup}  # fmt: skip


def epoch_stats(
    batches: list[Batch], shape: Shape, max_len: int, precision: str, device: str
) -> dict[str, float]:
    """Train one epoch over `batches` (after one warm-up step); real tokens/s, padding share."""
    model = build_model("tscratch", shape, max_len, "train", device)
    optimizer = adamw(model)
    make_step(model, batches[0], "train", precision, optimizer)()  # warm-up, not timed
    seconds, real, padded = 0.0, 0, 0
    for batch in batches:
        seconds += timed(make_step(model, batch, "train", precision, optimizer), device)
        real += int(batch["attention_mask"].sum())
        padded += batch["input_ids"].numel()
    return {"seconds": seconds, "batches": len(batches), "real_tokens": real,
            "padded_tokens": padded, "padding_fraction": 1 - real / padded,
            "real_tokens_per_s": real / seconds,
            "padded_tokens_per_s": padded / seconds}  # fmt: skip
