"""The schema of an exported folder's config.json, checked before anything is built from it.

A folder is untrusted input: its config.json may come from another tool, an older tscratch, a
careless edit or an attacker. `check_config` checks every field tscratch reads for its type and
range, and the relations between fields (`EncoderConfig`'s own checks: `d_model` divisible by
`num_heads`, `pad_id` inside the vocabulary, ...), so a bad value is one line naming the file,
the field and what was expected instead of a traceback deep in the model. Sizes are bounded
against the weights file later (`tscratch.export.weights`): nothing here allocates.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.export.digests import RECORD as WEIGHTS_RECORD
from tscratch.export.digests import WEIGHT_FILES
from tscratch.nn.positions import POSITIONS, position_length_limit

RECORDED_ENCODER_FIELDS = frozenset(
    {
        "vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_len", "dropout",
        "attention_dropout", "norm_first", "norm", "norm_eps", "position", "ffn", "pad_id",
        "bias", "scale_embeddings", "embedding_norm", "type_vocab_size", "attention_impl",
        "rope_base", "t5_num_buckets", "t5_max_distance",
    }
)  # fmt: skip
"""The encoder fields every folder with a tokenizer fingerprint holds: export has written them
all since it wrote fingerprints, so a missing one is damage, not age (its default might be
another model). An `EncoderConfig` field added later is not listed: read with its default when
absent. A folder without a fingerprint (exported earlier) needs only `vocab_size`, as before."""

_ENCODER_HINTS = get_type_hints(EncoderConfig)
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_config(config: Any, file: Path) -> EncoderConfig:
    """The encoder of a config.json already parsed, after checking every field `load` reads.

    Args:
        config: the parsed JSON (its format and format_version already checked).
        file: the config.json, for the messages.

    Raises:
        UserError: one line naming the file, the field, its value and what was expected.
    """
    encoder = _encoder(config.get("encoder"), file, "tokenizer" in config)
    _optional(config, "tscratch_version", str, "a string", file)
    num_classes = _required(config, "num_classes", file)
    if not _is_int(num_classes) or num_classes < 2:
        raise _bad(file, "num_classes", num_classes, "an integer of at least 2")
    labels = _required(config, "label_names", file)
    if not (isinstance(labels, list) and all(isinstance(name, str) for name in labels)):
        raise _bad(file, "label_names", labels, "a list of strings")
    if len(labels) != num_classes or len(set(labels)) != len(labels):
        raise _bad(file, "label_names", labels, f"{num_classes} distinct names (num_classes)")
    pooling = _required(config, "pooling", file)
    if pooling not in ("cls", "mean"):
        raise _bad(file, "pooling", pooling, "'cls' or 'mean'")
    _check_max_length(_required(config, "max_length", file), encoder, file)
    _check_thresholds(config, num_classes, file)
    temperature = config.get("temperature", 1.0)
    if not (_is_number(temperature) and 1e-3 <= temperature <= 1e3):  # logits / T stay finite
        raise _bad(file, "temperature", temperature, "a number from 0.001 to 1000")
    _check_long_text(config, file)
    if "text_pair_column" in config:
        _optional(config, "text_pair_column", str, "a column name", file)
        _optional(config, "text_column", (str, type(None)), "a column name or null", file)
        if encoder.type_vocab_size < 2:
            raise _bad(
                file, "encoder.type_vocab_size", encoder.type_vocab_size,
                "at least 2 for a model of text pairs (text_pair_column is set)",
            )  # fmt: skip
    if "tokenizer" in config:
        _check_fingerprint(config["tokenizer"], file)
    if WEIGHTS_RECORD in config:
        _check_weight_digests(config[WEIGHTS_RECORD], file)
    return encoder


def _encoder(values: Any, file: Path, fingerprinted: bool) -> EncoderConfig:
    if not isinstance(values, dict):
        raise _bad(file, "encoder", values, "an object of the encoder's fields")
    names = {f.name for f in dataclasses.fields(EncoderConfig)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UserError(
            f"{file}: encoder.{unknown[0]} is not a field of this tscratch's encoder; the folder "
            "is from a newer tscratch (upgrade tscratch) or was edited"
        )
    required = RECORDED_ENCODER_FIELDS if fingerprinted else {"vocab_size"}
    missing = sorted(required - set(values))
    if missing:
        raise UserError(
            f"{file}: encoder.{missing[0]} is missing; export the model again (every field the "
            "model was built with must be recorded)"
        )
    for name, value in values.items():
        _check_type(f"encoder.{name}", value, _ENCODER_HINTS[name], file)
    try:
        return EncoderConfig(**values)
    except UserError as error:  # its messages start with the field's name
        raise UserError(f"{file}: encoder.{error}") from None


def _check_type(name: str, value: Any, hint: Any, file: Path) -> None:
    if hint is bool:
        ok, expected = isinstance(value, bool), "true or false"
    elif hint is int:
        ok, expected = _is_int(value), "an integer"
    elif hint is float:
        ok, expected = _is_number(value), "a finite number"
    elif get_origin(hint) is Literal:
        ok, expected = (
            isinstance(value, str) and value in get_args(hint),
            f"one of {get_args(hint)}",
        )
    else:  # `position`: a name in the registry
        ok, expected = isinstance(value, str) and value in POSITIONS, f"one of {tuple(POSITIONS)}"
    if not ok:
        raise _bad(file, name, value, expected)


def _check_max_length(value: Any, encoder: EncoderConfig, file: Path) -> None:
    if not _is_int(value) or value < 1:
        raise _bad(file, "max_length", value, "a positive integer")
    limit = position_length_limit(encoder)
    if limit is not None and value > limit:
        raise _bad(
            file, "max_length", value,
            f"at most encoder.max_len ({limit}), the length of its {encoder.position} "
            "position table",
        )  # fmt: skip


def _check_long_text(config: dict[str, Any], file: Path) -> None:
    """A model trained on windows reads long texts in windows: `long_text` "chunk" (or
    "truncate") and a `stride` below `max_length` (the tokenizer's room is checked when it is
    read: `ExportedClassifier`), single texts only."""
    long_text = config.get("long_text", "truncate")
    if long_text not in ("truncate", "chunk"):
        raise _bad(file, "long_text", long_text, "'truncate' or 'chunk'")
    if "stride" in config and long_text != "chunk":
        raise _bad(file, "stride", config["stride"], "absent unless long_text is 'chunk'")
    if long_text == "chunk":
        stride, max_length = _required(config, "stride", file), config["max_length"]
        if not _is_int(stride) or not 0 <= stride < max_length:
            raise _bad(file, "stride", stride, f"an integer in [0, {max_length}) (max_length)")
        if "text_pair_column" in config:
            raise _bad(file, "long_text", long_text, "'truncate' for a model of text pairs")


def _check_thresholds(config: dict[str, Any], num_classes: int, file: Path) -> None:
    """A multi-label model has `multi_label: true` and one threshold in [0, 1] per label."""
    if "multi_label" not in config and "thresholds" not in config:
        return
    if config.get("multi_label") is not True:
        raise _bad(file, "multi_label", config.get("multi_label"), "true beside thresholds")
    thresholds = config.get("thresholds")
    if not (
        isinstance(thresholds, list)
        and len(thresholds) == num_classes
        and all(_is_number(t) and 0 <= t <= 1 for t in thresholds)
    ):
        raise _bad(
            file, "thresholds", thresholds, f"{num_classes} numbers in [0, 1], one per label"
        )


def _check_fingerprint(recorded: Any, file: Path) -> None:
    """The tokenizer fingerprint export records (`tscratch.export.fingerprint`)."""
    if not isinstance(recorded, dict):
        raise _bad(file, "tokenizer", recorded, "an object (sha256, vocab_size, special_tokens)")
    sha = recorded.get("sha256")
    if not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
        raise _bad(file, "tokenizer.sha256", sha, "64 lowercase hex digits")
    size = recorded.get("vocab_size")
    if not _is_int(size) or size < 1:
        raise _bad(file, "tokenizer.vocab_size", size, "a positive integer")
    specials = recorded.get("special_tokens")
    if not (
        isinstance(specials, dict) and all(_is_int(i) and 0 <= i < size for i in specials.values())
    ):
        raise _bad(
            file, "tokenizer.special_tokens", specials,
            f"an object of token -> id, each id in [0, {size})",
        )  # fmt: skip


def _check_weight_digests(recorded: Any, file: Path) -> None:
    """The sha256 of each weight file export wrote (`tscratch.export.digests`)."""
    if not isinstance(recorded, dict):
        raise _bad(file, WEIGHTS_RECORD, recorded, "an object of weight file -> sha256")
    for name, sha in recorded.items():
        if name not in WEIGHT_FILES:
            raise _bad(file, f"{WEIGHTS_RECORD}.{name}", sha, f"one of the files {WEIGHT_FILES}")
        if not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
            raise _bad(file, f"{WEIGHTS_RECORD}.{name}", sha, "64 lowercase hex digits")


def _required(config: dict[str, Any], name: str, file: Path) -> Any:
    if name not in config:
        raise UserError(f"{file}: {name} is missing; export the model again")
    return config[name]


def _optional(
    config: dict[str, Any], name: str, kind: type | tuple[type, ...], expected: str, file: Path
) -> None:
    if name in config and not isinstance(config[name], kind):
        raise _bad(file, name, config[name], expected)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """An int or a finite float (JSON's NaN and Infinity are not numbers here)."""
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _bad(file: Path, name: str, value: Any, expected: str) -> UserError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
    return UserError(f"{file}: {name} ({shown}) must be {expected}")
