"""Position schemes: how the encoder learns where a token sits, behind one interface.

- sinusoidal: fixed sin/cos table added to embeddings (Vaswani et al. 2017, section 3.5);
- learned: a trained table added to embeddings (BERT, Devlin et al. 2019);
- rope: rotary embeddings rotating queries and keys (Su et al. 2021), rotate-half layout;
- alibi: per-head linear distance penalty on attention scores (Press et al. 2022), made
  symmetric, -slope * |i - j|, for a bidirectional encoder (under a causal mask only j <= i is
  seen, which is the paper's -slope * (i - j));
- t5: learned per-head bias of bucketed relative distance (Raffel et al. 2020), bidirectional
  buckets (a causal decoder uses the half for earlier keys; T5 gives its decoder one-way
  buckets instead);
- none: nothing (the encoder is then permutation equivariant).

Each scheme is a `PositionScheme` declaring its `kind` and overriding the hook of that kind:
`embed` adds a (T, D) table to the embeddings ("absolute"), `score_bias` returns a (1, H, T, S)
bias for the attention scores ("bias"), `rotary` returns the (cos, sin) angles rotating queries
and keys ("rotary"). The other hooks keep their neutral defaults, so the model calls all three and
never asks which scheme it has. Biases and angles are computed once per forward and shared by
every layer. `POSITIONS` is the one table of names; `position_scheme` builds from a config.

Incremental decoding feeds T new tokens after `offset` cached ones: each hook takes that
`offset`, the absolute position of its first query, so sinusoidal and learned tables add rows
offset.., RoPE rotates by positions offset.., and ALiBi/T5 measure distances from queries at
offset.. to keys at 0... A scheme that never decodes incrementally may leave `offset` out: the
models pass it only when it is nonzero.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from tscratch.config import EncoderConfig
from tscratch.errors import UserError

PositionKind = Literal["absolute", "bias", "rotary"] | None


class PositionScheme(nn.Module):
    """Where a scheme acts, how it is built from the config, and how long an input it covers.

    Subclasses set `name` (the config value) and `kind`, override `from_config` when they take
    arguments and the hook of their kind; `max_length` is None unless a table limits the length.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[PositionKind] = None
    learned: ClassVar[bool] = False
    """Whether the scheme holds trained parameters (a table or a bias), which start random."""
    max_length: int | None = None

    @classmethod
    def from_config(cls, config: EncoderConfig) -> PositionScheme:
        """Build the scheme for `config`, raising UserError for values it cannot work with."""
        return cls()

    @classmethod
    def length_limit(cls, config: EncoderConfig) -> int | None:
        """Longest sequence the scheme encodes under `config`, or None for no limit."""
        return None

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """(B, T, D) embeddings at positions offset.. plus absolute positions; unchanged for other
        kinds."""
        return x

    def score_bias(self, query_length: int, key_length: int, offset: int = 0) -> Tensor | None:
        """(1, H, T, S) float bias added to the scores of queries at positions offset.. over keys
        at 0..S-1, or None."""
        return None

    def rotary(self, length: int, offset: int = 0) -> tuple[Tensor, Tensor] | None:
        """(cos, sin), each (T, Dh) in fp32, rotating queries and keys at positions offset..,
        or None."""
        return None


class NoPositions(PositionScheme):
    """No position information at all."""

    name = "none"


def _check_length(length: int, max_len: int, kind: str) -> None:
    if length > max_len:
        raise UserError(
            f"sequence length ({length}) exceeds max_len ({max_len}) of the {kind} position "
            f"table; raise max_len or truncate the input"
        )


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)). Returns (L, D)."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (L, ceil(D/2))
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class TablePositions(PositionScheme):
    """An absolute (max_len, D) table; `forward(T)` returns its first T rows, added to the
    embeddings by `embed`."""

    kind = "absolute"

    def __init__(self, max_len: int) -> None:
        super().__init__()
        self.max_len = self.max_length = max_len

    @classmethod
    def from_config(cls, config: EncoderConfig) -> TablePositions:
        return cls(config.max_len, config.d_model)

    @classmethod
    def length_limit(cls, config: EncoderConfig) -> int | None:
        return config.max_len

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self(offset + x.shape[1])[offset:]  # (B, T, D) + (T, D) broadcast over B


class SinusoidalPositions(TablePositions):
    """The article's fixed table, kept as a non-persistent buffer (recomputed, not saved)."""

    name = "sinusoidal"

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__(max_len)
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, length: int) -> Tensor:
        _check_length(length, self.max_len, self.name)
        return self.table[:length]  # (T, D)


class LearnedPositions(TablePositions):
    """A trained (max_len, D) table, as in BERT."""

    name = "learned"
    learned = True

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__(max_len)
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, length: int) -> Tensor:
        _check_length(length, self.max_len, self.name)
        return self.weight[:length]  # (T, D)


class RotaryEmbedding(PositionScheme):
    """Rotary position embedding: rotates each (x_j, x_{j+Dh/2}) pair by angle p * base^(-2j/Dh).

    The dot product of a rotated query at position m and a rotated key at position n then depends
    only on m - n. No length limit: angles are computed for the length at hand.
    """

    name = "rope"
    kind = "rotary"

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        self.d_head, self.base = d_head, base
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    @classmethod
    def from_config(cls, config: EncoderConfig) -> RotaryEmbedding:
        if config.d_head % 2:
            raise UserError(
                f"position {cls.name!r} needs an even head size, got d_model ({config.d_model}) "
                f"/ num_heads ({config.num_heads}) = {config.d_head}"
            )
        return cls(config.d_head, config.rope_base)

    def rotary(self, length: int, offset: int = 0) -> tuple[Tensor, Tensor]:
        return self(length, offset=offset)

    def _inv_freq(self, device: torch.device | None = None) -> Tensor:
        exponent = torch.arange(0, self.d_head, 2, device=device, dtype=torch.float32)
        return self.base ** (-exponent / self.d_head)  # (Dh/2,)

    def forward(
        self, length: int, dtype: torch.dtype | None = None, offset: int = 0
    ) -> tuple[Tensor, Tensor]:
        """Returns (cos, sin), each (T, Dh), for positions offset.., in `dtype` (default fp32)."""
        inv_freq = self.inv_freq
        if inv_freq.dtype != torch.float32:
            # `module.to(torch.bfloat16)` rounded the buffer: angles p * f of long sequences
            # drift (0.09 rad at position 511), so take fp32 frequencies again.
            inv_freq = self._inv_freq(inv_freq.device)
        position = torch.arange(
            offset, offset + length, device=inv_freq.device, dtype=torch.float32
        )
        angle = torch.outer(position, inv_freq)  # (T, Dh/2)
        angle = torch.cat([angle, angle], dim=-1)  # (T, Dh)
        dtype = dtype or torch.float32
        return angle.cos().to(dtype), angle.sin().to(dtype)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (..., T, Dh) by the angles in cos/sin (T, Dh), rotate-half layout."""
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi head slopes: the geometric sequence 2^(-8/n), 2^(-16/n), ... for n heads.

    For n not a power of two, Press et al. take the slopes of the nearest lower power of two and
    fill the rest with every other slope of twice that power. Returns (H,).
    """

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    power = 2 ** math.floor(math.log2(num_heads))
    slopes = geometric(power)
    if power < num_heads:
        slopes += geometric(2 * power)[0::2][: num_heads - power]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiBias(PositionScheme):
    """Symmetric ALiBi: bias[h, i, j] = -slope_h * |i - j| (no learned parameters)."""

    name = "alibi"
    kind = "bias"

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    @classmethod
    def from_config(cls, config: EncoderConfig) -> ALiBiBias:
        return cls(config.num_heads)

    def score_bias(self, query_length: int, key_length: int, offset: int = 0) -> Tensor:
        return self(query_length, key_length, offset)

    def forward(self, query_length: int, key_length: int, offset: int = 0) -> Tensor:
        device = self.slopes.device
        i = torch.arange(offset, offset + query_length, device=device)[:, None]
        j = torch.arange(key_length, device=device)[None, :]
        distance = (j - i).abs().float()  # (T, S)
        return (-self.slopes[:, None, None] * distance).unsqueeze(0)  # (1, H, T, S)


def t5_relative_buckets(
    relative_position: Tensor, *, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """Bidirectional T5 buckets of `relative_position` = key position - query position.

    Half the buckets hold keys after the query, half keys before. Within a half, the first half
    of the buckets are exact distances 0, 1, ...; the rest grow logarithmically up to
    `max_distance`, beyond which every distance shares the last bucket.
    """
    half = num_buckets // 2
    bucket = (relative_position > 0).long() * half
    distance = relative_position.abs()
    exact = half // 2
    log_ratio = torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact)
    far = exact + (log_ratio * (half - exact)).long()
    far = far.clamp(max=half - 1)
    return bucket + torch.where(distance < exact, distance, far)


class T5RelativeBias(PositionScheme):
    """Learned per-head bias over bucketed relative distances, shared by all layers."""

    name = "t5"
    kind = "bias"
    learned = True

    def __init__(self, num_heads: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        if num_buckets < 4 or max_distance <= num_buckets // 4:
            raise ValueError(
                f"T5 bias needs num_buckets ({num_buckets}) >= 4 and max_distance "
                f"({max_distance}) > num_buckets // 4"
            )
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.embedding = nn.Embedding(num_buckets, num_heads)
        nn.init.normal_(self.embedding.weight, std=0.02)

    @classmethod
    def from_config(cls, config: EncoderConfig) -> T5RelativeBias:
        return cls(config.num_heads, config.t5_num_buckets, config.t5_max_distance)

    def score_bias(self, query_length: int, key_length: int, offset: int = 0) -> Tensor:
        return self(query_length, key_length, offset)

    def forward(self, query_length: int, key_length: int, offset: int = 0) -> Tensor:
        device = self.embedding.weight.device
        i = torch.arange(offset, offset + query_length, device=device)[:, None]
        j = torch.arange(key_length, device=device)[None, :]
        buckets = t5_relative_buckets(
            j - i, num_buckets=self.num_buckets, max_distance=self.max_distance
        )  # (T, S)
        return self.embedding(buckets).permute(2, 0, 1).unsqueeze(0)  # (1, H, T, S)


POSITIONS: dict[str, type[PositionScheme]] = {
    scheme.name: scheme
    for scheme in (
        SinusoidalPositions,
        LearnedPositions,
        RotaryEmbedding,
        ALiBiBias,
        T5RelativeBias,
        NoPositions,
    )
}
"""Config name -> scheme class: the one place that lists the position schemes."""


def position_scheme(config: EncoderConfig) -> PositionScheme:
    """The scheme named by `config.position`, built and checked against `config`."""
    return _scheme_class(config.position).from_config(config)


def position_is_learned(name: str | None) -> bool:
    """Whether the scheme called ``name`` holds trained parameters (False for None)."""
    return name is not None and _scheme_class(name).learned


def position_length_limit(config: EncoderConfig) -> int | None:
    """Longest input the configured scheme can encode, or None for no limit (builds nothing)."""
    return _scheme_class(config.position).length_limit(config)


def _scheme_class(name: str) -> type[PositionScheme]:
    scheme = POSITIONS.get(name) if isinstance(name, str) else None
    if scheme is None:
        raise UserError(f"position ({name!r}) must be one of {tuple(POSITIONS)}")
    return scheme
