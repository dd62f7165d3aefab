"""Pooling and the classification head on top of the encoder.

`cls` pooling reads the first position, which the data layer fills with a real [CLS] token
(BERT's convention); `mean` averages the real tokens only, using the attention mask.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor, nn

from tscratch.nn.dropout import Dropout

Pooling = Literal["cls", "mean"]


def pool(hidden: Tensor, attention_mask: Tensor | None, how: Pooling = "cls") -> Tensor:
    """Reduce hidden states (B, T, D) to one vector per sequence (B, D).

    Args:
        hidden: encoder output.
        attention_mask: (B, T) True/1 = real token, or None when nothing is padded.
        how: "cls" (first position) or "mean" (mean over real tokens; 0 for an empty row).
    """
    if how == "cls":
        return hidden[:, 0]
    if how == "mean":
        if attention_mask is None:
            return hidden.mean(dim=1)
        weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
        count = weights.sum(dim=1).clamp(min=1.0)  # (B, 1)
        return (hidden * weights).sum(dim=1) / count
    raise ValueError(f"pooling ({how!r}) must be 'cls' or 'mean'")


class ClassificationHead(nn.Module):
    """Pool, dropout, linear: (B, T, D) -> logits (B, C).

    The linear layer starts with small normal weights (std 0.02) and zero bias, so initial
    logits are near zero and the initial loss is near log(C).
    """

    def __init__(
        self, d_model: int, num_classes: int, dropout: float = 0.1, pooling: Pooling = "cls"
    ) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes ({num_classes}) must be at least 2")
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling ({pooling!r}) must be 'cls' or 'mean'")
        self.pooling = pooling
        self.dropout = Dropout(dropout)
        self.proj = nn.Linear(d_model, num_classes)
        nn.init.normal_(self.proj.weight, std=0.02)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.classify(pool(hidden, attention_mask, self.pooling))

    def classify(self, pooled: Tensor) -> Tensor:
        """Logits (B, C) of pooled vectors (B, D): dropout, then the linear layer."""
        return self.proj(self.dropout(pooled))


__all__ = ["ClassificationHead", "Pooling", "pool"]
