"""tscratch fit's `auto` settings: read the training split, apply `tscratch.training.recipe`'s
rules, write the values into the parsed config (so the run's config.yaml records numbers) and print
what was chosen and why. `model.class_weights auto` is resolved here too, from the training
split's label counts (`tscratch.training.losses.inverse_frequency`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from jsonargparse import Namespace

from tscratch.config import EncoderConfig
from tscratch.data.sources import LabeledSplits, column
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits
from tscratch.data.tokenizer import load_tokenizer
from tscratch.nn.positions import position_length_limit
from tscratch.training import recipe
from tscratch.training.losses import inverse_frequency
from tscratch.training.multilabel import check_multilabel_options
from tscratch.training.recipe import estimate_counts

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
    if "model.class_weights" in wanted:
        wanted.remove("model.class_weights")
        config.model.class_weights = auto_class_weights(splits)
        if not wanted:
            return []
    profile = training_profile(splits, data.get("text_pair_column") is not None)
    # Only the position table's length limit is read: sizes and `auto` fields take defaults.
    asked = {k: v for k, v in config.model.as_dict().items() if v != recipe.AUTO}
    encoder = EncoderConfig.from_flat(asked, vocab_size=2)
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


def training_profile(splits: LabeledSplits, pairs: bool = False) -> recipe.DataProfile:
    """The recipe's profile of the training split. With ``pairs``, a row is measured as the
    model reads it, ``[CLS] a [SEP] b [SEP]``: both texts and three special tokens."""
    texts, classes = column(splits.train, "text"), len(splits.label_names)
    if not pairs:
        return recipe.DataProfile.of(texts, classes)
    # Each estimate counts one [CLS]; a pair has three special tokens, hence the + 1.
    second = column(splits.train, "text_pair")
    counts = []
    for a, b in zip(texts, second, strict=True):
        (tokens_a, chars_a), (tokens_b, chars_b) = estimate_counts(a), estimate_counts(b)
        counts.append((tokens_a + tokens_b + 1, chars_a + chars_b))
    log.info("text pairs: the auto settings measure each row as [CLS] text [SEP] text_pair [SEP]")
    return recipe.DataProfile.from_counts(counts, classes)


def auto_class_weights(splits: LabeledSplits) -> list[float]:
    """Inverse-frequency class weights of the training split, averaging 1; logged."""
    labels = column(splits.train, "labels")
    if labels and isinstance(labels[0], list):  # multi-label: class weights do not apply
        check_multilabel_options("auto", "cross_entropy")
    counts = Counter(labels)
    per_class = [counts.get(i, 0) for i in range(len(splits.label_names))]
    weights = inverse_frequency(per_class, splits.label_names)
    shown = ", ".join(
        f"{name} {w:.2f} ({n:,} rows)"
        for name, w, n in zip(splits.label_names, weights, per_class, strict=True)
    )
    log.info("class weights (auto, inverse frequency of the training labels): %s", shown)
    return weights
