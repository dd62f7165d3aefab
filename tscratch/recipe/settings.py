"""Settings chosen from the data: what `auto` means in tscratch fit's configs, by stated rules.

One fixed recipe cannot serve 500-token news articles and 10-token questions: token dropout that
regularises a long article hides the one word that decides a short question, 1,024-token rows
waste work on texts of 20, and a fixed number of epochs is too few updates for 500 rows and
hours too many for 50,000. So four settings may be `auto` (`default.yaml` sets all but the
token pairs, which it leaves off: docs/results.md says why), and the number of epochs is chosen
when neither it nor `max_steps` is given; they are filled in from a profile of the training
split before anything is built; tscratch fit's plan (`tscratch.recipe.plan`) shows each choice
with its reason, and the run's `config.yaml` records the values, not `auto`:

- `data.max_length`: covers 95% of the training texts (estimated tokens, rounded up to a
  multiple of 32), within the position table's limit and at most `MAX_AUTO_LENGTH`: attention's
  cost grows with the square of the length, and what a document is about is mostly said in its
  first few hundred words (BERT reads 512 tokens; pass a number for more).
- `model.token_dropout`: 0.15 when the median text has 128 tokens or more, none below 16, linear
  in between: dropping words helps where words are redundant.
- `model.bigram_buckets`: embeddings of adjacent token pairs (`tscratch.nn.bigrams`), hashed
  into `BIGRAM_BUCKETS` rows, when at least `BIGRAM_SHARE` of the tokens are single CJK
  characters (Chinese: the tokenizer splits every ideograph, below the word); none otherwise,
  where tokens are words or word pieces already.
- `data.vocab_size`: the largest of 2k, 4k, ... 32k entries that the training text fills with
  at least `TOKENS_PER_ENTRY` tokens each on average (at least 2k): an entry seen a handful of
  times learns an embedding that only memorises, where its pieces would generalise. A table of
  jieba's words is sized by the text's ideographs, `WORD_TOKENS_PER_ENTRY` an entry, and holds
  no more entries than the words the text repeats (`recipe.profile.MIN_WORD_COUNT` times). The
  size counts every entry: WordPiece keeps the ideographs it sees, in the forms it sees them
  (`c`, `##c`), before it learns a word, so the words are what the characters leave (the plan
  says how many the characters may take; forms it did not keep are added on top).
- `trainer.max_epochs` (when neither it nor `max_steps` is given): a fixed budget of
  `TARGET_TOKENS` training tokens (what 8 epochs of BBC News's articles cost), at least 2 and at
  most 40 passes: short or small data get more passes, each one cheap, large data fewer.
- `patience` (top-level; default.yaml: `auto`): training stops when the best checkpoint's metric
  has not improved for `PATIENCE_SHARE` of the planned validations, at least `MIN_PATIENCE`;
  the best checkpoint is kept. The budget above is an upper bound sized for the data; where a
  small set peaks early, the rest of it is spent learning the training rows by heart. With fewer
  than `MIN_VALIDATION_TEXTS` validation texts there is no stopper: each text moves accuracy by
  more than 0.1 points, so a few validations without a better score are as likely noise as a
  plateau, and the whole budget runs (the best checkpoint is still the one kept).

The rules read the training split's profile (`tscratch.recipe.profile.DataProfile`, which
says how it is measured).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tscratch.data.words import INSTALL
from tscratch.recipe.profile import MIN_WORD_COUNT, DataProfile

if TYPE_CHECKING:
    from jsonargparse import Namespace

AUTO = "auto"
AUTO_OPTIONS = (
    "data.max_length",
    "data.vocab_size",
    "model.token_dropout",
    "model.bigram_buckets",
    "model.class_weights",
    "trainer.max_epochs",
)
"""Options chosen from the data when set to `auto` (`trainer.max_epochs` when neither it nor
`max_steps` is set); `model.class_weights` by `tscratch.recipe.planner.class_weights`, the
rest by the rules here."""
MAX_AUTO_LENGTH = 512
"""Longest row `auto` chooses: attention's cost grows with the square of the length, and on long
news articles rows of 512 scored as well as rows covering 95% of the text, in a third less time
(docs/results.md, "Reading 512 tokens of each article")."""
TOKENS_PER_ENTRY = 100
WORD_TOKENS_PER_ENTRY = 50
"""Ideographs of training text per entry of a table of jieba's words: half `TOKENS_PER_ENTRY`,
as a word token mostly holds one to four ideographs and its vector starts from e5's view of the
word. On both Chinese sets here it allows 16,000 words (8,000 at 100 an entry); THUCNews titles
took them, best validation up 0.7 points on both seeds; ChnSentiCorp's reviews repeat fewer
words than that (10,892 seen three times or more), are capped at 8,000, and with 16,000 were
0.7 points lower on validation over three seeds (docs/results.md, "Chinese read as words")."""
VOCAB_SIZES = (2000, 4000, 8000, 16000, 32000)
TARGET_TOKENS = 7_000_000
"""Training tokens the epoch rule aims at (BBC News: 1,778 articles, ~890k tokens per epoch).
Twice as many did not pay where the best validation came at the last pass: on ChnSentiCorp
+0.5 on validation, -0.5 on test; on THUCNews titles, from one stage, -0.4 on validation
(docs/results.md)."""
EPOCH_RANGE = (2, 40)
PATIENCE_SHARE = 0.25
MIN_PATIENCE = 3
"""Early stopping's patience: a quarter of the planned validations, at least 3 (`patience`)."""
MIN_VALIDATION_TEXTS = 1000
"""Fewest validation texts early stopping is planned for: below it one text is worth more than a
tenth of a point of accuracy, and a run's best score moves in steps too coarse to judge."""
MAX_TOKEN_DROPOUT = 0.15
SHORT, LONG = 16, 128
"""Median lengths (tokens) below which no token dropout is used, and from which the full rate."""
BIGRAM_SHARE = 0.5
"""Share of the tokens that are single CJK characters from which pairs get embeddings."""
BIGRAM_BUCKETS = 65_536
"""Rows the pairs are hashed into: ChnSentiCorp's 9,600 reviews hold 152K distinct adjacent
pairs, 78K of them seen twice or more; 2^16 rows keep the pairs a dataset of that size repeats
mostly apart, at 8.4M numbers for a 128-wide model (zero where no pair lands)."""


@dataclass(frozen=True)
class Choice:
    """One filled-in setting: the option's name, its value and why."""

    option: str
    value: Any
    reason: str


def max_length(profile: DataProfile, limit: int | None) -> Choice:
    """Cover 95% of the texts, in multiples of 32, within the position table's ``limit`` and
    `MAX_AUTO_LENGTH`."""
    value = max(32, 32 * math.ceil(profile.p95_tokens / 32))
    reason = f"covers 95% of training texts ({profile.p95_tokens} tokens)"
    if limit is not None and value > limit:
        value, reason = limit, f"{reason}, cut to the {limit} positions the model has"
    if value > MAX_AUTO_LENGTH:
        value = MAX_AUTO_LENGTH
        reason = (
            f"capped at {MAX_AUTO_LENGTH}: 95% of training texts need {profile.p95_tokens} "
            f"tokens, and attention's cost grows with the square (--data.max_length for more)"
        )
    return Choice("data.max_length", value, reason)


def vocab_size(profile: DataProfile) -> Choice:
    """The largest size in `VOCAB_SIZES` with `TOKENS_PER_ENTRY` training tokens per entry.

    Texts read as jieba's words are counted as read one ideograph a token, `WORD_TOKENS_PER_ENTRY`
    an entry: the rule measures how much text there is to learn entries from, and the same text
    cut into words has fewer, rarer tokens; a table sized from those would hold few words and
    send most of them back to their characters. Nor is a table of words larger than the words
    the texts repeat (`DataProfile.recurring_words`: seen `MIN_WORD_COUNT` times or more): an
    entry for a word seen once or twice learns little from the data and takes its occurrences
    from its characters' entries, which other words share."""
    tokens = profile.character_reading or profile.total_tokens
    aim = WORD_TOKENS_PER_ENTRY if profile.character_reading else TOKENS_PER_ENTRY
    filled = max([v for v in VOCAB_SIZES if tokens / v >= aim], default=VOCAB_SIZES[0])
    recurring = profile.recurring_words
    most = recurring if recurring is not None else math.inf
    value = max([v for v in VOCAB_SIZES if v <= min(filled, most)], default=VOCAB_SIZES[0])
    read = " (counted a token per ideograph)"
    reason = (
        f"{tokens:,} training tokens{read if profile.character_reading else ''}: "
        f"{tokens // value:,} per entry (aim {aim}+)"
    )
    if value < filled:  # the cap decided
        seen = f"{recurring:,} words seen {MIN_WORD_COUNT}+ times"
        least = recurring < VOCAB_SIZES[0]
        reason += f", the least table: only {seen}" if least else f", capped at the {seen}"
    if profile.ideographs:  # WordPiece keeps the characters it sees before it learns a word
        forms = 2 * profile.ideographs
        reason += (
            f"; the {profile.ideographs:,} ideographs' two forms (c, ##c) take up to {forms:,}"
        )
        reason += ", so few entries are words" if forms >= value else ", words the rest"
    return Choice("data.vocab_size", value, reason)


def token_dropout(profile: DataProfile) -> Choice:
    """Full rate for long texts, none for short ones (one word may decide), linear between."""
    share = min(1.0, max(0.0, (profile.median_tokens - SHORT) / (LONG - SHORT)))
    value = round(MAX_TOKEN_DROPOUT * share, 2)
    reason = (
        f"median text of {profile.median_tokens} tokens: {MAX_TOKEN_DROPOUT} from {LONG} tokens, "
        f"0 below {SHORT}"
    )
    return Choice("model.token_dropout", value, reason)


def bigram_buckets(profile: DataProfile) -> Choice:
    """Token-pair embeddings when most tokens are single CJK characters (`BIGRAM_SHARE`)."""
    share = profile.character_tokens / max(1, profile.total_tokens)
    if share < BIGRAM_SHARE:
        reason = f"{share:.0%} of the tokens are single CJK characters: words are tokens already"
        return Choice("model.bigram_buckets", 0, reason)
    reason = (
        f"{share:.0%} of the tokens are single CJK characters: embeddings of adjacent pairs (most "
        f"words are two characters), hashed into {BIGRAM_BUCKETS:,} rows"
    )
    return Choice("model.bigram_buckets", BIGRAM_BUCKETS, reason)


def max_epochs(profile: DataProfile, max_length: int | None) -> Choice:
    """About `TARGET_TOKENS` tokens (each text cut at ``max_length``), within `EPOCH_RANGE`."""
    per_epoch = profile.tokens_per_epoch(max_length)
    low, high = EPOCH_RANGE
    value = min(high, max(low, round(TARGET_TOKENS / per_epoch)))
    reason = (
        f"{value} passes over {per_epoch:,} tokens (aim {TARGET_TOKENS / 1e6:g}M tokens, "
        f"{low}-{high} passes)"
    )
    return Choice("trainer.max_epochs", value, reason)


def patience(validations: int, metric: str, texts: int) -> Choice:
    """Stop after `PATIENCE_SHARE` of ``validations`` (at least `MIN_PATIENCE`) without a better
    ``metric``, scored on ``texts`` validation texts; None when that leaves no room to stop
    before the budget ends, or when the texts are fewer than `MIN_VALIDATION_TEXTS`."""
    if texts < MIN_VALIDATION_TEXTS:
        reason = (
            f"{texts:,} validation texts (fewer than {MIN_VALIDATION_TEXTS:,}): one text moves "
            f"accuracy by {100 / max(1, texts):.2f} points, so validations without a better "
            f"{metric} are as likely noise as a plateau; the whole budget runs, the best "
            f"checkpoint kept"
        )
        return Choice("patience", None, reason)
    value = max(MIN_PATIENCE, math.ceil(PATIENCE_SHARE * validations))
    if value >= validations:
        reason = f"{validations} validations planned: too few to stop before the budget ends"
        return Choice("patience", None, reason)
    reason = (
        f"stop when {metric} has not improved for {value} of the {validations} validations "
        f"planned ({PATIENCE_SHARE:.0%}, at least {MIN_PATIENCE}); the best checkpoint is kept"
    )
    return Choice("patience", value, reason)


def segmenter(lang: str, installed: bool) -> Choice:
    """jieba's words for Chinese when jieba is installed, else none: one token per ideograph
    (the words are the units Chinese meaning sits in, and a small encoder trained on little
    data has to learn them from characters otherwise)."""
    if lang != "zh":
        return Choice("data.segmenter", None, "not Chinese: words end at spaces and punctuation")
    if not installed:
        why = f"Chinese, but jieba is not installed ({INSTALL}): one token per ideograph"
        return Choice("data.segmenter", None, why)
    why = "Chinese: jieba's words are the tokens; a word the vocabulary lacks, its characters"
    return Choice("data.segmenter", "jieba", why)


def long_text(profile: DataProfile, max_length: int, distilling: bool = False) -> Choice | None:
    """`data.long_text` stated when some training texts are longer than ``max_length``: they are
    cut (`truncate`), which windows over whole texts (either way of training on them) did not
    beat, and which a distilled student must do (None when none is cut)."""
    lengths = profile.lengths or (profile.median_tokens,) * profile.rows
    longer = sum(1 for n in lengths if n > max_length)
    if not longer:
        return None
    share = longer / len(lengths)
    part = f"{share:.0%}" if share >= 0.01 else "under 1%"
    other = (
        "a teacher's logits are one set per text, so a student reads no windows"
        if distilling
        else "--data.long_text windows or pooled reads whole texts; neither scored higher on "
        "BBC News's articles, docs/results.md"
    )
    reason = (
        f"{part} of training texts ({longer:,}) are longer than {max_length} tokens: only the "
        f"first {max_length} are read ({other})"
    )
    return Choice("data.long_text", "truncate", reason)


def choose(
    profile: DataProfile,
    wanted: Sequence[str],
    length_limit: int | None,
    max_length_given: int | None = None,
) -> list[Choice]:
    """The choices for the options in ``wanted`` (names as in `Choice.option`), in that order.

    Args:
        length_limit: the position table's length, if it has one (caps `data.max_length`).
        max_length_given: `data.max_length` when it is not chosen here (the epoch rule cuts
            texts at it).
    """
    choices = {}
    if "data.max_length" in wanted:
        choices["data.max_length"] = max_length(profile, length_limit)
        max_length_given = choices["data.max_length"].value
    rules = {
        "data.vocab_size": lambda: vocab_size(profile),
        "model.token_dropout": lambda: token_dropout(profile),
        "model.bigram_buckets": lambda: bigram_buckets(profile),
        "trainer.max_epochs": lambda: max_epochs(profile, max_length_given),
    }
    for name in wanted:
        if name not in choices:
            choices[name] = rules[name]()
    return [choices[name] for name in wanted]


def wanted_options(config: Namespace, options: Sequence[str] = AUTO_OPTIONS) -> list[str]:
    """The ``options`` ("group.name") this run leaves to the data: those set to `auto`, and
    `trainer.max_epochs` when neither it nor `max_steps` is set (Lightning would run 1000)."""
    wanted = []
    for option in options:
        group, name = option.split(".")
        if config[group].get(name) == AUTO:
            wanted.append(option)
        elif option == "trainer.max_epochs":
            trainer = config.trainer
            if trainer.get("max_epochs") is None and trainer.get("max_steps") in (None, -1):
                wanted.append(option)
    return wanted
