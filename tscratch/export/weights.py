"""model.safetensors as untrusted input, and the PyTorch network built from it (`torch_forward`):
its header checked against config.json before the model is built, its values checked to be
finite after they are read.

The header (tensor names, dtypes and shapes; `safe_open` reads it without the tensors, and
refuses a file shorter or longer than its header says) bounds every size in config.json, so a
crafted size cannot allocate terabytes or loop for hours while the model is built: no size may
exceed the numbers the file holds, nor `num_layers` its tensors. Only then is the model built,
on the meta device (shapes, no memory), and its state_dict compared with the header: a
missing, extra, wrongly shaped or non-float tensor is one line naming it.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor

from tscratch.config import EncoderConfig
from tscratch.errors import UserError, one_line
from tscratch.export.classifier import Forward
from tscratch.model import TransformerClassifier
from tscratch.nn.positions import position_length_limit

Header = dict[str, tuple[str, tuple[int, ...]]]
"""Tensor name -> (safetensors dtype such as "F32", shape)."""
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
ID_DTYPES = ("I64",)
"""The dtype of a table of token ids the model carries (`word_char_ids`)."""
TABLE_FLOOR = 1 << 22
"""Numbers a position table (max_len x d_model) may hold beyond what the file holds: the
sinusoidal table is recomputed, not saved, so only this bound keeps a crafted max_len from
filling memory (4M numbers: max_len 8192 at d_model 512)."""


def torch_forward(
    file: Path, config: dict, encoder: EncoderConfig, config_file: Path, device: str
) -> Forward:
    """The network of `file` as a `Forward`, built only after its header matches config.json.

    Args:
        file: the folder's model.safetensors.
        config: its config.json, already checked (`tscratch.export.schema`).
        encoder: its encoder.
        config_file: the config.json, for the messages.
        device: where the network runs.
    """
    check_header(read_header(file), config, encoder, (config_file, file))
    state = read_weights(file, encoder.vocab_size)  # finite, or one line naming the tensor
    model = TransformerClassifier(encoder, config["num_classes"], pooling=config["pooling"])
    model.load_state_dict(state)  # names and shapes checked: strict loading cannot fail
    del state
    return forward_of(model.to(device).eval(), device)


def forward_of(model: TransformerClassifier, device: str) -> Forward:
    """`model` (on `device`) as a `Forward`: inputs moved there, float32 logits back on the CPU."""

    @torch.inference_mode()
    def forward(
        input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> Tensor:
        types = None if token_type_ids is None else token_type_ids.to(device)
        out = model(input_ids.to(device), attention_mask.to(device), token_type_ids=types)
        return out.logits.float().cpu()

    forward.module = model  # type: ignore[attr-defined]  # ExportedClassifier.module
    return forward


def read_header(file: Path) -> Header:
    """Names, dtypes and shapes of `file`'s tensors, without reading the tensors."""
    try:
        with safe_open(str(file), framework="pt") as f:
            slices = {name: f.get_slice(name) for name in f.keys()}  # noqa: SIM118 - not a dict
            return {n: (s.get_dtype(), tuple(s.get_shape())) for n, s in slices.items()}
    except (SafetensorError, OSError) as error:
        raise UserError(
            f"{file} is truncated or not a safetensors file ({one_line(error)}); export the "
            "model again"
        ) from None


def check_header(
    header: Header, config: dict, encoder: EncoderConfig, files: tuple[Path, Path]
) -> None:
    """Refuse a header that is not the weights of the model config.json describes.

    Args:
        header: `read_header` of the weights file.
        config: the folder's config.json, already checked (`tscratch.export.schema`).
        encoder: its encoder.
        files: (config.json, model.safetensors), for the messages.
    """
    config_file, file = files
    _check_sizes(header, config, encoder, files)
    try:
        with torch.device("meta"):  # shapes only: no memory, no init cost
            model = TransformerClassifier(encoder, config["num_classes"], config["pooling"])
    except UserError as error:  # a scheme that cannot work with the config
        raise UserError(f"{config_file}: encoder.{error}") from None
    state = model.state_dict()
    expected = {name: tuple(t.shape) for name, t in state.items()}
    for name, shape in expected.items():
        if name not in header:
            raise UserError(
                f"{file}: no tensor {name} (shape {shape}), which {config_file.name} implies; "
                "the file is damaged or of another model"
            )
        dtype, got = header[name]
        if got != shape:
            raise UserError(
                f"{file}: tensor {name} has shape {got}, {config_file.name} implies {shape}"
            )
        allowed = FLOAT_DTYPES if state[name].is_floating_point() else ID_DTYPES
        if dtype not in allowed:
            raise UserError(f"{file}: tensor {name} is {dtype}, expected one of {allowed}")
    extra = sorted(set(header) - set(expected))
    if extra:
        raise UserError(
            f"{file}: tensor {extra[0]} is not one of the model {config_file.name} describes "
            f"({len(extra)} such); the file is of another model"
        )


def read_weights(file: Path, vocab_size: int | None = None) -> dict[str, Tensor]:
    """The tensors of a file whose header `check_header` passed, each checked to be finite, and
    each table of token ids to hold ids of the vocabulary when `vocab_size` is given."""
    state = load_file(str(file))
    for name, tensor in state.items():
        if vocab_size is not None and not tensor.is_floating_point():
            bad = int(((tensor < 0) | (tensor >= vocab_size)).sum())
            if bad:
                raise UserError(
                    f"{file}: tensor {name} holds {bad:,} ids outside the vocabulary [0, "
                    f"{vocab_size:,}); the weights are damaged: export a good checkpoint again"
                )
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise UserError(
                f"{file}: tensor {name} holds {bad:,} NaN or infinite values (of "
                f"{tensor.numel():,}); the weights are damaged (a diverged run?): export a good "
                "checkpoint again"
            )
    return state


def _check_sizes(
    header: Header, config: dict, encoder: EncoderConfig, files: tuple[Path, Path]
) -> None:
    """Every size no larger than the file can hold, before anything is built from the sizes."""
    config_file, file = files
    total = sum(math.prod(shape) for _, shape in header.values())
    holds = f"{file.name} holds ({total:,} numbers in {len(header)} tensors)"
    sizes = {f"encoder.{name}": getattr(encoder, name) for name in _SIZES}
    for name, value in {**sizes, "num_classes": config["num_classes"]}.items():
        if value > total:
            raise UserError(f"{config_file}: {name} ({value:,}) is more than {holds}")
    if encoder.num_layers > len(header):
        raise UserError(
            f"{config_file}: encoder.num_layers ({encoder.num_layers:,}) is more than {holds}"
        )
    table = encoder.max_len * encoder.d_model
    if position_length_limit(encoder) is not None and table > max(total, TABLE_FLOOR):
        raise UserError(
            f"{config_file}: encoder.max_len ({encoder.max_len:,}) makes a position table of "
            f"{table:,} numbers, more than {holds}"
        )


_SIZES = ("vocab_size", "d_model", "d_ff", "type_vocab_size", "bigram_buckets", "t5_num_buckets")
