"""The classifier as an ONNX graph, and its dynamically int8-quantized twin.

Inputs `input_ids` (B, T) int64 and `attention_mask` (B, T) int64 (1 = real token, the Hugging
Face convention), and for a model of text pairs `token_type_ids` (B, T) int64 (0 on
`[CLS] a [SEP]` and padding, 1 on `b [SEP]`); output `logits` (B, C) float32; B and T are
dynamic. A single-text model's graph has no token-type input. onnx, onnxruntime and onnxscript
(torch's ONNX exporter needs it) come with the optional `export` extra.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tscratch.errors import UserError, one_line
from tscratch.model import TransformerClassifier


def require_export_extra(feature: str) -> Any:
    """The onnxruntime module, once onnx, onnxscript and onnxruntime are known to import.

    Raises:
        UserError: one line naming `feature` and the install command, when one is missing.
    """
    try:
        for name in ("onnx", "onnxscript"):
            importlib.import_module(name)
        return importlib.import_module("onnxruntime")
    except ImportError:
        hint = 'pip install "tscratch[export]"'
        raise UserError(f"{feature} needs the export extra: {hint}") from None


class _Logits(nn.Module):
    """The classifier with plain tensors in and the logits tensor out, as ONNX graphs want."""

    def __init__(self, model: TransformerClassifier) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model(input_ids, attention_mask).logits  # (B, C)


class _PairLogits(_Logits):
    """`_Logits` of a text-pair model: token types are a third input."""

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
        return self.model(input_ids, attention_mask, token_type_ids=token_type_ids).logits


def export_onnx(
    model: TransformerClassifier, max_length: int, file: Path, token_types: bool = False
) -> None:
    """Write `model` to `file` as an ONNX graph (see the module doc); T may reach `max_length`.

    With `token_types` (a model of text pairs), the graph also takes `token_type_ids`.
    """
    # The explicit attention path: in ONNX the fused kernel would be decomposed into the same
    # MatMul/Softmax ops anyway, and the explicit path zeroes fully padded rows with plain ops
    # that every runtime supports. `attention_impl` changes no weight, so the state dict fits.
    config = model.config.replace(attention_impl="explicit")
    explicit = TransformerClassifier(config, model.head.proj.out_features, model.head.pooling)
    explicit.load_state_dict(model.state_dict())
    wrapper = (_PairLogits if token_types else _Logits)(explicit.float()).eval()
    # A padded example batch (B=2, T=8), so no size or mask gets baked in as a constant.
    T = min(8, max_length)
    input_ids = torch.zeros(2, T, dtype=torch.long)
    attention_mask = (torch.arange(T) < torch.tensor([[T], [T // 2 + 1]])).long()  # (2, T)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if token_types:  # the second half of each row is its second text
        inputs["token_type_ids"] = (torch.arange(T) >= T // 2).long().repeat(2, 1)  # (2, T)
    batch, length = torch.export.Dim("batch"), torch.export.Dim("sequence", max=max_length)
    axes = {0: batch, 1: length}
    # Quiet the exporter's notes that are not about this model: both inputs share the two Dims
    # on purpose, and torchvision's ops are of no use here.
    registry = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registry.level
    registry.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*axis name: \w+ will not be used")
            warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
            torch.onnx.export(
                wrapper,
                tuple(inputs.values()),
                str(file),
                input_names=list(inputs),
                output_names=["logits"],
                dynamic_shapes={name: axes for name in inputs},
                dynamo=True,  # torch's maintained exporter; the TorchScript one is deprecated
                external_data=False,  # one self-contained file
                verbose=False,
            )
    finally:
        registry.setLevel(level)


def quantize_onnx(source: Path, target: Path) -> None:
    """onnxruntime's dynamic quantization of `source`: int8 weights for the matrix products,
    activations quantized on the fly. Smaller and usually faster on CPUs, slightly less exact."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer suggests, on the root logger, a shape-inference pass that only matters for
    # static quantization; the hint would read like a problem with the export.
    hint = logging.Filter()
    hint.filter = lambda record: "pre-processing before quantization" not in record.getMessage()
    logging.getLogger().addFilter(hint)
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    finally:
        logging.getLogger().removeFilter(hint)


def onnx_forward(file: Path) -> Callable[..., Tensor]:
    """(input_ids (B, T), attention_mask (B, T)[, token_type_ids (B, T)]) -> float32 logits
    (B, C), on onnxruntime; token types are fed to a graph that takes them (a pair model's)."""
    onnxruntime = require_export_extra(f"running {file.name}")
    try:
        session = onnxruntime.InferenceSession(str(file), providers=["CPUExecutionProvider"])
        inputs = {i.name for i in session.get_inputs()}
        outputs = {o.name for o in session.get_outputs()}
    except Exception as error:  # onnxruntime's own errors (Fail, InvalidProtobuf, ...) and more
        raise UserError(
            f"{file} is not an ONNX model onnxruntime can run ({one_line(error)[:200]}); "
            "export the checkpoint again with --onnx"
        ) from None
    if not {"input_ids", "attention_mask"} <= inputs or "logits" not in outputs:
        raise UserError(
            f"{file} is not a tscratch classifier's graph (inputs {sorted(inputs)}, outputs "
            f"{sorted(outputs)}; expected input_ids and attention_mask in, logits out); export "
            "the checkpoint again with --onnx"
        )
    takes_types = "token_type_ids" in inputs

    def forward(
        input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> Tensor:
        feed = {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.long().numpy()}
        if takes_types:
            types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
            feed["token_type_ids"] = types.long().numpy()
        return torch.from_numpy(session.run(["logits"], feed)[0]).float()

    return forward
