"""tscratch: a Transformer encoder written from scratch in PyTorch, trained with Lightning.

The public API below is imported on first use (PEP 562), so `import tscratch` and the
`tscratch` command's `--help` cost nothing until a name is touched: `tscratch.load` imports the
export code (torch, tokenizers, safetensors), never Lightning; `tscratch.fit` imports Lightning
only when called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tscratch.version import __version__

# Each public name and the module that defines it.
_EXPORTS = {
    "EncoderConfig": "tscratch.config",
    "UserError": "tscratch.errors",
    "ExportedClassifier": "tscratch.export",
    "load": "tscratch.export",
    "fit": "tscratch.cli.fit_api",
    "ClassifierOutput": "tscratch.model",
    "EncoderOutput": "tscratch.model",
    "TransformerClassifier": "tscratch.model",
    "TransformerEncoder": "tscratch.model",
    "DecoderBlock": "tscratch.nn",
    "EncoderBlock": "tscratch.nn",
    "MultiHeadAttention": "tscratch.nn",
    "Pretrained": "tscratch.pretrained",
    "load_pretrained": "tscratch.pretrained",
    "GenerationOutput": "tscratch.seq2seq",
    "Seq2SeqConfig": "tscratch.seq2seq",
    "Seq2SeqOutput": "tscratch.seq2seq",
    "TransformerSeq2Seq": "tscratch.seq2seq",
    "beam_search": "tscratch.seq2seq",
    "generate": "tscratch.seq2seq",
    "greedy_search": "tscratch.seq2seq",
}

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
    "fit",
    "generate",
    "greedy_search",
    "load",
    "load_pretrained",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tscratch' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:  # what type checkers and IDEs see
    from tscratch.cli.fit_api import fit
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
