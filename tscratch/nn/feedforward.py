"""Position-wise feed-forward networks (Vaswani et al. 2017, section 3.3; Shazeer 2020 for GLUs).

- relu / gelu: `fc2(dropout(act(fc1(x))))` with a hidden width of d_ff (the article: ReLU);
  gelu is the exact erf form used by BERT.
- swiglu / geglu: `fc2(dropout(act(x W_gate) * (x W_up)))`. Hidden-size convention: d_ff is the
  width of each branch, so a GLU block holds 3 * D * d_ff weights instead of 2 * D * d_ff. To
  match a ReLU block's parameter count, set d_ff to about 2/3 of its value (Shazeer 2020).
  The gate and up projections are fused in `fc1` (gate first, then up).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from tscratch.nn.dropout import Dropout

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swiglu": F.silu, "geglu": F.gelu}


class FeedForward(nn.Module):
    """Two-layer (or gated) feed-forward network applied to every position.

    Args:
        d_model: input and output width D.
        d_ff: hidden width F (of each branch for GLU variants).
        activation: relu, gelu, swiglu or geglu.
        dropout: dropout on the hidden activations.
        bias: biases on both projections.
    """

    def __init__(
        self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0, bias=True
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"ffn ({activation!r}) must be one of {tuple(_ACTIVATIONS)}")
        self.gated = activation in ("swiglu", "geglu")
        self.d_ff = d_ff
        self.act = _ACTIVATIONS[activation]
        self.fc1 = nn.Linear(d_model, 2 * d_ff if self.gated else d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weights (gate and up branches separately), zero biases."""
        for chunk in self.fc1.weight.split(self.d_ff, dim=0):
            nn.init.xavier_uniform_(chunk)
        nn.init.xavier_uniform_(self.fc2.weight)
        for linear in (self.fc1, self.fc2):
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.fc1(x)  # (B, T, F) or (B, T, 2F)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)  # (B, T, F) each
            h = self.act(gate) * up
        else:
            h = self.act(h)
        return self.fc2(self.dropout(h))  # (B, T, D)
