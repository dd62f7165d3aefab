"""The text-classification data module's options checked before any data is read: each bad
value (or bad pair of values) refused in one line that names it and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tscratch.data.augment import check_augment
from tscratch.data.base import check_batching, check_data_args
from tscratch.data.encoding import MIN_PAIR_LENGTH
from tscratch.data.windows import check_long_text, check_pooled_batches
from tscratch.data.words import require_jieba
from tscratch.errors import UserError


def check_options(hp: Mapping[str, Any], vocab_size: int | str) -> None:
    """`UserError` for the first option of `TextClassificationData` (its saved hyperparameters
    ``hp``, and the target ``vocab_size`` they leave out) that no run can use."""
    auto = (("max_length", hp["max_length"]), ("vocab_size", vocab_size))
    check_data_args(
        hp["val_fraction"], hp["test_fraction"], vocab_size, hp["max_length"],
        hp["batch_size"], hp["tokenizer_model"], (*auto, ("segmenter", hp["segmenter"])),
    )  # fmt: skip
    for arg, least in (("eval_batch_size", 1), ("bucket_size", 1), ("num_workers", 0)):
        if hp[arg] is not None and hp[arg] < least:
            raise UserError(f"data.{arg} ({hp[arg]}) must be at least {least}")
    if hp["text_pair_column"] is not None and hp["max_length"] < MIN_PAIR_LENGTH:
        raise UserError(
            f"data.max_length ({hp['max_length']}) is too short for text pairs: [CLS] a [SEP] "
            f"b [SEP] needs at least {MIN_PAIR_LENGTH} tokens; raise it"
        )
    check_long_text(hp["long_text"], hp["stride"], hp["max_length"], hp["text_pair_column"])
    check_pooled_batches(hp["long_text"], hp["max_tokens"])
    require_jieba("segmenter", hp["segmenter"])  # before minutes of tokenizing
    check_batching(hp["pad_widths"], hp["max_tokens"], hp["max_length"])
    check_augment(hp["augment_copies"], hp["augment_mask"], hp["augment_swap"], hp["augment_ngram"])
