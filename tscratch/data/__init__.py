"""Data: sources and splits, the tokenizer, length-bucketed batches, the LightningDataModule.

Imports neither the model nor training: a batch is a dict of tensors in the Hugging Face layout.
Everything here is imported on first use, so importing the package (or a plain-Python module of
it, such as `tscratch.data.files` or `tscratch.data.columns`) imports neither torch nor
`datasets`: a command can check its data files before it waits for them.
"""

from typing import Any

__all__ = ["TextClassificationData", "encode_texts", "pad_batch"]


def __getattr__(name: str) -> Any:
    if name == "TextClassificationData":
        from tscratch.data.classification import TextClassificationData

        return TextClassificationData
    if name in ("encode_texts", "pad_batch"):
        from tscratch.data import encoding

        return getattr(encoding, name)
    raise AttributeError(f"module 'tscratch.data' has no attribute {name!r}")
