"""The masked-language-model head of BERT (Devlin et al. 2019): dense, GELU, norm, tied decoder.

The output projection shares its weight with the encoder's token embedding (Press & Wolf 2017),
so the head adds only D^2 + 3D + V parameters. It maps whatever hidden states it is given: the
caller gathers the (N, D) states of the masked positions first, so the (N, V) vocabulary
projection, the costliest matmul of a small model, never runs on the other positions.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from tscratch.nn.norms import make_norm


class MaskedLMHead(nn.Module):
    """(..., D) hidden states -> (..., V) vocabulary logits, decoder tied to `embedding`.

    Args:
        embedding: the encoder's token embedding (V, E); its weight IS the decoder's weight.
            E is D, or narrower with factorized embeddings (`EncoderConfig.embed_dim`), where
            the dense layer maps D down to E as ALBERT's head does.
        norm: "layernorm" or "rmsnorm", as the encoder's.
        eps: epsilon of the norm.
        bias: bias on the dense layer and the norm (the output bias is always there, as BERT's).
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        norm: str = "layernorm",
        eps: float = 1e-5,
        bias: bool = True,
        d_model: int | None = None,
    ) -> None:
        """``d_model``: width of the hidden states (default: the embedding's)."""
        super().__init__()
        V, E = embedding.weight.shape
        self.dense = nn.Linear(d_model or E, E, bias=bias)
        self.norm = make_norm(norm, E, eps, bias)
        self.decoder = nn.Linear(E, V, bias=False)
        self.decoder.weight = embedding.weight  # tied: one Parameter, two names in state_dict
        self.bias = nn.Parameter(torch.zeros(V))
        nn.init.xavier_uniform_(self.dense.weight)
        if self.dense.bias is not None:
            nn.init.zeros_(self.dense.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        """(..., D) -> (..., V) logits."""
        x = self.norm(F.gelu(self.dense(hidden)))  # (..., E)
        # The bias inside the matmul (addmm): a separate add over (N, V) cost 7% of a bf16
        # pretraining step, and under autocast promoted the logits to fp32 one op early.
        return F.linear(x, self.decoder.weight, self.bias)  # (..., V)
