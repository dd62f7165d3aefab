"""`TransformerForReplacedTokenDetection`: ELECTRA's pretraining (Clark et al. 2020).

Masked-LM pretraining learns from the 15% of tokens it masks; the other 85% of each row are
read but teach nothing. ELECTRA learns from every token: a small generator (a masked LM) fills
the masked positions with tokens sampled from its own predictions, and the discriminator (the
encoder kept for fine-tuning) labels every token of the result as original or replaced. The
paper's small models gain most per unit of compute (ELECTRA-Small 79.9 GLUE against 75.1 for
a BERT-Small trained with the same compute, their Table 1), which is the regime of a 2-core CPU
and a training split of a few thousand texts.

As in the paper, the generator is smaller than the discriminator, the two share their token
embedding, the sampled tokens carry no gradient back to the generator, and the loss is the
generator's masked-LM loss plus `discriminator_weight` (50) times the discriminator's per-token
binary loss over real tokens. A sampled token that equals the original counts as original.
Where this differs from the paper: the generator is smaller by depth (half the layers, the same
width) where the paper's are narrower (a quarter to half the width worked best, their Figure
3), so the embedding is shared without a projection; position and token-type tables are not
shared (the recipe's ALiBi has none); and the generator's input is corrupted as BERT's is
(`tscratch.data.masking`: 80% [MASK], 10% random, 10% kept) where the paper's code keeps 15%
and replaces none at random.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.masked_lm import TransformerForMaskedLM, masked_lm_flops
from tscratch.model import TransformerEncoder, forward_flops


class ReplacedTokenOutput(NamedTuple):
    """One ELECTRA forward pass."""

    generator_logits: Tensor
    """(N, V) the generator's logits at the N masked positions, row-major order."""
    detector_logits: Tensor
    """(B, T) the discriminator's logit that each token was replaced."""
    replaced: Tensor
    """(B, T) bool, True where the generator's sample differs from the original token."""


def generator_config(config: EncoderConfig, layers: int | None = None) -> EncoderConfig:
    """The generator's architecture: the discriminator's, with ``layers`` layers (default half
    of its layers, at least one). The width stays, so the two can share a token embedding."""
    layers = max(1, config.num_layers // 2) if layers is None else layers
    if not 1 <= layers <= config.num_layers:
        raise UserError(
            f"--model.generator_layers ({layers}) must be from 1 to the encoder's num_layers "
            f"({config.num_layers}): the generator is the smaller model"
        )
    return config.replace(num_layers=layers)


def sample(logits: Tensor, rng: torch.Generator | None = None) -> Tensor:
    """One token id per row of (N, V) ``logits``, drawn from their softmax.

    By the inverse of each row's cumulative distribution: one uniform number per row, where
    `torch.multinomial` draws V exponentials per row (on a CPU it was 15% of an ELECTRA step
    with V = 7,139, against well under 1% for this).
    """
    cdf = F.softmax(logits.float(), dim=-1).cumsum(-1)  # (N, V), last column ~1
    u = torch.rand(len(cdf), 1, generator=rng, device=cdf.device) * cdf[:, -1:]
    # right=True: u = 0 lands after any leading zero-probability tokens, not on them.
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


class TransformerForReplacedTokenDetection(nn.Module):
    """ELECTRA: a masked-LM generator and a discriminator encoder that share a token embedding.

    The discriminator sits at `.encoder`, so a checkpoint's `model.encoder.*` weights are what
    fine-tuning starts from, as with `TransformerForMaskedLM`; the generator is dropped.

    Args:
        config: the discriminator's architecture (the encoder fine-tuned later).
        generator_layers: the generator's layers (None: `generator_config`'s default).
    """

    def __init__(self, config: EncoderConfig, generator_layers: int | None = None) -> None:
        super().__init__()
        if config.factorized:
            raise UserError(
                f"embed_dim ({config.embed_dim}): ELECTRA's generator shares the token "
                f"embeddings at full width; pretrain with embed_dim 0 or the mlm objective"
            )
        self.config = config
        self.encoder = TransformerEncoder(config)
        self.generator = TransformerForMaskedLM(generator_config(config, generator_layers))
        self.generator.encoder.tok_emb = self.encoder.tok_emb  # one embedding, two readers
        self.generator.encoder.bigram_emb = self.encoder.bigram_emb  # and one pair table
        self.generator.head.decoder.weight = self.encoder.tok_emb.weight  # decoder stays tied
        D = config.d_model
        self.detector = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, 1))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        labels: Tensor,
        rng: torch.Generator | None = None,
    ) -> ReplacedTokenOutput:
        """Generate replacements for the masked positions, then detect them.

        Args:
            input_ids: (B, T) ids with the masker's corruption applied (the generator's input).
            attention_mask: (B, T) True/1 = real token.
            labels: (B, T) the original id at masked positions, -100 elsewhere.
            rng: source of the generator's samples; None draws from torch's global RNG.
        """
        masked = labels >= 0  # (B, T)
        generator_logits = self.generator(input_ids, attention_mask, masked)  # (N, V)
        with torch.no_grad():
            sampled = sample(generator_logits, rng)  # (N,)
            corrupted = input_ids.masked_scatter(masked, sampled)  # originals elsewhere
            replaced = masked & (corrupted != labels)
        hidden = self.encoder(corrupted, attention_mask).last_hidden_state  # (B, T, D)
        detector_logits = self.detector(hidden).squeeze(-1)  # (B, T)
        return ReplacedTokenOutput(generator_logits, detector_logits, replaced)


def replaced_token_loss(
    out: ReplacedTokenOutput, labels: Tensor, attention_mask: Tensor, weight: float
) -> tuple[Tensor, Tensor, Tensor]:
    """ELECTRA's objective: (total, generator masked-LM loss, discriminator loss).

    The discriminator's binary cross-entropy is averaged over real tokens (padding is left
    out); total = generator loss + ``weight`` * discriminator loss.
    """
    targets = labels[labels >= 0]  # (N,), the order the generator's logits were gathered in
    generator_loss = F.cross_entropy(out.generator_logits.float(), targets)
    real = attention_mask.bool()
    detector_loss = F.binary_cross_entropy_with_logits(
        out.detector_logits.float()[real], out.replaced[real].float()
    )
    return generator_loss + weight * detector_loss, generator_loss, detector_loss


def replaced_token_flops(
    model: TransformerForReplacedTokenDetection, batch_size: int, length: int, num_masked: int
) -> int:
    """Matmul FLOPs of one forward pass: the generator with its head on the N masked rows, the
    discriminator on (B, T) and its detector head (2 D^2 + 2 D per token)."""
    D = model.config.d_model
    generator = masked_lm_flops(model.generator.config, batch_size, length, num_masked)
    detector = batch_size * length * (2 * D * D + 2 * D)
    return generator + forward_flops(model.config, batch_size, length) + detector
