"""The precision a run takes when none is given: the device's rule, and the accelerator asked."""

from __future__ import annotations

import pytest
import torch

from tscratch.training import precision
from tscratch.training.throughput import matmul_dtype


@pytest.mark.parametrize(
    ("cuda", "accelerator", "native", "expected"),
    [
        (True, "auto", True, "16-mixed"),
        (True, "gpu", False, "16-mixed"),
        (True, "cpu", True, "bf16-mixed"),  # a GPU machine told to train on its CPU
        (True, "cpu", False, "32-true"),
        (False, "auto", True, "bf16-mixed"),
        (False, None, False, "32-true"),
    ],
)
def test_the_default_follows_the_device_that_will_train(
    monkeypatch, cuda, accelerator, native, expected
):
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    assert precision.default_precision(accelerator) == expected


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("bf16-mixed", "bfloat16"), ("bf16-true", "bfloat16"), ("16-mixed", "float16"),
     ("16-true", "float16"), ("32-true", "float32"), ("64-true", "float32")],
)  # fmt: skip
def test_the_mfu_peak_is_measured_in_the_dtype_the_matmuls_take(precision, dtype):
    assert matmul_dtype(precision) == getattr(torch, dtype)
