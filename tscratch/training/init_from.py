"""Where a fine-tuning run's encoder comes from: `--model.init_from SOURCE`.

SOURCE is a tscratch checkpoint (`.ckpt` written by tscratch fit or tscratch pretrain), a folder
written by tscratch export, a BERT-family folder (config.json, weights, tokenizer), `minilm` (the
packaged all-MiniLM-L6-v2) or a Hugging Face hub id when online. Whatever it is, it becomes one
`Pretrained`: the encoder's config, its weights and its tokenizer. The classification head is
always new.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from torch import nn

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.export import CONFIG, TOKENIZER, WEIGHTS, existing, is_export, read_config
from tscratch.export.digests import check_digest
from tscratch.export.fingerprint import read_tokenizer
from tscratch.export.weights import check_header, read_header, read_weights
from tscratch.pretrained import Pretrained, load_pretrained
from tscratch.training.checkpointing import read_checkpoint

ENCODER_PREFIX = "model.encoder."  # the encoder's keys inside a task checkpoint's state_dict


def resolve_init_source(source: str, flag: str = "--model.init_from") -> Pretrained:
    """Read SOURCE once: a `.ckpt` file written by tscratch, else a pretrained folder/name;
    ``flag`` is the option that named it, for the errors."""
    path = Path(source).expanduser()
    if path.suffix == ".ckpt" or path.is_file():
        return _from_checkpoint(path, flag)
    if is_export(path):
        return _from_export(path)
    return load_pretrained(source)


def _from_export(folder: Path) -> Pretrained:
    """The encoder of a folder written by tscratch export (its classification head is left),
    checked as `tscratch.load` checks it: config.json, the weights' header, values and sha256,
    the tokenizer."""
    config = read_config(folder)
    encoder = EncoderConfig(**config["encoder"])
    file = existing(folder / WEIGHTS)
    check_header(read_header(file), config, encoder, (folder / CONFIG, file))
    prefix = "encoder."
    state = {
        k.removeprefix(prefix): v
        for k, v in read_weights(file, encoder.vocab_size).items()
        if k.startswith(prefix)
    }
    check_digest(file, config)  # weights changed since export are refused, as `load` does
    tokenizer = read_tokenizer(existing(folder / TOKENIZER), config, encoder)
    return Pretrained(config=encoder, encoder_state=state, tokenizer=tokenizer, source=str(folder))


def _from_checkpoint(path: Path, flag: str) -> Pretrained:
    checkpoint = read_checkpoint(path)  # one line if missing, torn or not data-only
    hparams = checkpoint.get("hyper_parameters") or {}
    config = EncoderConfig.from_flat(hparams)
    state = {
        k.removeprefix(ENCODER_PREFIX): v
        for k, v in checkpoint["state_dict"].items()
        if k.startswith(ENCODER_PREFIX)
    }
    if not state or checkpoint.get("tokenizer_json") is None:
        raise UserError(
            f"{flag} {path}: no encoder weights or tokenizer in it; pass a checkpoint "
            "written by tscratch's tscratch fit, a BERT folder or 'minilm'"
        )
    tokenizer = Tokenizer.from_str(checkpoint["tokenizer_json"])
    return Pretrained(config=config, encoder_state=state, tokenizer=tokenizer, source=str(path))


def adopt_architecture(
    source: Pretrained, asked: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The architecture fields a run takes from SOURCE, refusing flags that contradict it.

    Args:
        source: the pretrained encoder.
        asked: this run's model arguments (after config files and flags).
        defaults: the same arguments as the parser's defaults: a field the user left at its
            default (or at `auto`) takes the source's value silently; one set to another value
            is an error.

    Returns:
        field -> value for every architecture field (every config field except the runtime
        ones, which stay the user's, and `vocab_size`/`pad_id`, which the data links from the
        source's tokenizer).
    """
    skip = EncoderConfig.RUNTIME_FIELDS | {"vocab_size", "pad_id"}
    adopted, clashes = {}, []
    for field in dataclasses.fields(source.config):
        if field.name in skip or field.name not in asked:
            continue
        value = getattr(source.config, field.name)
        left = asked[field.name] in (defaults.get(field.name), "auto")  # to the source
        if not left and asked[field.name] != value:
            clashes.append(f"{field.name}={asked[field.name]!r} (it has {value!r})")
        adopted[field.name] = value
    if clashes:
        raise UserError(
            f"--model.init_from {source.source} fixes the architecture; this run asks "
            f"{', '.join(clashes)}; drop those --model options"
        )
    return adopted


def load_encoder(encoder: nn.Module, source: Pretrained) -> None:
    """Copy SOURCE's weights into `encoder` (a `TransformerEncoder` of the same config)."""
    differ = [
        f"{f.name}: {getattr(source.config, f.name)!r} vs {getattr(encoder.config, f.name)!r}"
        for f in dataclasses.fields(source.config)
        if f.name not in EncoderConfig.RUNTIME_FIELDS
        and getattr(source.config, f.name) != getattr(encoder.config, f.name, None)
    ]
    if differ:
        raise UserError(
            f"init_from {source.source} does not fit this model ({'; '.join(differ)}); build "
            "the model with the source's architecture (the CLI does this for you)"
        )
    encoder.load_state_dict(source.encoder_state)
