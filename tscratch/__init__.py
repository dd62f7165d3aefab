"""tscratch: a Transformer encoder written from scratch in PyTorch, trained with Lightning."""

from tscratch.config import EncoderConfig
from tscratch.model import (
    ClassifierOutput,
    EncoderOutput,
    TransformerClassifier,
    TransformerEncoder,
)
from tscratch.nn import DecoderBlock, EncoderBlock, MultiHeadAttention

__all__ = [
    "ClassifierOutput",
    "DecoderBlock",
    "EncoderBlock",
    "EncoderConfig",
    "EncoderOutput",
    "MultiHeadAttention",
    "TransformerClassifier",
    "TransformerEncoder",
]
__version__ = "0.1.0"
