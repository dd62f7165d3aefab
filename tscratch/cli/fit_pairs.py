"""tscratch fit's side of text pairs: a model that reads pairs needs token types 0 and 1.

With `--data.text_pair_column`, the data gives each batch `token_type_ids` (0 on `[CLS] a [SEP]`,
1 on `b [SEP]`), and the encoder adds a learned embedding per type only when its
`type_vocab_size` holds both. A model trained from scratch gets the table (2 types) set for it;
a pretrained source brings its own, and one without room for two types is refused.
"""

from __future__ import annotations

import logging

from jsonargparse import Namespace

from tscratch.errors import UserError

log = logging.getLogger("tscratch")
PAIR_TYPES = 2  # token types 0 (first text) and 1 (second text)


def settle_token_types(config: Namespace) -> None:
    """Give a text-pair run a model with at least two token types (after init_from's
    architecture is adopted into ``config.model``); single-text runs are left as they are."""
    pair_column = config.data.get("text_pair_column")
    if pair_column is None:
        return
    types = config.model.type_vocab_size
    if types >= PAIR_TYPES:
        return
    if config.model.get("init_from") is not None:
        raise UserError(
            f"--data.text_pair_column {pair_column} needs {PAIR_TYPES} token types, but "
            f"--model.init_from {config.model.init_from} has type_vocab_size {types}; pick a "
            f"source with token types (e.g. minilm or a BERT) or drop --data.text_pair_column"
        )
    config.model.type_vocab_size = PAIR_TYPES
    log.info(
        "text pairs (--data.text_pair_column %s): model.type_vocab_size set to %d",
        pair_column,
        PAIR_TYPES,
    )
