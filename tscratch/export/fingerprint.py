"""The tokenizer of an exported folder: fingerprinted at export, checked against it at load.

Another model's tokenizer.json loads without complaint and gives ids the model never learned:
wrong labels, or an index error deep in the embedding. So `export` records in config.json what
identifies the tokenizer it wrote (`tokenizer_fingerprint`): the sha256 of tokenizer.json's
bytes, its vocabulary size and the ids of its special tokens. `read_tokenizer` checks them, and,
for every folder (those exported before fingerprints too), the vocabulary size against the
model's embedding (`encoder.vocab_size`), `[PAD]` against `encoder.pad_id`, and that a probe
text encodes to ids inside the vocabulary.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from tscratch.config import EncoderConfig
from tscratch.errors import UserError, one_line

PROBE = "A probe: 12 words, déjà vu; [CLS] ünïcode 東京 ✓"
"""Text `read_tokenizer` encodes once, to catch tokenizers that load but cannot encode."""
_PUT_BACK = "put back the tokenizer.json exported with the model"


def tokenizer_fingerprint(tokenizer_json: str) -> dict[str, Any]:
    """What config.json records of the tokenizer.json written from `tokenizer_json`."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    return {
        "sha256": hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest(),
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "special_tokens": special_tokens(tokenizer),
    }


def special_tokens(tokenizer: Tokenizer) -> dict[str, int]:
    """Special token -> id, in id order (`[PAD]`, `[UNK]`, `[CLS]`, `[SEP]` for tscratch's)."""
    added = sorted(tokenizer.get_added_tokens_decoder().items())
    return {token.content: token_id for token_id, token in added if token.special}


def read_tokenizer(file: Path, config: dict[str, Any], encoder: EncoderConfig) -> Tokenizer:
    """The folder's tokenizer, refused with one line unless it is the model's.

    Args:
        file: the folder's tokenizer.json.
        config: its config.json, already checked (`tscratch.export.schema`).
        encoder: the model's encoder config.
    """
    try:
        data = file.read_bytes()
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as error:  # the tokenizers library raises plain Exception
        raise UserError(
            f"{file} is not a tokenizer file ({one_line(error)[:200]}); {_PUT_BACK}"
        ) from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    recorded = config.get("tokenizer")
    if recorded is not None:
        _check_fingerprint(file, data, tokenizer, size, recorded)
    if size != encoder.vocab_size:
        raise UserError(
            f"{file} has {size:,} tokens but the model's embedding has {encoder.vocab_size:,} "
            f"(encoder.vocab_size in config.json): it is another model's tokenizer; {_PUT_BACK}"
        )
    pad_id = tokenizer.token_to_id("[PAD]")
    if pad_id != encoder.pad_id:
        raise UserError(
            f"{file}: [PAD] has id {pad_id}, but the model pads with encoder.pad_id "
            f"{encoder.pad_id} (config.json); {_PUT_BACK}"
        )
    try:
        ids = tokenizer.encode(PROBE).ids
    except Exception as error:  # as above
        raise UserError(
            f"{file} cannot encode text ({one_line(error)[:200]}); {_PUT_BACK}"
        ) from None
    if any(i >= size for i in ids):
        raise UserError(f"{file} gives token ids beyond its {size:,} tokens; {_PUT_BACK}")
    return tokenizer


def _check_fingerprint(
    file: Path, data: bytes, tokenizer: Tokenizer, size: int, recorded: dict[str, Any]
) -> None:
    """The tokenizer against the fingerprint config.json records (checked by the schema)."""
    if size != recorded["vocab_size"]:
        raise UserError(
            f"{file} has {size:,} tokens but config.json's tokenizer.vocab_size records "
            f"{recorded['vocab_size']:,}: it is another model's tokenizer; {_PUT_BACK}"
        )
    found = special_tokens(tokenizer)
    if found != recorded["special_tokens"]:
        raise UserError(
            f"{file} has special tokens {str(found)[:200]}, config.json's "
            f"tokenizer.special_tokens records {str(recorded['special_tokens'])[:200]}: it is "
            f"another model's tokenizer; {_PUT_BACK}"
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != recorded["sha256"]:
        raise UserError(
            f"{file} is not the tokenizer this model was exported with (its sha256 is "
            f"{digest[:16]}..., config.json's tokenizer.sha256 records "
            f"{recorded['sha256'][:16]}...); {_PUT_BACK}"
        )
