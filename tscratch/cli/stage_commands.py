"""The commands of `--recipe`'s stages: `tscratch pretrain` on the training split, or `tscratch
fit` of a teacher, each carrying what it must share with the main run (its splits, seed,
precision, architecture), and the budgets that size them (`tscratch.cli.fit_recipe` chooses the
stage and runs it)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

from jsonargparse import Namespace

from tscratch.config import EncoderConfig
from tscratch.data.splits import SPLIT_ARGS
from tscratch.errors import UserError
from tscratch.pretrained.sources import PACKAGES
from tscratch.training import recipe as rules

PRETRAIN_TOKENS = 10_000_000
SHORT_PRETRAIN_TOKENS = 17_000_000
"""Masked-LM training tokens of the `pretrain` stage unless `--pretrain_tokens` says otherwise
(`stage_budget`): `SHORT_PRETRAIN_TOKENS` for texts of a median under `rules.LONG` tokens,
`PRETRAIN_TOKENS` for longer ones, within `PRETRAIN_EPOCHS` passes. What the stage learns grows
with its passes (BBC News seed 0: 4 passes 94.6%, 11 passes 96.4%, TF-IDF 95.5%; ChnSentiCorp,
three seeds, 17 passes against 10: best validation higher on every seed, twice over, from random
and from e5's vectors; docs/results.md), and it is where the model learns what words mean. The
longer stage costs about 6 more minutes of one CPU thread on ChnSentiCorp (a run of about 19);
long texts keep 10M, so that the BBC News quickstart (11 passes, 13-14 minutes a run) stays
under 15 minutes, and its validation accuracy is 99.3% after 10M already."""
PRETRAIN_OBJECTIVE = "mlm"
"""The `pretrain` stage's objective unless `--pretrain_objective` says otherwise."""
PRETRAIN_EPOCHS = (3, 30)
PRETRAIN_LENGTH = 128
"""Row length of the pretraining stage (ALiBi carries it to longer fine-tuning rows)."""
TEACHER_LENGTH = 128
"""Longest row the teacher stage reads (the `distil` recipe serves short texts)."""
ARCHITECTURE = tuple(
    f.name
    for f in EncoderConfig.__dataclass_fields__.values()
    if f.name
    not in EncoderConfig.RUNTIME_FIELDS
    | {"vocab_size", "pad_id", "position", "bigram_buckets", "embed_dim"}
)
"""The main run's architecture fields the pretraining stage copies (ALiBi positions instead;
token-pair and factorized embeddings only when there are any, so stage commands without them
stay as they were and their folders are found again)."""


def teacher_installed(teacher_init: str) -> bool:
    """Whether the teacher's start is here: a packaged encoder's package, or a path."""
    if teacher_init in PACKAGES:
        return importlib.util.find_spec(PACKAGES[teacher_init]) is not None
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
embeddings (`--model.embed_init`, trained on), by the training texts' language. On ChnSentiCorp
e5's character vectors left the 10-pass stage at a held-out perplexity of 67-73 instead of
78-79 and raised fine-tuning's best validation accuracy on each of three seeds (91.17% against
90.50% on average) for about 12 s more per run; on BBC News MiniLM's left it at 169-170
instead of 222-225, validation level (99.33% on two seeds, near its ceiling), test 95.76%
against 95.31% (docs/results.md)."""


def stage_vectors(lang: str) -> str | None:
    """`STAGE_VECTORS`'s encoder for ``lang`` when it is installed, else None (random vectors)."""
    source = STAGE_VECTORS.get(lang)
    return source if source is not None and teacher_installed(source) else None


def stage_budget(config: Namespace, profile: rules.DataProfile) -> tuple[int, str]:
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


def pretrain_command(
    config: Namespace, profile: rules.DataProfile, embed_init: str | None = None
) -> list[str]:
    """`tscratch pretrain` on the main run's training split, with its architecture (its token
    embeddings starting from ``embed_init``'s vectors when given)."""
    data, model = config.data, config.model
    vocab = data.vocab_size
    if vocab == rules.AUTO:
        vocab = rules.vocab_size(profile).value
    length = min(PRETRAIN_LENGTH, rules.max_length(profile, None).value)
    # Pretraining cuts each document into rows of `length` tokens and reads them all, so a
    # pass costs every token of the split (not the first `length` of each text, as in fit).
    per_epoch = profile.total_tokens
    low, high = PRETRAIN_EPOCHS
    budget, _ = stage_budget(config, profile)
    epochs = min(high, max(low, round(budget / max(1, per_epoch))))
    flags = ["--config", "pretrain", *data_flags(data, SHARED_DATA)]
    flags += ["--data.vocab_size", str(vocab), "--data.max_length", str(length)]
    flags += ["--data.tokenizer_model", data.get("tokenizer_model") or "wordpiece"]
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
    flags += ["--model.position", "alibi", "--trainer.max_epochs", str(epochs)]
    if embed_init is not None:
        flags += ["--model.embed_init", embed_init]
    objective = config.get("pretrain_objective") or PRETRAIN_OBJECTIVE
    if objective != PRETRAIN_OBJECTIVE:  # the default's command, and so its folder, unchanged
        flags += ["--model.objective", objective]
    return ["pretrain", *flags, *trainer_flags(config)]


def teacher_command(config: Namespace, profile: rules.DataProfile, teacher_init: str) -> list[str]:
    """`tscratch fit --config minilm` from ``teacher_init`` on the main run's splits (e5's word
    vectors kept fixed: 96M of its 117M parameters, one per piece of 100 languages)."""
    length = min(TEACHER_LENGTH, rules.max_length(profile, None).value)
    flags = ["--config", "minilm", "--model.init_from", teacher_init]
    if teacher_init == "e5":
        flags += ["--model.freeze_embeddings", "true"]
    flags += [*data_flags(config.data, SHARED_DATA), "--data.max_length", str(length)]
    flags += ["--baseline", "false", "--recipe", "plain"]
    return ["fit", *flags, *trainer_flags(config)]
