"""Token ids for the model: cutting texts to `max_length` and padding them into batches.

Plain tokenizers + torch (no Lightning, no datasets), so an exported classifier can tokenize
without the training stack. Batches follow the Hugging Face layout: ``input_ids`` (B, T) and
``attention_mask`` (B, T) bool, True on real tokens; T is the longest row rounded up to a
multiple of 8, or to the next of a few fixed widths (`fixed_widths`: the data modules'
``pad_widths="fixed"``, so that a compiled model meets few shapes). Text pairs (`PairEncoder`)
add ``token_type_ids`` (B, T): 0 on ``[CLS] a [SEP]``, 1 on ``b [SEP]``, 0 on padding.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import torch
from tokenizers import Tokenizer

from tscratch.data.tokenizer import char_limit, words_for
from tscratch.errors import UserError

PAD_MULTIPLE = 8
PadWidths = Literal["multiple_of_8", "fixed"]
"""The data modules' ``pad_widths`` option: see `widths_for`."""
PAD_WIDTHS: tuple[str, ...] = get_args(PadWidths)
SMALLEST_FIXED_WIDTH = 16


def fixed_widths(max_length: int) -> tuple[int, ...]:
    """The few widths ``pad_widths="fixed"`` pads to: 16, 24, 32, 48, 64, 96, 128, 192, ...

    Powers of two and 1.5x powers of two (each step at most 1.5x, so padding stays under a third
    of a batch), up to ``max_length`` rounded up to a multiple of 8, which is always the last.
    """
    cap = -(-max_length // PAD_MULTIPLE) * PAD_MULTIPLE
    widths, power = [], SMALLEST_FIXED_WIDTH
    while power < cap:
        widths += [w for w in (power, power * 3 // 2) if w < cap]
        power *= 2
    return (*widths, cap)


def widths_for(pad_widths: PadWidths, max_length: int) -> tuple[int, ...]:
    """The widths batches of rows of at most ``max_length`` tokens are padded to: () for
    ``"multiple_of_8"`` (the longest row rounded up, as `pad_batch` does by default), else
    `fixed_widths`."""
    return () if pad_widths == "multiple_of_8" else fixed_widths(max_length)


def pad_width(longest: int, widths: Sequence[int] = ()) -> int:
    """The width of a batch whose longest row has ``longest`` tokens: the first of the ascending
    ``widths`` that holds it; without ``widths``, or beyond the last, ``longest`` rounded up to
    a multiple of 8."""
    at = bisect.bisect_left(widths, longest)
    if at < len(widths):
        return widths[at]
    return -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_id: int, widths: Sequence[int] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pads ``sequences`` to the width `pad_width` gives their longest (by default the
    longest rounded up to a multiple of 8).

    Returns:
        ``input_ids`` (B, T) long and ``attention_mask`` (B, T) bool, True on real tokens.
    """
    width = pad_width(max(len(s) for s in sequences), widths)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        input_ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    lengths = torch.as_tensor([len(s) for s in sequences])
    attention_mask = torch.arange(width) < lengths[:, None]  # (B, T)
    return input_ids, attention_mask


def pad_token_types(type_ids: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """Token types right-padded with 0 to ``width`` (the ``input_ids`` width): (B, T) long."""
    out = torch.zeros(len(type_ids), width, dtype=torch.long)
    for row, types in enumerate(type_ids):
        out[row, : len(types)] = torch.as_tensor(types, dtype=torch.long)
    return out


@dataclass(frozen=True)
class PadCollator:
    """Collates ``{"input_ids", "labels"}`` rows into a padded batch (see :func:`pad_batch`).

    Rows of text pairs also carry ``token_type_ids``: the batch then has ``token_type_ids``
    (B, T) long, padded with 0. Rows that carry an ``index`` (see :class:`IndexedRows`) give the
    batch an ``index`` (B,) long. A text read whole (``long_text`` "windows" in evaluation,
    "pooled" in training too) is a row of ``windows``: the batch holds one row of
    ``input_ids`` per window, (W, T), and ``window_owner`` (W,) long, the number in the batch
    of each window's text, whose ``labels`` (and ``index``) stay one per text
    (`tscratch.data.windows`). Rows of a distillation split (`tscratch.data.transfer`) give
    ``teacher_logits`` (B, C) float and ``real`` (B,) bool (False on augmented copies), and
    with ``teacher_features`` (the teacher's pooled vectors, one per row of the split) rows
    that carry a ``transfer_row`` give ``teacher_features`` (B, D) float.
    ``widths``: what T may be (`widths_for`); () pads to the longest row's multiple of 8.
    """

    pad_id: int
    widths: tuple[int, ...] = ()
    teacher_features: torch.Tensor | None = field(default=None, compare=False)

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        whole = "windows" in rows[0]  # texts read in windows: a row per window
        ids = [w for r in rows for w in r["windows"]] if whole else [r["input_ids"] for r in rows]
        input_ids, attention_mask = pad_batch(ids, self.pad_id, self.widths)
        labels = torch.as_tensor([r["labels"] for r in rows], dtype=torch.long)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        if whole:
            owner = [text for text, r in enumerate(rows) for _ in r["windows"]]
            batch["window_owner"] = torch.as_tensor(owner, dtype=torch.long)  # (W,)
        if "token_type_ids" in rows[0]:  # text pairs only
            types = [r["token_type_ids"] for r in rows]
            batch["token_type_ids"] = pad_token_types(types, input_ids.shape[1])
        if "index" in rows[0]:
            batch["index"] = torch.as_tensor([r["index"] for r in rows], dtype=torch.long)
        if "teacher_logits" in rows[0]:  # distillation (tscratch.data.transfer)
            logits = [r["teacher_logits"] for r in rows]
            batch["teacher_logits"] = torch.as_tensor(logits, dtype=torch.float32)  # (B, C)
            batch["real"] = torch.as_tensor([r["real"] for r in rows], dtype=torch.bool)
        if self.teacher_features is not None and "transfer_row" in rows[0]:
            index = torch.as_tensor([r["transfer_row"] for r in rows], dtype=torch.long)
            batch["teacher_features"] = self.teacher_features[index].float()  # (B, D)
        return batch


ENCODING = "keep-closing-special-v2"
"""Names how `encode_ids` cuts sequences; part of the tokenized-split cache key."""


def encode_ids(tokenizer: Tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of ``texts``, each cut to ``max_length``.

    The ``[CLS]`` in front is kept, and so is a special token that closes the sequence (a BERT
    tokenizer's ``[SEP]``): a cut sequence ends as the model saw sequences end in pretraining.
    """
    limit = char_limit(max_length)
    encodings = tokenizer.encode_batch(words_for(tokenizer, [t[:limit] for t in texts]))
    cut = []
    for encoding in encodings:
        ids = encoding.ids
        if len(ids) > max_length:
            closing = ids[-1] if encoding.special_tokens_mask[-1] else None
            ids = ids[:max_length]
            if closing is not None:
                ids[-1] = closing
        cut.append(ids)
    return cut


PAIR_ENCODING = "pair-cls-a-sep-b-sep-longest-first-v1"
"""Names how `PairEncoder` builds and cuts pairs; part of a paired split's cache key."""
MIN_PAIR_LENGTH = 5
"""The shortest ``max_length`` a pair fits in: ``[CLS] a [SEP] b [SEP]`` with a token of each."""


class PairEncoder:
    """Encodes text pairs as ``[CLS] a [SEP] b [SEP]``, cut longest-first to ``max_length``.

    The layout and the token types (0 on ``[CLS] a [SEP]``, 1 on ``b [SEP]``) come from the
    tokenizer's own pair template (`tokenizers`' ``TemplateProcessing``: tscratch's trained
    tokenizers and BERT's have it); the cut is the library's ``longest_first`` truncation: the
    longer of a and b loses a token at a time until the pair fits, so both ``[SEP]`` stay.
    Works on a copy of the tokenizer, which is left as it was.

    Args:
        tokenizer: a tokenizer whose pair template gives ``[CLS] [SEP] [SEP]`` with token types
            ``0 0 1`` for two empty texts.
        max_length: most tokens per pair, special tokens included (at least 5).

    Raises:
        UserError: ``max_length`` is too short, or the tokenizer builds pairs another way.
    """

    def __init__(self, tokenizer: Tokenizer, max_length: int) -> None:
        if max_length < MIN_PAIR_LENGTH:
            raise UserError(
                f"max_length ({max_length}) is too short for text pairs: [CLS] a [SEP] b [SEP] "
                f"needs at least {MIN_PAIR_LENGTH} tokens; raise max_length"
            )
        self.max_length = max_length
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length, strategy="longest_first")
        cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        probe = self.tokenizer.encode("", "")
        expected = ([cls_id, sep_id, sep_id], [0, 0, 1])
        if None in (cls_id, sep_id) or (probe.ids, probe.type_ids) != expected:
            shown = " ".join(probe.tokens) or "nothing"
            raise UserError(
                f"this tokenizer does not build text pairs as [CLS] a [SEP] b [SEP] (two empty "
                f"texts give: {shown}); use a tokenizer trained by tscratch or a BERT tokenizer"
            )

    def __call__(
        self, texts: Sequence[str], pairs: Sequence[str]
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Token ids and token types of each pair (``texts[i]``, ``pairs[i]``)."""
        if len(texts) != len(pairs):
            raise UserError(
                f"{len(texts)} texts but {len(pairs)} text pairs; give one pair per text"
            )
        limit = char_limit(self.max_length)
        firsts = words_for(self.tokenizer, [a[:limit] for a in texts])
        seconds = words_for(self.tokenizer, [b[:limit] for b in pairs])
        batch = list(zip(firsts, seconds, strict=True))
        encodings = self.tokenizer.encode_batch(batch)
        return [e.ids for e in encodings], [e.type_ids for e in encodings]


def encode_texts(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    max_length: int,
    pad_id: int,
    pairs: Sequence[str] | None = None,
) -> dict[str, torch.Tensor]:
    """Encodes raw ``texts`` for prediction: ``input_ids`` (B, T), ``attention_mask`` (B, T).

    With ``pairs`` (one per text), rows are ``[CLS] text [SEP] pair [SEP]`` (see
    `PairEncoder`) and the batch also holds ``token_type_ids`` (B, T).
    """
    if not texts:
        raise ValueError("encode_texts needs at least one text")
    if pairs is None:
        input_ids, attention_mask = pad_batch(encode_ids(tokenizer, texts, max_length), pad_id)
        return {"input_ids": input_ids, "attention_mask": attention_mask}
    ids, types = PairEncoder(tokenizer, max_length)(texts, pairs)
    input_ids, attention_mask = pad_batch(ids, pad_id)
    token_type_ids = pad_token_types(types, input_ids.shape[1])
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
    }


def padding_fraction(
    batches: Sequence[Sequence[int]], lengths: Sequence[int], widths: Sequence[int] = ()
) -> float:
    """Share of padded positions when ``batches`` of rows with ``lengths`` go through collate
    (padded to ``widths``, see `pad_width`)."""
    real = padded = 0
    for batch in batches:
        padded += len(batch) * pad_width(max(lengths[i] for i in batch), widths)
        real += sum(lengths[i] for i in batch)
    return 1 - real / padded
