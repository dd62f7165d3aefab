"""tscratch: a Transformer encoder written from scratch in PyTorch, trained with Lightning."""

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.export import ExportedClassifier, load
from tscratch.model import (
    ClassifierOutput,
    EncoderOutput,
    TransformerClassifier,
    TransformerEncoder,
)
from tscratch.nn import DecoderBlock, EncoderBlock, MultiHeadAttention
from tscratch.pretrained import Pretrained, load_pretrained
from tscratch.seq2seq import (
    GenerationOutput,
    Seq2SeqConfig,
    Seq2SeqOutput,
    TransformerSeq2Seq,
    beam_search,
    generate,
    greedy_search,
)
from tscratch.version import __version__

__all__ = [
    "ClassifierOutput",
    "DecoderBlock",
    "EncoderBlock",
    "EncoderConfig",
    "EncoderOutput",
    "ExportedClassifier",
    "GenerationOutput",
    "MultiHeadAttention",
    "Pretrained",
    "Seq2SeqConfig",
    "Seq2SeqOutput",
    "TransformerClassifier",
    "TransformerEncoder",
    "TransformerSeq2Seq",
    "UserError",
    "__version__",
    "beam_search",
    "generate",
    "greedy_search",
    "load",
    "load_pretrained",
]
