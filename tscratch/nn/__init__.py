"""The hand-written building blocks of the encoder, in plain PyTorch (no Lightning here).

Shape legend used in every comment of this package:
    B  batch size            T  query length         S  key/memory length
    D  d_model               H  num_heads            Dh d_head = D / H
    F  d_ff                  V  vocab_size           C  num_classes

Mask convention (one for the whole project, the Hugging Face one): `attention_mask` (B, T) is
True/1 for a real token and False/0 for padding. Attention masks built from it are boolean
"keep" masks: True where a query may look at a key.
"""

from tscratch.nn.attention import (
    AUTO_POLICY,
    KVCache,
    MultiHeadAttention,
    scaled_dot_product_attention,
    use_explicit,
)
from tscratch.nn.bigrams import pair_ids
from tscratch.nn.blocks import (
    DecoderBlock,
    DecoderBlockOutput,
    EncoderBlock,
    SelfAttentionInputs,
    self_attention_inputs,
)
from tscratch.nn.feedforward import FeedForward
from tscratch.nn.heads import ClassificationHead, pool
from tscratch.nn.masks import AttentionMask, attention_keep_mask, causal_mask, padding_mask
from tscratch.nn.norms import make_norm
from tscratch.nn.positions import (
    POSITIONS,
    ALiBiBias,
    LearnedPositions,
    NoPositions,
    PositionScheme,
    RotaryEmbedding,
    SinusoidalPositions,
    T5RelativeBias,
    alibi_slopes,
    apply_rotary,
    position_length_limit,
    position_scheme,
    sinusoidal_table,
    t5_relative_buckets,
)

__all__ = [
    "AUTO_POLICY",
    "POSITIONS",
    "ALiBiBias",
    "AttentionMask",
    "ClassificationHead",
    "DecoderBlock",
    "DecoderBlockOutput",
    "EncoderBlock",
    "FeedForward",
    "KVCache",
    "LearnedPositions",
    "MultiHeadAttention",
    "NoPositions",
    "PositionScheme",
    "RotaryEmbedding",
    "SelfAttentionInputs",
    "SinusoidalPositions",
    "T5RelativeBias",
    "alibi_slopes",
    "apply_rotary",
    "attention_keep_mask",
    "causal_mask",
    "make_norm",
    "padding_mask",
    "pair_ids",
    "pool",
    "position_length_limit",
    "position_scheme",
    "scaled_dot_product_attention",
    "self_attention_inputs",
    "sinusoidal_table",
    "t5_relative_buckets",
    "use_explicit",
]
