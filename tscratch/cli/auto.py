"""fit.py's `auto` settings: read the training split, apply `tscratch.training.recipe`'s rules,
write the values into the parsed config (so the run's config.yaml records numbers) and print
what was chosen and why."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from jsonargparse import Namespace

from tscratch.config import EncoderConfig
from tscratch.data.sources import column
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits
from tscratch.data.tokenizer import load_tokenizer
from tscratch.nn.positions import position_length_limit
from tscratch.training import recipe

log = logging.getLogger("tscratch")


def wanted_options(config: Namespace, options: Sequence[str]) -> list[str]:
    """The ``options`` ("group.name") this run leaves to the data: those set to `auto`, and
    `trainer.max_epochs` when neither it nor `max_steps` is set (Lightning would run 1000)."""
    wanted = []
    for option in options:
        group, name = option.split(".")
        if config[group][name] == recipe.AUTO:
            wanted.append(option)
        elif option == "trainer.max_epochs":
            trainer = config.trainer
            if trainer.max_epochs is None and trainer.max_steps in (None, -1):
                wanted.append(option)
    return wanted


def choose_auto_settings(config: Namespace, options: Sequence[str]) -> list[recipe.Choice]:
    """Fill in ``config``'s wanted ``options`` from a profile of the training split, log the
    choices and return them (none when nothing is left to the data)."""
    wanted = wanted_options(config, options)
    if not wanted:
        return []
    data = config.data
    splits = load_labeled_splits(**{k: data[k] for k in SPLIT_ARGS}, cache_dir=data.cache_dir)
    profile = recipe.DataProfile.of(column(splits.train, "text"), len(splits.label_names))
    encoder = EncoderConfig.from_flat(config.model.as_dict(), vocab_size=2)  # sizes unused here
    if "data.vocab_size" in wanted and data.tokenizer is not None:  # given, or init_from's
        wanted.remove("data.vocab_size")
        data.vocab_size = load_tokenizer(data.tokenizer).get_vocab_size()
    given = None if "data.max_length" in wanted else data.max_length
    choices = recipe.choose(profile, wanted, position_length_limit(encoder), given)
    for choice in choices:
        group, name = choice.option.split(".")
        config[group][name] = choice.value
    if choices:
        log.info(recipe.describe(profile, choices))
    return choices
