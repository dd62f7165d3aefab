"""A trained classifier as a plain folder that loads without Lightning or the training data.

`export` turns a tscratch fit checkpoint into::

    config.json          architecture, labels, max_length, format and tscratch versions, the
                         tokenizer's fingerprint (and, for a model of text pairs, its text
                         and text pair columns)
    model.safetensors    the `TransformerClassifier` weights
    tokenizer.json       the tokenizer the model was trained with
    README.md            a model card holding only what the checkpoint (and the caller) knows
    model.onnx           optional (`onnx=True`): logits (B, C) from input_ids, attention_mask
                         (and token_type_ids for a model of text pairs)
    model.int8.onnx      optional (`quantize=True`): the same graph with int8 linear weights
    training_config.yaml optional: the run's configuration as tscratch fit saved it

`load` reads the folder back as an `ExportedClassifier` running on PyTorch or onnxruntime, or
builds the same object from a checkpoint file (`opening.py`); `from_checkpoint` from a
checkpoint already in memory.

`load` checks the folder before it builds anything (see `folder.py`): config.json's `tokenizer`
(sha256, vocab_size, special_tokens) identifies the tokenizer.json the model goes with.

Files: `folder.py` (writing and reading the folder), `classifier.py` (`ExportedClassifier`),
`schema.py` (config.json's schema), `weights.py` (model.safetensors: header, values, the PyTorch
network), `fingerprint.py` (the tokenizer's fingerprint), `onnx_graph.py` (ONNX and int8),
`card.py` (the model card).
"""

from tscratch.export.folder import (
    CONFIG,
    FORMAT_VERSION,
    ONNX,
    ONNX_INT8,
    SINGLE_TEXT_VERSION,
    TOKENIZER,
    WEIGHTS,
    ExportedClassifier,
    classifier_from_checkpoint,
    existing,
    export,
    from_checkpoint,
    is_export,
    read_config,
)
from tscratch.export.onnx_graph import require_export_extra
from tscratch.export.opening import load

__all__ = [
    "CONFIG",
    "FORMAT_VERSION",
    "ONNX",
    "ONNX_INT8",
    "SINGLE_TEXT_VERSION",
    "TOKENIZER",
    "WEIGHTS",
    "ExportedClassifier",
    "classifier_from_checkpoint",
    "existing",
    "export",
    "from_checkpoint",
    "is_export",
    "load",
    "read_config",
    "require_export_extra",
]
