"""What distillation changes in a plan: copies of each text for the teacher to read, the
student's batch, dropout and passes. The teacher's stages themselves: `tscratch.recipe.teachers`.
"""

from __future__ import annotations

from collections.abc import Collection

from jsonargparse import Namespace

from tscratch.recipe import commands, settings
from tscratch.recipe.profile import DataProfile
from tscratch.recipe.settings import Choice, wanted_options

DISTIL_BATCH = 64
"""The student's batch unless the command gives one: its transfer set holds many rows per
training text, and on short texts a step of 32 rows is mostly fixed per-step cost."""
STUDENT_DROPOUT = 0.1
"""The distilled student's dropout unless the command gives one: it learns a teacher's logits
on many noised copies of each text, which regularise it already, so it takes less than the
labels-only default (chosen on validation, docs/results.md)."""
MAX_READINGS = 120
"""Most times the distilled student reads a text, counting its copies: `round(120 / (1 +
copies))` passes (6 with 20 copies); students read longer peaked early on validation and then
fell, and with dropout 0.1 twelve passes were within the noise of six at twice the time
(docs/results.md)."""


def distil_settings(
    view: Namespace, profile: DataProfile, recipe: str, given: Collection[str]
) -> list[Choice]:
    """Copies per text (`commands.teacher_copies`), the student's batch, dropout and passes."""
    data, chosen = view.data, []
    copies = data.get("augment_copies")
    if copies is None:
        copies = commands.teacher_copies(profile.rows)
        reason = (
            f"the teacher reads at most {commands.TEACHER_READINGS:,} texts: {profile.rows:,} "
            f"training texts and {copies} augmented copies of each"
        )
        chosen.append(Choice("data.augment_copies", copies, reason))
    if recipe == "distil" and "data.batch_size" not in given:
        reason = "the transfer set holds many rows per training text: fewer, larger steps"
        chosen.append(Choice("data.batch_size", DISTIL_BATCH, reason))
    if recipe == "distil" and "model.dropout" not in given:
        reason = "the teacher's logits on noised copies of each text regularise the student"
        chosen.append(Choice("model.dropout", STUDENT_DROPOUT, reason))
    if wanted_options(view, ["trainer.max_epochs"]):
        chosen.append(distillation_epochs(profile, data.max_length, copies, data.augment_ngram))
    return chosen


def distillation_epochs(
    profile: DataProfile, max_length: int | None, copies: int, ngram: float
) -> Choice:
    """`settings.TARGET_TOKENS` over the training split grown by its full-length copies, within
    1 and `MAX_READINGS` readings of a text counting its copies."""
    whole = round(copies * (1 - ngram))
    per_epoch = profile.tokens_per_epoch(max_length) * (1 + whole)
    high = max(1, round(MAX_READINGS / (1 + copies)))
    value = min(high, max(1, round(settings.TARGET_TOKENS / per_epoch)))
    reason = (
        f"{value} pass{'es' * (value != 1)} over about {per_epoch:,} tokens (the texts and "
        f"{whole} full-length copies of each; aim {settings.TARGET_TOKENS / 1e6:g}M tokens, "
        f"1-{high} passes, so a text and its copies are read at most ~{MAX_READINGS} times)"
    )
    return Choice("trainer.max_epochs", value, reason)
