"""Data: sources and splits, the tokenizer, length-bucketed batches, the LightningDataModule.

Imports neither the model nor training: a batch is a dict of tensors in the Hugging Face layout.
"""

from tscratch.data.datamodule import TextClassificationData, encode_texts, pad_batch

__all__ = ["TextClassificationData", "encode_texts", "pad_batch"]
