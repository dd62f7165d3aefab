"""The hypotheses beam search keeps: N per source, as batched tensors, so each step's bookkeeping
(pick parents, extend by a token, pad, keep the K best) is a few gathers, not a loop over
sources. Used by `tscratch.seq2seq.generate.beam_search`."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor


class Hypotheses(NamedTuple):
    """N hypotheses per source: tokens and log-probs (B, N, t), scores and lengths (B, N)."""

    tokens: Tensor
    logprobs: Tensor
    scores: Tensor
    lengths: Tensor

    @classmethod
    def start(cls, B: int, K: int, device: torch.device) -> Hypotheses:
        """K empty hypotheses; all but one score -inf, so the first step expands only one."""
        scores = torch.full((B, K), -torch.inf, device=device)
        scores[:, 0] = 0.0
        empty = torch.zeros(B, K, 0, device=device)
        lengths = torch.zeros(B, K, dtype=torch.long, device=device)
        return cls(empty.long(), empty, scores, lengths)

    @classmethod
    def empty(cls, B: int, K: int, L: int, pad_id: int, device: torch.device) -> Hypotheses:
        """K finished slots of L tokens scoring -inf."""
        tokens = torch.full((B, K, L), pad_id, dtype=torch.long, device=device)
        scores = torch.full((B, K), -torch.inf, device=device)
        lengths = torch.zeros(B, K, dtype=torch.long, device=device)
        return cls(tokens, torch.zeros(B, K, L, device=device), scores, lengths)

    def take(self, index: Tensor) -> Hypotheses:
        """Hypotheses `index` (B, N') of each source."""
        rows = index[..., None].expand(-1, -1, self.tokens.shape[-1])
        return Hypotheses(
            self.tokens.gather(1, rows),
            self.logprobs.gather(1, rows),
            self.scores.gather(1, index),
            self.lengths.gather(1, index),
        )

    def extend(self, beam: Tensor, token: Tensor, logprob: Tensor, sums: Tensor) -> Hypotheses:
        """Hypotheses `beam` (B, N') each followed by `token` of `logprob`, scoring `sums`."""
        parents = self.take(beam)
        return Hypotheses(
            torch.cat([parents.tokens, token[..., None]], dim=-1),
            torch.cat([parents.logprobs, logprob[..., None]], dim=-1),
            sums,
            parents.lengths + 1,
        )

    def with_scores(self, scores: Tensor) -> Hypotheses:
        return self._replace(scores=scores)

    def padded(self, L: int, pad_id: int) -> Hypotheses:
        """Tokens padded with `pad_id` (log-probabilities with 0) to length L."""
        extra = (0, L - self.tokens.shape[-1])
        return self._replace(
            tokens=F.pad(self.tokens, extra, value=pad_id), logprobs=F.pad(self.logprobs, extra)
        )

    def merged(self, other: Hypotheses, K: int) -> Hypotheses:
        """The K best of both sets (same length L), best first."""
        pool = Hypotheses(*(torch.cat(pair, dim=1) for pair in zip(self, other, strict=True)))
        return pool.take(pool.scores.topk(K, dim=1).indices)
