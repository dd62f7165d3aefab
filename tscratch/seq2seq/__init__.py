"""The encoder-decoder: `Seq2SeqConfig` (config.py), `TransformerSeq2Seq` and its decoder stack
(model.py), greedy and beam search with the key/value cache (tscratch generate). Plain PyTorch,
built from the parts in tscratch.nn and the encoder in tscratch.model."""

from tscratch.seq2seq.config import Seq2SeqConfig
from tscratch.seq2seq.generate import (
    GenerationOutput,
    beam_search,
    generate,
    greedy_search,
    length_penalty,
)
from tscratch.seq2seq.model import (
    DecoderCache,
    DecoderOutput,
    Seq2SeqOutput,
    TransformerDecoder,
    TransformerSeq2Seq,
)

__all__ = [
    "DecoderCache",
    "DecoderOutput",
    "GenerationOutput",
    "Seq2SeqConfig",
    "Seq2SeqOutput",
    "TransformerDecoder",
    "TransformerSeq2Seq",
    "beam_search",
    "generate",
    "greedy_search",
    "length_penalty",
]
