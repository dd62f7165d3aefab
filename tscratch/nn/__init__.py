"""The hand-written building blocks of the encoder, in plain PyTorch (no Lightning here).

Shape legend used in every comment of this package:
    B  batch size            T  query length         S  key/memory length
    D  d_model               H  num_heads            Dh d_head = D / H
    F  d_ff                  V  vocab_size           C  num_classes

Mask convention (one for the whole project, the Hugging Face one): `attention_mask` (B, T) is
True/1 for a real token and False/0 for padding. Attention masks built from it are boolean
"keep" masks: True where a query may look at a key.
"""

from tscratch.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from tscratch.nn.blocks import DecoderBlock, EncoderBlock
from tscratch.nn.feedforward import FeedForward
from tscratch.nn.heads import ClassificationHead, pool
from tscratch.nn.masks import attention_keep_mask, causal_mask, padding_mask
from tscratch.nn.norms import make_norm
from tscratch.nn.positions import (
    ALiBiBias,
    LearnedPositions,
    RotaryEmbedding,
    SinusoidalPositions,
    T5RelativeBias,
    alibi_slopes,
    sinusoidal_table,
    t5_relative_buckets,
)

__all__ = [
    "ALiBiBias",
    "ClassificationHead",
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "LearnedPositions",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "SinusoidalPositions",
    "T5RelativeBias",
    "alibi_slopes",
    "attention_keep_mask",
    "causal_mask",
    "make_norm",
    "padding_mask",
    "pool",
    "scaled_dot_product_attention",
    "sinusoidal_table",
    "t5_relative_buckets",
]
