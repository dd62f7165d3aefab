"""Greedy and beam search for `TransformerSeq2Seq`, with or without the key/value cache.

Every hypothesis starts from `bos_id` and ends with `eos_id` or after `max_new_tokens`; what
follows the end is `pad_id`. With `use_cache` each step runs the decoder on the newest token
only, against the cache of the earlier ones (and the memory's keys and values, projected once);
without it each step runs the whole prefix again. Both give the same tokens (tested).

Scores and the length penalty (Wu et al. 2016, GNMT, section 7): a hypothesis of n tokens (its
end token counted) whose log-probabilities sum to s scores s / lp(n), lp(n) = ((5 + n) / 6)^alpha.
alpha = 0 ranks by s alone; larger alpha favours longer outputs. Greedy search reports the same
score for the one hypothesis it builds.

Beam search keeps `num_beams` live hypotheses per source. Each step takes the 2K best
extensions: an end token among the K best finishes a hypothesis (into the K best finished), the
K best others live on. A source stops when its worst finished hypothesis beats its best live one
scored at the current length (the usual stopping rule; with K = 1 it makes beam search greedy
search). At `max_new_tokens` the live hypotheses compete with the finished ones.

Repeats (`no_repeat_ngram_size` n > 0): a token that would complete an n-gram the hypothesis
already holds gets log-probability -inf, the trigram blocking of Paulus et al. 2017 made general.
Small models trained on little data loop ("growth growth growth"); the block is a decoding rule,
applied the same with and without the cache.

Call `model.eval()` first: these functions leave the module's mode alone.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from tscratch.errors import UserError
from tscratch.nn.positions import position_length_limit
from tscratch.seq2seq.hypotheses import Hypotheses
from tscratch.seq2seq.model import DecoderCache, TransformerSeq2Seq


class GenerationOutput(NamedTuple):
    sequences: Tensor
    """(B, L) generated ids without the start token; `pad_id` after each end token."""
    scores: Tensor
    """(B,) sum of the tokens' log-probabilities divided by the length penalty."""
    token_logprobs: Tensor
    """(B, L) log-probability of each generated token; 0 after the end."""


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT's length normalisation ((5 + n) / 6) ** alpha for hypotheses of `length` tokens."""
    return ((5 + length) / 6) ** alpha


def repeated_ngram_mask(prefixes: Tensor, n: int, vocab_size: int) -> Tensor:
    """(N, V) True at the tokens that would complete an n-gram already in each prefix (N, t).

    n = 1 bans every token the prefix holds; n = 0 bans nothing.
    """
    N, t = prefixes.shape
    banned = torch.zeros(N, vocab_size, device=prefixes.device)
    if n < 1 or t < n:
        return banned.bool()
    windows = prefixes.unfold(1, n, 1)  # (N, t - n + 1, n): every n-gram so far
    tail = prefixes[:, t - n + 1 :]  # (N, n - 1): the last n - 1 tokens
    match = (windows[..., : n - 1] == tail[:, None, :]).all(dim=-1)  # (N, t - n + 1)
    # amax, not a plain scatter: one token may follow both a matching and another context
    return banned.scatter_reduce_(1, windows[..., -1], match.float(), reduce="amax").bool()


class _Steps:
    """Next-token log-probabilities of growing prefixes, decoding with or without the cache."""

    def __init__(
        self,
        model: TransformerSeq2Seq,
        memory: Tensor,
        mask: Tensor | None,
        cache: bool,
        no_repeat_ngram_size: int = 0,
    ):
        self.model, self.memory, self.mask, self.use_cache = model, memory, mask, cache
        self.no_repeat = no_repeat_ngram_size
        self.cache: DecoderCache | None = None

    def __call__(self, prefixes: Tensor) -> Tensor:
        """Prefixes (N, t) that extend the previous call's by one token -> (N, V) fp32."""
        if self.use_cache:
            new, cache = prefixes[:, -1:], self.cache
        else:
            new, cache = prefixes, None
        out = self.model.decode(new, self.memory, self.mask, cache=cache, last_only=True)
        self.cache = out.cache if self.use_cache else None
        logprobs = out.logits[:, -1].float().log_softmax(dim=-1)  # (N, V)
        if self.no_repeat:
            banned = repeated_ngram_mask(prefixes[:, 1:], self.no_repeat, logprobs.shape[-1])
            logprobs = logprobs.masked_fill(banned, -torch.inf)
        return logprobs

    def reorder(self, index: Tensor) -> None:
        """The next prefixes are this call's rows `index` (N,), each extended by one token."""
        if self.cache is not None:
            self.cache = self.cache.select_hypotheses(index)


def _check(
    model: TransformerSeq2Seq, max_new_tokens: int, num_beams: int, no_repeat_ngram_size: int
) -> None:
    for name, value in (("max_new_tokens", max_new_tokens), ("num_beams", num_beams)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{name} ({value!r}) must be a positive integer")
    value = no_repeat_ngram_size
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UserError(f"no_repeat_ngram_size ({value!r}) must be 0 (off) or a positive integer")
    config = model.config
    if 2 * num_beams > config.vocab_size:
        raise UserError(
            f"num_beams ({num_beams}) must be at most vocab_size / 2 ({config.vocab_size // 2})"
        )
    limit = position_length_limit(config)
    if limit is not None and max_new_tokens > limit:
        raise UserError(
            f"max_new_tokens ({max_new_tokens}) exceeds max_len ({limit}) of the "
            f"{config.position} position table; raise max_len or generate fewer tokens"
        )


@torch.no_grad()
def greedy_search(
    model: TransformerSeq2Seq,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int | None = None,
    max_new_tokens: int = 64,
    length_penalty_alpha: float = 0.6,
    use_cache: bool = True,
    no_repeat_ngram_size: int = 0,
) -> GenerationOutput:
    """The most likely next token at every step.

    Args:
        model: the encoder-decoder, in eval mode.
        input_ids: (B, S) source ids, right-padded.
        attention_mask: (B, S) True/1 = real source token; None when nothing is padded.
        bos_id: the decoder's start token. eos_id: the end token.
        pad_id: what fills a row after its end (default: the config's pad_id).
        max_new_tokens: most tokens generated per row, the end token included.
        length_penalty_alpha: alpha of the GNMT length penalty in the reported scores.
        use_cache: decode incrementally with the key/value cache.
        no_repeat_ngram_size: n > 0 never repeats an n-gram within a hypothesis; 0 allows it.
    """
    _check(model, max_new_tokens, 1, no_repeat_ngram_size)
    pad_id = model.config.pad_id if pad_id is None else pad_id
    B, device = input_ids.shape[0], input_ids.device
    memory = model.encode(input_ids, attention_mask)  # (B, S, D)
    steps = _Steps(model, memory, attention_mask, use_cache, no_repeat_ngram_size)
    prefixes = torch.full((B, 1), bos_id, dtype=torch.long, device=device)
    ended = torch.zeros(B, dtype=torch.bool, device=device)
    lengths = torch.zeros(B, dtype=torch.long, device=device)
    total = torch.zeros(B, device=device)
    logprobs_per_step = []
    for _ in range(max_new_tokens):
        best, token = steps(prefixes).max(dim=-1)  # (B,), (B,)
        token, best = token.masked_fill(ended, pad_id), best.masked_fill(ended, 0.0)
        lengths, total = lengths + (~ended).long(), total + best
        prefixes = torch.cat([prefixes, token[:, None]], dim=1)
        logprobs_per_step.append(best)
        ended = ended | (token == eos_id)
        if ended.all():
            break
    scores = total / length_penalty(lengths, length_penalty_alpha)
    return GenerationOutput(prefixes[:, 1:], scores, torch.stack(logprobs_per_step, dim=1))


@torch.no_grad()
def beam_search(
    model: TransformerSeq2Seq,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int | None = None,
    num_beams: int = 4,
    max_new_tokens: int = 64,
    length_penalty_alpha: float = 0.6,
    use_cache: bool = True,
    no_repeat_ngram_size: int = 0,
) -> GenerationOutput:
    """The best of `num_beams` hypotheses per source under the GNMT length penalty (see the
    module docstring). Arguments as in `greedy_search`."""
    _check(model, max_new_tokens, num_beams, no_repeat_ngram_size)
    pad_id = model.config.pad_id if pad_id is None else pad_id
    (B, _), K, device, L = input_ids.shape, num_beams, input_ids.device, max_new_tokens
    memory = model.encode(input_ids, attention_mask).repeat_interleave(K, dim=0)  # (B*K, S, D)
    mask = None if attention_mask is None else attention_mask.repeat_interleave(K, dim=0)
    steps = _Steps(model, memory, mask, use_cache, no_repeat_ngram_size)
    first_row = torch.arange(B, device=device)[:, None] * K  # a source's K beams are adjacent
    rank = torch.arange(2 * K, device=device).expand(B, -1)  # (B, 2K)
    live = Hypotheses.start(B, K, device)
    finished = Hypotheses.empty(B, K, L, pad_id, device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for t in range(L):
        bos = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)
        logprobs = steps(torch.cat([bos, live.tokens.view(B * K, t)], dim=1)).view(B, K, -1)
        V = logprobs.shape[-1]
        sums, flat = (live.scores[..., None] + logprobs).view(B, K * V).topk(2 * K, dim=1)
        beam, token = flat // V, flat % V  # (B, 2K) each, best first; at most K are ends
        candidates = live.extend(beam, token, logprobs.view(B, K * V).gather(1, flat), sums)
        is_end = token == eos_id
        ends = is_end & (rank < K) & ~done[:, None]
        penalty = length_penalty(t + 1, length_penalty_alpha)
        ended = candidates.with_scores(torch.where(ends, sums / penalty, -torch.inf))
        finished = finished.merged(ended.padded(L, pad_id), K)
        survivors = (is_end.long() * 2 * K + rank).argsort(dim=1)[:, :K]  # non-ends, best first
        live = candidates.take(survivors)
        steps.reorder((first_row + beam.gather(1, survivors)).view(-1))
        done = done | (finished.scores[:, -1] >= live.scores[:, 0] / penalty)
        if done.all():
            break
    if not done.all():  # out of steps: live hypotheses of unfinished sources compete too
        penalty = length_penalty(live.tokens.shape[-1], length_penalty_alpha)
        scored = torch.where(done[:, None], -torch.inf, live.scores / penalty)
        finished = finished.merged(live.with_scores(scored).padded(L, pad_id), K)
    best = finished.take(torch.zeros(B, 1, dtype=torch.long, device=device))
    length = int(best.lengths.max())
    return GenerationOutput(
        best.tokens[:, 0, :length], best.scores[:, 0], best.logprobs[:, 0, :length]
    )


def generate(
    model: TransformerSeq2Seq,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    num_beams: int = 1,
    **options,
) -> GenerationOutput:
    """Greedy search for `num_beams` 1, beam search above; `options` as in `beam_search`."""
    if num_beams == 1:
        return greedy_search(model, input_ids, attention_mask, **options)
    return beam_search(model, input_ids, attention_mask, num_beams=num_beams, **options)
