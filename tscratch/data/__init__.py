"""Data: sources and splits, the tokenizer, length-bucketed batches, the LightningDataModule.

Imports neither the model nor training: a batch is a dict of tensors in the Hugging Face layout.
`tscratch.data.encoding` (tokens to padded batches) needs neither Lightning nor datasets; the
data module is imported on first use, so importing the package stays light.
"""

from tscratch.data.encoding import encode_texts, pad_batch

__all__ = ["TextClassificationData", "encode_texts", "pad_batch"]


def __getattr__(name: str):
    if name == "TextClassificationData":
        from tscratch.data.classification import TextClassificationData

        return TextClassificationData
    raise AttributeError(f"module 'tscratch.data' has no attribute {name!r}")
