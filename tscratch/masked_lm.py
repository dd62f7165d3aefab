"""`TransformerForMaskedLM`: the encoder plus BERT's MLM head, built from an EncoderConfig.

The head reads only the positions it is asked about (the masked ones), so a batch of B x T
tokens with N of them masked pays the vocabulary projection for N rows, not B * T.
"""

from __future__ import annotations

from torch import Tensor, nn

from tscratch.config import EncoderConfig
from tscratch.model import TransformerEncoder, forward_flops
from tscratch.nn.mlm_head import MaskedLMHead


class TransformerForMaskedLM(nn.Module):
    """`TransformerEncoder` (at `.encoder`, so its weights load into any encoder) + `MaskedLMHead`
    tied to its token embedding."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = TransformerEncoder(config)
        self.head = MaskedLMHead(
            self.encoder.tok_emb, config.norm, config.norm_eps, config.bias, config.d_model
        )

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, masked: Tensor | None = None
    ) -> Tensor:
        """Vocabulary logits at the masked positions.

        Args:
            input_ids: (B, T) token ids, masks already applied.
            attention_mask: (B, T) True/1 = real token, False/0 = padding.
            masked: (B, T) bool, the positions to predict; None predicts every position.

        Returns:
            (N, V) logits of the N masked positions in row-major order (`labels[masked]` gives
            their targets), or (B, T, V) when `masked` is None.
        """
        hidden = self.encoder(input_ids, attention_mask).last_hidden_state  # (B, T, D)
        if masked is not None:
            hidden = hidden[masked]  # (N, D): only these rows reach the head
        return self.head(hidden)


def masked_lm_flops(config: EncoderConfig, batch_size: int, length: int, num_masked: int) -> int:
    """Matmul FLOPs of one forward pass: the encoder on (B, T), the head on N masked rows
    (dense 2 D E and tied decoder 2 E V per row, E the table's width: D unless `embed_dim`).
    See `forward_flops`."""
    D, E, V = config.d_model, config.embedding_width, config.vocab_size
    return forward_flops(config, batch_size, length) + num_masked * (2 * D * E + 2 * E * V)
