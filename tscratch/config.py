"""Architecture configuration of the encoder: one frozen, validated dataclass.

Every switch of the model lives here and nowhere else, so a config printed by the CLI, a YAML
file and a checkpoint's hyperparameters all describe the same network. Sizes that come from the
data (`vocab_size`, `pad_id`) are filled in by the data module, never typed by users.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from tscratch.errors import UserError

# Any name in tscratch.nn.positions.POSITIONS; the config cannot import nn to list them.
Position = str
FFN = Literal["relu", "gelu", "swiglu", "geglu"]
Norm = Literal["layernorm", "rmsnorm"]
AttentionImpl = Literal["auto", "sdpa", "explicit"]
MAX_WORD_CHARS = 16
"""Most characters `EncoderConfig.word_chars` reads of an entry: the table is V x word_chars ids."""


@dataclass(frozen=True)
class EncoderConfig:
    """Shape and switches of a Transformer encoder (and of its decoder block)."""

    RUNTIME_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"dropout", "attention_dropout", "attention_impl"}
    )
    """Fields that do not change what trained weights mean: a resumed run may change them. Every
    other field is checked against the checkpoint before a resume."""

    vocab_size: int
    """Number of token ids; taken from the tokenizer."""
    d_model: int = 256
    """Width of the residual stream."""
    num_heads: int = 8
    """Attention heads; d_head = d_model // num_heads."""
    d_ff: int = 1024
    """Hidden width of the feed-forward network (of each branch for swiglu/geglu)."""
    num_layers: int = 6
    """Number of encoder blocks."""
    max_len: int = 512
    """Longest sequence the position table covers (sinusoidal, learned)."""
    dropout: float = 0.1
    """Dropout on embeddings, residual branches and the feed-forward hidden layer."""
    attention_dropout: float = 0.0
    """Dropout on attention weights (none in the article; nonzero slows SDPA on CPU)."""
    norm_first: bool = False
    """False: Post-LN (the article, BERT). True: Pre-LN (Xiong et al. 2020) with a final norm."""
    norm: Norm = "layernorm"
    """Normalization layer: layernorm or rmsnorm."""
    norm_eps: float = 1e-5
    """Epsilon of every norm (BERT uses 1e-12)."""
    position: Position = "sinusoidal"
    """Position scheme: a name in tscratch.nn.positions.POSITIONS (sinusoidal, learned, rope,
    alibi, t5, none); checked when the model is built."""
    ffn: FFN = "relu"
    """Feed-forward variant: relu, gelu (exact erf), swiglu or geglu."""
    pad_id: int = 0
    """Id of the padding token; taken from the tokenizer."""
    bias: bool = True
    """Biases on projections and norms."""
    scale_embeddings: bool = True
    """Multiply token embeddings by sqrt(d_model) (the article); BERT does not."""
    embedding_norm: bool = False
    """Normalize the summed embeddings before the first block (BERT)."""
    type_vocab_size: int = 0
    """Token-type (segment) embeddings, as in BERT; 0 disables them."""
    bigram_buckets: int = 0
    """Embeddings of adjacent token pairs, hashed into this many rows and added to each token's
    own (tscratch.nn.bigrams); 0 disables them. For tokens that are single characters
    (Chinese), where a pair is often a word."""
    word_chars: int = 0
    """Mix each vocabulary entry of several characters with its first `word_chars` characters'
    own entries (`tscratch.nn.word_chars`): a token's vector is the mean of its row and its
    characters' mean row. For Chinese read as words (`--data.segmenter jieba`), where a word seen
    a few times borrows from characters seen in many words; 0 disables it."""
    embed_dim: int = 0
    """Width of the token embedding table when it is narrower than d_model: each token's vector
    is then projected up to d_model by a learned matrix (factorized embeddings, ALBERT: Lan et
    al. 2019), so a vocabulary of V entries costs V x embed_dim numbers instead of V x d_model.
    0 (or d_model) gives each token a d_model-wide vector and no projection."""
    attention_impl: AttentionImpl = "auto"
    """auto: fused kernels except where tscratch.nn.attention.AUTO_POLICY measured the explicit
    path faster; sdpa: fused kernels unless weights are requested; explicit: always the
    readable path."""
    rope_base: float = 10000.0
    """Base of the rotary frequencies."""
    t5_num_buckets: int = 32
    """Relative-position buckets of the T5 bias."""
    t5_max_distance: int = 128
    """Distance beyond which the T5 bias uses one bucket."""

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    @property
    def embedding_width(self) -> int:
        """Width of the token embedding table: `embed_dim`, or d_model when it is 0."""
        return self.embed_dim or self.d_model

    @property
    def factorized(self) -> bool:
        """Whether token vectors are projected up to d_model (`embed_dim` below d_model)."""
        return self.embedding_width != self.d_model

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"{name} ({value!r}) must be a positive integer")
        if self.d_model % self.num_heads:
            raise UserError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise UserError(f"{name} ({value}) must be in [0, 1)")
        if not 0 <= self.pad_id < self.vocab_size:
            raise UserError(f"pad_id ({self.pad_id}) must be in [0, vocab_size={self.vocab_size})")
        if self.norm_eps <= 0:
            raise UserError(f"norm_eps ({self.norm_eps}) must be positive")
        buckets = self.bigram_buckets
        if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 0:
            auto = "; 'auto' is chosen from the data by tscratch fit" if buckets == "auto" else ""
            raise UserError(f"bigram_buckets ({buckets!r}) must be an integer >= 0 (0: none){auto}")
        chars = self.word_chars
        if (
            not isinstance(chars, int)
            or isinstance(chars, bool)
            or not 0 <= chars <= MAX_WORD_CHARS
        ):
            raise UserError(
                f"word_chars ({chars!r}) must be an integer from 0 (none) to {MAX_WORD_CHARS}"
            )
        width = self.embed_dim
        if not isinstance(width, int) or isinstance(width, bool) or not 0 <= width <= self.d_model:
            raise UserError(
                f"embed_dim ({width!r}) must be an integer from 1 to d_model ({self.d_model}), "
                f"or 0 for d_model"
            )
        if width == self.d_model:  # the same model as 0: one spelling, so configs compare equal
            object.__setattr__(self, "embed_dim", 0)
        if self.type_vocab_size < 0:
            raise UserError(f"type_vocab_size ({self.type_vocab_size}) must be >= 0")
        if not self.rope_base > 1.0:
            raise UserError(f"rope_base ({self.rope_base}) must be > 1")
        # Each direction needs exact buckets (num_buckets // 4 of them) and a log range beyond.
        if self.t5_num_buckets < 4:
            raise UserError(f"t5_num_buckets ({self.t5_num_buckets}) must be >= 4")
        if self.t5_max_distance <= self.t5_num_buckets // 4:
            raise UserError(
                f"t5_max_distance ({self.t5_max_distance}) must exceed t5_num_buckets // 4 "
                f"({self.t5_num_buckets // 4})"
            )
        choices = {"ffn": FFN, "norm": Norm, "attention_impl": AttentionImpl}
        for name, literal in choices.items():
            allowed = get_args(literal)
            if getattr(self, name) not in allowed:
                raise UserError(f"{name} ({getattr(self, name)!r}) must be one of {allowed}")

    @classmethod
    def from_flat(cls, values: Mapping[str, Any], **changes: Any) -> EncoderConfig:
        """The config from a flat mapping that also holds other keys (a checkpoint's
        hyperparameters, a CLI namespace as a dict): the other keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names}, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (safe for `weights_only` checkpoints and YAML)."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> EncoderConfig:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)
