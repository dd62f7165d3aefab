"""`Seq2SeqConfig`: the encoder's config plus the decoder's depth.

Why a subclass with one more field, and not a config that nests an `EncoderConfig` per half:
every field but the depth means the same thing for the decoder (width, heads, feed-forward,
norm placement, position scheme, dropout, bias, embedding scaling), as in the article's model,
and both halves share one vocabulary and one token embedding. One flat set of fields keeps the
CLI's flat `--model.*` options and a checkpoint's flat hyperparameters; and since the config
is an `EncoderConfig`, `TransformerEncoder`, the blocks and the position schemes take it as is.
A nested pair would repeat every shared field twice and let the halves disagree on the ones
that must match (d_model for cross-attention, vocab_size for the tied embedding).
"""

from __future__ import annotations

from dataclasses import dataclass

from tscratch.config import EncoderConfig
from tscratch.errors import UserError


@dataclass(frozen=True)
class Seq2SeqConfig(EncoderConfig):
    """Shape and switches of an encoder-decoder Transformer; `num_layers` is the encoder's
    depth. Every other field applies to both halves, but for `bigram_buckets`: the token pairs
    are the encoder's (the source's) only."""

    num_decoder_layers: int | None = None
    """Number of decoder blocks; None: as many as encoder blocks (num_layers)."""

    @property
    def decoder_layers(self) -> int:
        """The decoder's depth, `num_decoder_layers` or else `num_layers`."""
        return self.num_layers if self.num_decoder_layers is None else self.num_decoder_layers

    def __post_init__(self) -> None:
        super().__post_init__()
        value = self.num_decoder_layers
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise UserError(f"num_decoder_layers ({value!r}) must be a positive integer or None")
