"""The benchmark's shapes, its padded random batch and the three implementations.

- `tscratch`: `TransformerClassifier` as users get it (`attention_impl="auto"`: fused
  `F.scaled_dot_product_attention` except where the measured policy picks the explicit path);
- `explicit`: the same model with `attention_impl="explicit"` (matmul-softmax-matmul);
- `torch`: `torch.nn.TransformerEncoder` of the same shape with the same embedding and head
  (nested-tensor fast path allowed for inference only);
- `checkpointed` (only when asked for): `tscratch` with activation checkpointing on, to measure
  the memory it saves and the time it costs in training (in inference it changes nothing);
- `compiled` (only when asked for): `tscratch` under `torch.compile` (inductor), as
  `--model.compile true` trains it; compiling happens in the warm-up steps, outside the timing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tscratch import EncoderConfig, TransformerClassifier
from tscratch.nn.positions import sinusoidal_table

IMPLS = ("tscratch", "explicit", "torch")
"""What the grid compares by default."""
ALL_IMPLS = (*IMPLS, "checkpointed", "compiled")
"""What `--impls` accepts."""
MODES = ("train", "infer")
PAD_ID = 0
Batch = dict[str, Tensor]


@dataclass(frozen=True)
class Shape:
    """Architecture sizes shared by every implementation."""

    vocab_size: int = 30000
    d_model: int = 256
    num_heads: int = 8
    d_ff: int = 1024
    num_layers: int = 6
    num_classes: int = 5
    dropout: float = 0.1


ARTICLE = Shape()
TINY = Shape(vocab_size=1000, d_model=32, num_heads=2, d_ff=64, num_layers=2)


@dataclass(frozen=True)
class Cell:
    """One grid point: what is run, on which batch shape, in which precision."""

    mode: str
    seq_len: int
    batch_size: int
    precision: str


def encoder_config(shape: Shape, max_len: int, attention_impl: str = "auto") -> EncoderConfig:
    """The tscratch config of `shape` (Post-LN, sinusoidal, ReLU: the config defaults)."""
    return EncoderConfig(
        vocab_size=shape.vocab_size,
        d_model=shape.d_model,
        num_heads=shape.num_heads,
        d_ff=shape.d_ff,
        num_layers=shape.num_layers,
        max_len=max_len,
        dropout=shape.dropout,
        attention_impl=attention_impl,
    )


class TorchReference(nn.Module):
    """`torch.nn.TransformerEncoder` with the article's embedding, positions and head."""

    def __init__(self, shape: Shape, max_len: int, fast_path: bool) -> None:
        super().__init__()
        D = shape.d_model
        self.fast_path, self.scale = fast_path, math.sqrt(D)
        self.tok_emb = nn.Embedding(shape.vocab_size, D)
        self.register_buffer("table", sinusoidal_table(max_len, D), persistent=False)
        self.dropout = nn.Dropout(shape.dropout)
        layer = nn.TransformerEncoderLayer(
            D, shape.num_heads, shape.d_ff, shape.dropout, batch_first=True, norm_first=False
        )
        layer.self_attn.dropout = 0.0  # the article has no dropout on attention weights
        self.encoder = nn.TransformerEncoder(
            layer, shape.num_layers, enable_nested_tensor=fast_path
        )
        self.head_dropout = nn.Dropout(shape.dropout)
        self.proj = nn.Linear(D, shape.num_classes)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        T = input_ids.shape[1]
        x = self.tok_emb(input_ids) * self.scale + self.table[:T]  # (B, T, D)
        # torch's fast path checks only CUDA autocast and crashes under CPU autocast (dtype
        # mismatch, torch 2.13): switch it off there.
        fast = self.fast_path and not torch.is_autocast_enabled(input_ids.device.type)
        previous = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(fast)
        try:
            x = self.encoder(self.dropout(x), src_key_padding_mask=~attention_mask)  # True = pad
        finally:
            torch.backends.mha.set_fastpath_enabled(previous)
        return self.proj(self.head_dropout(x[:, 0]))  # (B, C)


class LogitsOnly(nn.Module):
    """Adapts `TransformerClassifier` to the `(input_ids, attention_mask) -> logits` call."""

    def __init__(self, model: TransformerClassifier) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model(input_ids, attention_mask).logits


def build_model(impl: str, shape: Shape, max_len: int, mode: str, device: str) -> nn.Module:
    """One implementation of the classifier, seeded, on `device`."""
    torch.manual_seed(0)
    if impl == "torch":
        return TorchReference(shape, max_len, fast_path=mode == "infer").to(device)
    config = encoder_config(shape, max_len, "explicit" if impl == "explicit" else "auto")
    model = TransformerClassifier(config, shape.num_classes)
    model.encoder.activation_checkpointing = impl == "checkpointed"
    wrapped = LogitsOnly(model).to(device)
    if impl == "compiled":
        wrapped.compile()  # in place, as --model.compile true does
    return wrapped


def make_batch(shape: Shape, batch_size: int, seq_len: int, device: str, seed: int = 0) -> Batch:
    """Random ids right-padded with `PAD_ID`, lengths uniform in [T/2, T]; mask True = real."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, seq_len // 2), seq_len + 1, (batch_size,), generator=gen)
    mask = torch.arange(seq_len)[None, :] < lengths[:, None]  # (B, T)
    ids = torch.randint(1, shape.vocab_size, (batch_size, seq_len), generator=gen)
    labels = torch.randint(0, shape.num_classes, (batch_size,), generator=gen)
    batch = {"input_ids": ids.masked_fill(~mask, PAD_ID), "attention_mask": mask, "labels": labels}
    return {key: value.to(device) for key, value in batch.items()}
