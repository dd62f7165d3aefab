"""Masked-language-model corruption (Devlin et al. 2019) and the collate that applies it.

Of the real, non-special tokens of a batch, each is selected with probability `mlm_probability`
(15%); of the selected, 80% become [MASK], 10% a random non-special token and 10% stay as they
were. Labels hold the original id at selected positions and -100 (ignored by the loss)
everywhere else. Special tokens ([PAD], [UNK], [CLS], [SEP], [MASK]) and padding are never
selected, and never drawn as random replacements. A row with real tokens but no draw gets one
selected at random, so no row and no batch is without a target (this raises the rate a little on
very short texts).

Whole-word masking (Cui et al. 2019) selects words instead of tokens: a word is a token plus the
`##` continuation pieces that follow it; each CJK character is its own word (the tokenizer splits
them, and a `##`-prefixed CJK character is still treated as a word). Each word is selected with
probability `mlm_probability`, so the expected share of selected tokens is unchanged. Chinese
words of several characters need a segmenter: rows may carry their own `word_starts` (True where
a token begins a word, `tscratch.data.words`), which then join several characters into one
word; a `##` piece continues its word either way.

Randomness comes from the `torch.Generator` passed in, or else from torch's global RNG, which
the training module saves in its checkpoints and restores on resume (exact with the default
`num_workers=0`, where collation runs in the main process in training order).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer
from torch import Tensor

from tscratch.data.encoding import pad_batch
from tscratch.errors import UserError

MASK_TOKEN = "[MASK]"
IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index


def is_cjk_char(text: str) -> bool:
    """One CJK ideograph (the ranges BERT's tokenizer splits into single-character words)."""
    if len(text) != 1:
        return False
    cp = ord(text)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    ) and unicodedata.category(text) == "Lo"


class TokenMasker:
    """Selects and corrupts tokens of padded batches for masked-LM training.

    Args:
        vocab: token -> id, the whole vocabulary (`Tokenizer.get_vocab(with_added_tokens=True)`).
        special_ids: ids never selected nor used as random replacements; must hold [MASK]'s.
        mask_id: id of [MASK].
        mlm_probability: chance of each token (or word) being selected.
        whole_word: select whole words (`##` pieces with their head; CJK characters alone).
        mask_fraction: share of selected tokens replaced by [MASK].
        random_fraction: share of selected tokens replaced by a random token; the rest are kept.
    """

    def __init__(
        self,
        vocab: Mapping[str, int],
        special_ids: set[int],
        mask_id: int,
        mlm_probability: float = 0.15,
        whole_word: bool = False,
        mask_fraction: float = 0.8,
        random_fraction: float = 0.1,
    ) -> None:
        if not 0.0 < mlm_probability < 1.0:
            raise UserError(f"mlm_probability ({mlm_probability}) must be in (0, 1)")
        if mask_fraction < 0 or random_fraction < 0 or mask_fraction + random_fraction > 1:
            raise UserError(
                f"mask_fraction ({mask_fraction}) and random_fraction ({random_fraction}) must "
                "be >= 0 and sum to at most 1"
            )
        size = max(vocab.values()) + 1
        self.is_special = torch.zeros(size, dtype=torch.bool)
        self.is_special[sorted(special_ids | {mask_id})] = True
        self.is_continuation = torch.zeros(size, dtype=torch.bool)
        for token, index in vocab.items():
            piece = token.removeprefix("##")
            continuation = token.startswith("##") and bool(piece) and not is_cjk_char(piece)
            self.is_continuation[index] = continuation
        self.replacements = (~self.is_special).nonzero().squeeze(1)  # (R,) ids a token may become
        self.mask_id = mask_id
        self.mlm_probability, self.whole_word = mlm_probability, whole_word
        self.mask_fraction, self.random_fraction = mask_fraction, random_fraction

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer, **options) -> TokenMasker:
        """A masker for `tokenizer`: its special tokens are the never-masked ones."""
        mask_id = tokenizer.token_to_id(MASK_TOKEN)
        if mask_id is None:
            raise UserError(
                f"the tokenizer has no {MASK_TOKEN} token; masked-LM pretraining needs one (drop "
                "--data.tokenizer to train a tokenizer that has it)"
            )
        added = tokenizer.get_added_tokens_decoder()
        special = {index for index, token in added.items() if token.special}
        return cls(tokenizer.get_vocab(with_added_tokens=True), special, mask_id, **options)

    def __call__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        generator: torch.Generator | None = None,
        word_starts: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Corrupt a padded batch.

        Args:
            input_ids: (B, T) long token ids.
            attention_mask: (B, T) True/1 = real token.
            generator: source of randomness; None draws from torch's global RNG.
            word_starts: (B, T) bool, True where a token begins a word (whole-word masking only;
                None: words are a token and its `##` pieces).

        Returns:
            The corrupted `input_ids` (B, T) and `labels` (B, T): the original id where a token
            was selected, -100 elsewhere.
        """
        selected = self.select(input_ids, attention_mask, generator, word_starts)
        shape = input_ids.shape
        action = torch.rand(shape, generator=generator)
        pick = torch.randint(len(self.replacements), shape, generator=generator)
        to_mask = selected & (action < self.mask_fraction)
        to_random = selected & ~to_mask & (action < self.mask_fraction + self.random_fraction)
        corrupted = torch.where(to_mask, self.mask_id, input_ids)
        corrupted = torch.where(to_random, self.replacements[pick], corrupted)
        labels = torch.where(selected, input_ids, IGNORE_INDEX)
        return corrupted, labels

    def select(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        generator: torch.Generator | None = None,
        word_starts: Tensor | None = None,
    ) -> Tensor:
        """(B, T) bool: the positions to predict (see the module doc and `__call__`)."""
        candidate = attention_mask.bool() & ~self.is_special[input_ids]  # (B, T)
        starts = candidate
        if word_starts is not None and not self.whole_word:
            raise UserError("word_starts are for whole-word masking: set whole_word_masking")
        if self.whole_word:
            # A word starts at a candidate that is no continuation piece, or that follows a
            # non-candidate (a piece cut from its head by truncation still forms a word).
            after_gap = torch.ones_like(candidate)
            after_gap[:, 1:] = ~candidate[:, :-1]
            head = ~self.is_continuation[input_ids]
            if word_starts is not None:  # a segmenter's words; a ## piece still continues one
                head = head & word_starts.bool()
            starts = candidate & (head | after_gap)
        chosen = starts & (torch.rand(input_ids.shape, generator=generator) < self.mlm_probability)
        # Rows left without a target get one start at random (a draw made for every row, so the
        # number of draws never depends on the outcome).
        scores = torch.rand(input_ids.shape, generator=generator).masked_fill(~starts, -1.0)
        empty = ~chosen.any(dim=1) & starts.any(dim=1)  # (B,)
        fallback = torch.zeros_like(chosen).scatter_(1, scores.argmax(dim=1, keepdim=True), True)
        chosen = chosen | (fallback & empty[:, None])
        if not self.whole_word or not starts.any():
            return chosen
        flat_starts = starts.flatten()
        word = flat_starts.cumsum(0) - 1  # each position's word: the latest start at or before it
        word_chosen = chosen.flatten()[flat_starts]  # (W,)
        return candidate & word_chosen[word.clamp(min=0)].view_as(candidate)


@dataclass(frozen=True)
class MaskedLMCollator:
    """Pads `{"input_ids"}` rows (see `pad_batch`) and masks them with `masker`.

    Batches hold `input_ids` (B, T) (corrupted), `attention_mask` (B, T) bool and `labels`
    (B, T) long (-100 except at selected positions); rows carrying an `index` give the batch an
    `index` (B,) long too. Rows carrying `word_starts` (one bool per token) pass them to the
    masker, padded with False.

    Args:
        pad_id: id of [PAD].
        masker: the corruption.
        seed: None draws from the global RNG (training); an int makes each batch's masks a fixed
            function of the seed and its rows' `index`, the same on every epoch (evaluation).
        widths: what T may be (`widths_for`); () pads to the longest row's multiple of 8.
    """

    pad_id: int
    masker: TokenMasker
    seed: int | None = None
    widths: tuple[int, ...] = ()

    def __call__(self, rows: list[dict]) -> dict[str, Tensor]:
        ids = [r["input_ids"] for r in rows]
        input_ids, attention_mask = pad_batch(ids, self.pad_id, self.widths)
        generator = None
        if self.seed is not None:
            # hash() of ints is not salted per process: the same key in workers and reruns.
            key = hash((self.seed, *(int(r["index"]) for r in rows))) & (2**63 - 1)
            generator = torch.Generator().manual_seed(key)
        word_starts = None
        if "word_starts" in rows[0]:
            flags = [[int(flag) for flag in r["word_starts"]] for r in rows]
            word_starts = pad_batch(flags, 0, self.widths)[0].bool()
        corrupted, labels = self.masker(input_ids, attention_mask, generator, word_starts)
        batch = {"input_ids": corrupted, "attention_mask": attention_mask, "labels": labels}
        if "index" in rows[0]:
            batch["index"] = torch.as_tensor([r["index"] for r in rows], dtype=torch.long)
        return batch
