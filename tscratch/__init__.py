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

__all__ = [
    "ClassifierOutput",
    "DecoderBlock",
    "EncoderBlock",
    "EncoderConfig",
    "EncoderOutput",
    "ExportedClassifier",
    "MultiHeadAttention",
    "Pretrained",
    "TransformerClassifier",
    "TransformerEncoder",
    "UserError",
    "load",
    "load_pretrained",
]
__version__ = "0.1.0"
