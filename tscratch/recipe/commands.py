"""The commands of the recipe's stages: `tscratch pretrain` on the training split, or `tscratch
fit` of a teacher, each carrying what it must share with the main run (its splits, seed,
precision, architecture), and the budgets that size them. `tscratch.recipe.planner` puts them in
the plan; `tscratch.cli.fit_stages` runs them."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace

from tscratch.config import EncoderConfig
from tscratch.configs import packaged_config
from tscratch.data.splits import SPLIT_ARGS
from tscratch.data.transfer import DEFAULT_COPIES
from tscratch.errors import UserError
from tscratch.pretrained.sources import PACKAGES, packaged_installed
from tscratch.recipe import settings as rules
from tscratch.recipe.profile import DataProfile

PRETRAIN_TOKENS = 10_000_000
SHORT_PRETRAIN_TOKENS = 17_000_000
"""Masked-LM training tokens of the `pretrain` stage unless `--pretrain_tokens` says otherwise
(`stage_budget`): `SHORT_PRETRAIN_TOKENS` for texts of a median under `rules.LONG` tokens,
`PRETRAIN_TOKENS` for longer ones, within `PRETRAIN_EPOCHS` passes. What the stage learns grows
with its passes, and it is where the model learns what words mean; short texts get the longer
stage because it is most of what the model learns of their words and their fine-tuning is
short; long texts keep the shorter one because their fine-tuning reads long rows and costs more
(docs/results.md has the measurements behind both numbers)."""
PRETRAIN_OBJECTIVE = "mlm"
"""The `pretrain` stage's objective unless `--pretrain_objective` says otherwise."""
PRETRAIN_EPOCHS = (3, 30)
PRETRAIN_LENGTH = 128
"""Row length of the pretraining stage."""
STAGE_POSITION = "alibi"
"""The position scheme the plan gives a `pretrain` run whose command names none: a bias by
distance, with no table to outgrow when fine-tuning reads rows longer than the stage's
`PRETRAIN_LENGTH`. A scheme the command names is the stage's too."""
PRETRAIN_CONFIG = "pretrain"
"""The packaged config the pretraining stage trains with (its batch size and schedule)."""
TEACHER_CONFIG = "minilm"
"""The packaged config the teacher stage fine-tunes with (its batch size and epochs)."""
TEACHER_LENGTH = 128
"""Longest row the teacher stage reads (the `distil` recipe serves short texts)."""
ARCHITECTURE = tuple(
    f.name
    for f in EncoderConfig.__dataclass_fields__.values()
    if f.name
    not in EncoderConfig.RUNTIME_FIELDS
    | {"vocab_size", "pad_id", "position", "bigram_buckets", "embed_dim", "word_chars"}
)
"""The main run's architecture fields the pretraining stage copies in this order (the position
scheme, token-pair, factorized and character-mixed embeddings follow, the last three only when
there are any, so stage commands without them stay as they were and their folders are found
again)."""
TEACHER_READINGS = 120_000
"""Most texts the teacher reads to make the student's transfer set, the training texts and their
augmented copies together: copies per text fall as the data grows (`teacher_copies`), down to
none from half this many training texts; from there on the teacher reads each training text
once, so its pass grows with the data no faster than the data itself."""
TEACHER_STEPS = 1_000
"""Most optimizer steps of the teacher's fine-tuning: its config's passes, each cut to an even
share of these steps on a large training split (a pretrained encoder learns a labelling from
a few thousand examples). Cut passes rather than a step cap, so that each pass still ends in a
validation and the stage keeps its best checkpoint."""


def teacher_installed(teacher_init: str) -> bool:
    """Whether the teacher's start is here: a packaged encoder's package, or a path."""
    if teacher_init in PACKAGES:
        return packaged_installed(teacher_init)
    return Path(teacher_init).expanduser().exists()


def flag_value(value: object) -> str:
    """A value as the command line spells it (booleans lower-case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def data_flags(data: Namespace, names: Sequence[str]) -> list[str]:
    """`--data.NAME VALUE` for each of ``names`` that is set, values as the parser reads them."""
    flags = []
    for name in names:
        value = data.get(name)
        if value is None:
            continue
        flags += [f"--data.{name}", json.dumps(value) if not isinstance(value, str) else value]
    return flags


def trainer_flags(config: Namespace) -> list[str]:
    """What a stage takes from the main run: seed, precision, device, progress bar and the
    `limit_*_batches` of a smoke run."""
    trainer = config.trainer
    flags = ["--seed_everything", str(config.seed_everything)]
    names = ("precision", "accelerator", "devices", "enable_progress_bar")
    limits = ("limit_train_batches", "limit_val_batches", "limit_test_batches")
    for name in (*names, *limits):
        value = trainer.get(name)
        if value is not None and value != "auto":
            flags += [f"--trainer.{name}", flag_value(value)]
    return flags


SHARED_DATA = (
    *(name for name in SPLIT_ARGS if name not in ("train_rows", "text_pair_column",
                                                  "label_delimiter")),
    "cache_dir",
)  # fmt: skip
"""The data options that cut the main run's splits (`SPLIT_ARGS`, but for those the stages do
not serve: `choose` leaves text pairs and multi-label data plain, and pretraining reads the
whole training split), so every stage reads the same training split."""


STAGE_VECTORS = {"en": "minilm", "zh": "e5"}
"""The packaged encoder whose view of each vocabulary entry starts the pretraining stage's token
embeddings (`--model.embed_init`, trained on), by the training texts' language: what a pretrained
encoder knows of the words, where the stage has only the training texts. It left the stage at a
lower held-out perplexity on Chinese reviews and English news, and raised fine-tuning's best
validation accuracy on the reviews (docs/results.md)."""


def stage_vectors(lang: str) -> str | None:
    """`STAGE_VECTORS`'s encoder for ``lang`` when it is installed, else None (random vectors)."""
    source = STAGE_VECTORS.get(lang)
    return source if source is not None and teacher_installed(source) else None


def stage_budget(config: Namespace, profile: DataProfile) -> tuple[int, str]:
    """The pretraining stage's masked-LM tokens (`--pretrain_tokens`, else by the texts' median
    length: `SHORT_PRETRAIN_TOKENS` below `rules.LONG` tokens, `PRETRAIN_TOKENS` from it) and
    why, in words for the log."""
    given = config.get("pretrain_tokens")
    if given is not None:
        if given < 1:
            raise UserError(f"--pretrain_tokens ({given}) must be a number of tokens, 1 or more")
        return given, "--pretrain_tokens"
    if profile.median_tokens < rules.LONG:
        why = (
            f"texts of a median under {rules.LONG} tokens: the stage is most of what the model "
            f"learns of their words, and their fine-tuning is short"
        )
        return SHORT_PRETRAIN_TOKENS, why
    why = (
        f"texts of {rules.LONG}+ tokens: their fine-tuning reads rows of up to "
        f"{rules.MAX_AUTO_LENGTH} tokens"
    )
    return PRETRAIN_TOKENS, why


def stage_epochs(config: Namespace, profile: DataProfile) -> int:
    """Passes of the pretraining stage: its token budget over the split, within `PRETRAIN_EPOCHS`.
    Pretraining cuts each document into rows and reads them all, so a pass costs every token of
    the split (not the first `max_length` of each text, as in fit)."""
    low, high = PRETRAIN_EPOCHS
    budget, _ = stage_budget(config, profile)
    return min(high, max(low, round(budget / max(1, profile.total_tokens))))


def teacher_copies(rows: int) -> int:
    """Augmented copies per training text for the transfer set: `DEFAULT_COPIES`, fewer where
    the teacher would read more than `TEACHER_READINGS` texts, none from that many rows up."""
    return max(0, min(DEFAULT_COPIES, TEACHER_READINGS // max(1, rows) - 1))


def packaged_values(name: str) -> dict[str, Any]:
    """The values of the packaged config ``name`` (`tscratch/configs/NAME.yaml`)."""
    return yaml.safe_load(Path(packaged_config(name)).read_text(encoding="utf-8"))


def teacher_schedule(rows: int) -> tuple[int, int, int | None]:
    """(batch size, passes, batches per pass or None for whole passes) of the teacher stage on
    ``rows`` training texts: the teacher config's batch and passes, `TEACHER_STEPS` in all."""
    packaged = packaged_values(TEACHER_CONFIG)
    batch, epochs = packaged["data"]["batch_size"], packaged["trainer"]["max_epochs"]
    per_pass = TEACHER_STEPS // epochs
    return batch, epochs, (per_pass if math.ceil(rows / batch) > per_pass else None)


def stage_vocab_size(config: Namespace, profile: DataProfile) -> int:
    """The pretraining stage's vocabulary: the run's, or the `auto` rule's when it is `auto`."""
    vocab = config.data.vocab_size
    return rules.vocab_size(profile).value if vocab == rules.AUTO else vocab


def pretrain_length(profile: DataProfile) -> int:
    """Row length of the pretraining stage: `PRETRAIN_LENGTH`, shorter for short texts."""
    return min(PRETRAIN_LENGTH, rules.max_length(profile, None).value)


def teacher_length(profile: DataProfile) -> int:
    """Longest row the teacher reads: `TEACHER_LENGTH`, shorter for short texts."""
    return min(TEACHER_LENGTH, rules.max_length(profile, None).value)


def pretrain_command(
    config: Namespace, profile: DataProfile, embed_init: str | None = None
) -> list[str]:
    """`tscratch pretrain` on the main run's training split, with its architecture (its token
    embeddings starting from ``embed_init``'s vectors when given)."""
    data, model = config.data, config.model
    vocab, length = stage_vocab_size(config, profile), pretrain_length(profile)
    epochs = stage_epochs(config, profile)
    flags = ["--config", PRETRAIN_CONFIG, *data_flags(data, SHARED_DATA)]
    flags += ["--data.vocab_size", str(vocab), "--data.max_length", str(length)]
    flags += ["--data.tokenizer_model", data.get("tokenizer_model") or "wordpiece"]
    if data.get("segmenter") == "jieba":  # the stage's tokenizer is the main run's
        flags += ["--data.segmenter", "jieba"]
    for name in ARCHITECTURE:
        if model.get(name) is not None:
            flags += [f"--model.{name}", flag_value(model[name])]
    buckets = model.get("bigram_buckets") or 0
    if buckets == rules.AUTO:
        buckets = rules.bigram_buckets(profile).value
    if buckets:
        flags += ["--model.bigram_buckets", str(buckets)]
    if model.get("embed_dim"):
        flags += ["--model.embed_dim", str(model.embed_dim)]
    if model.get("word_chars"):
        flags += ["--model.word_chars", str(model.word_chars)]
    position = model.get("position") or STAGE_POSITION
    flags += ["--model.position", position, "--trainer.max_epochs", str(epochs)]
    if embed_init is not None:
        flags += ["--model.embed_init", embed_init]
    objective = config.get("pretrain_objective") or PRETRAIN_OBJECTIVE
    if objective != PRETRAIN_OBJECTIVE:  # the default's command, and so its folder, unchanged
        flags += ["--model.objective", objective]
    return ["pretrain", *flags, *trainer_flags(config)]


def teacher_command(config: Namespace, profile: DataProfile, teacher_init: str) -> list[str]:
    """`tscratch fit --config minilm` from ``teacher_init`` on the main run's splits (e5's word
    vectors kept fixed: 96M of its 117M parameters, one per piece of 100 languages)."""
    length = teacher_length(profile)
    flags = ["--config", TEACHER_CONFIG, "--model.init_from", teacher_init]
    if teacher_init == "e5":
        flags += ["--model.freeze_embeddings", "true"]
    flags += [*data_flags(config.data, SHARED_DATA), "--data.max_length", str(length)]
    flags += ["--baseline", "false", "--recipe", "plain"]
    _, _, per_pass = teacher_schedule(profile.rows)
    limit = config.trainer.get("limit_train_batches")
    if per_pass is not None and limit is None:  # large splits only: small ones keep their folders
        flags += ["--trainer.limit_train_batches", str(per_pass)]
    return ["fit", *flags, *trainer_flags(config)]
