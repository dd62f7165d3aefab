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
from tscratch.version import __version__

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
    "__version__",
    "load",
    "load_pretrained",
]
