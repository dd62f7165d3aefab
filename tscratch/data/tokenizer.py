"""The tokenizer: WordPiece or BPE trained with Hugging Face `tokenizers`, cached on disk.

Trained on the training split only (so no validation/test text leaks into the vocabulary) and
cached under a hash of that text and the settings. Text is NFKC-normalized and lowercased
(accents kept, so scripts whose vowel signs are combining marks survive); CJK ideographs become
one word each, as in BERT, unless the tokenizer reads jieba's words (``segmenter="jieba"``:
`tscratch.data.words`). Every sequence starts with `[CLS]` (first-token pooling reads it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers.processors import TemplateProcessing

from tscratch.data.cjk import IDEOGRAPH
from tscratch.data.words import WORDS_MARK, cut_words
from tscratch.errors import UserError

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")  # in id order: [PAD] is 0
CHARS_PER_TOKEN = 20  # texts are cut at max_length * 20 characters before tokenizing
TOKENIZER_RECIPE = "nfkc-lower-bert-pretok-v1"  # bump when the recipe changes: new cache key
Segmenter = Literal["jieba"] | None
"""What cuts texts into words before the tokenizer reads them: nothing (each CJK ideograph a
token), or jieba."""


def reads_words(tokenizer: Tokenizer) -> bool:
    """Whether ``tokenizer`` was trained on jieba's words (it carries `WORDS_MARK`)."""
    return tokenizer.token_to_id(WORDS_MARK) is not None


def words_for(tokenizer: Tokenizer, texts: Sequence[str]) -> list[str]:
    """``texts`` as ``tokenizer`` reads them: cut into jieba's words when it was trained on them
    (`reads_words`), else as they are. Every encoding of raw text goes through here.

    A word with an ideograph the vocabulary lacks would be one ``[UNK]`` whole (WordPiece
    gives up on a word it cannot cut into known pieces), losing its known characters too: such
    an ideograph is set apart, so only it is ``[UNK]``, as with one token per ideograph."""
    if not reads_words(tokenizer):
        return list(texts)

    def apart(match: re.Match) -> str:
        return match[0] if tokenizer.token_to_id(match[0]) is not None else f" {match[0]} "

    return [IDEOGRAPH.sub(apart, text) for text in cut_words(texts)]


def char_limit(max_length: int) -> int:
    """Characters kept per text: far more than ``max_length`` tokens need, but bounded."""
    return max_length * CHARS_PER_TOKEN


def default_cache_dir() -> str:
    """``$TSCRATCH_CACHE`` if set, else ``~/.cache/tscratch``."""
    return os.environ.get("TSCRATCH_CACHE") or str(Path("~/.cache/tscratch").expanduser())


def train_tokenizer(
    texts: Iterable[str],
    model: Literal["wordpiece", "bpe"],
    vocab_size: int,
    max_chars: int,
    extra_special_tokens: Sequence[str] = (),
    segmenter: Segmenter = None,
) -> Tokenizer:
    """Trains a ``[CLS]``-prefixing WordPiece or BPE tokenizer on ``texts``.

    ``extra_special_tokens`` (e.g. ``("[MASK]",)`` for masked-LM pretraining) get the ids after
    ``SPECIAL_TOKENS``; the default adds none, so classification tokenizers stay as they were.
    With ``segmenter`` "jieba" it learns from jieba's words (ideographs are no longer split one
    by one) and carries `WORDS_MARK`, last of its special tokens.
    """
    if segmenter not in (None, "jieba"):
        raise UserError(
            f"segmenter {segmenter!r} must be 'jieba' or null (one token per ideograph)"
        )
    words = segmenter == "jieba"
    specials = [*SPECIAL_TOKENS, *extra_special_tokens, *([WORDS_MARK] if words else [])]
    # The trainer's progress bars, on a terminal; redirected to a log they are blank lines.
    shown = {"show_progress": sys.stderr.isatty()}
    if model == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, **shown)
    elif model == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=specials, continuing_subword_prefix="##",
            **shown,
        )  # fmt: skip
    else:
        raise UserError(f"tokenizer_model {model!r} must be 'wordpiece' or 'bpe'")
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.BertNormalizer(
                handle_chinese_chars=not words, strip_accents=False, lowercase=True
            ),
        ]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    cut = [t[:max_chars] for t in texts]
    tokenizer.train_from_iterator(cut_words(cut) if words else cut, trainer=trainer)
    if words:
        tokenizer = _every_character_both_ways(tokenizer)
    cls_id = tokenizer.token_to_id("[CLS]")
    sep_id = tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tokenizer


def _every_character_both_ways(tokenizer: Tokenizer) -> Tokenizer:
    """The trained tokenizer, with each single character its model has as a word start also as
    a continuation (``##c``) and the other way round (new entries after the trained ones).

    A character seen only at word starts in training has no ``##`` form: WordPiece then makes a
    word holding it one ``[UNK]`` (the word is lost whole), BPE makes that character one. With
    both forms of every character, a word the vocabulary lacks falls back to its characters.
    Edited in the model's JSON, so that WordPiece's and BPE's settings (and BPE's merges) stay
    as trained."""
    state = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    singles = {t.removeprefix("##") for t in vocab if len(t.removeprefix("##")) == 1}
    added = [t for c in sorted(singles) for t in (c, f"##{c}") if t not in vocab]
    vocab.update({token: len(vocab) + i for i, token in enumerate(added)})
    return Tokenizer.from_str(json.dumps(state))


def load_tokenizer(path: str) -> Tokenizer:
    """Loads a ``tokenizer.json``; it must define a ``[PAD]`` token.

    Padding and truncation saved in the file are switched off: a Hugging Face model's file often
    pads every text to a fixed 128 and cuts it there, while tscratch cuts rows at the run's
    ``max_length`` and pads each batch to its own longest row."""
    fix = "pass a tokenizer.json saved by `tokenizers`, or drop tokenizer to train one"
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"{path!r} is not a readable tokenizer.json (no such file); {fix}")
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as err:  # tokenizers raises a bare Exception on a bad file
        reason = " ".join(str(err).split())
        raise UserError(f"{path!r} is not a readable tokenizer.json ({reason}); {fix}") from err
    if tokenizer.token_to_id("[PAD]") is None:
        raise UserError(f"tokenizer {path!r} has no [PAD] token; add one or let tscratch train one")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def fingerprint(*parts: str | Iterable[str]) -> str:
    sha = hashlib.sha256()
    for part in parts:
        for text in [part] if isinstance(part, str) else part:
            sha.update(text.encode("utf-8", "surrogatepass"))
            sha.update(b"\x00")
    return sha.hexdigest()[:16]


def cached_tokenizer(
    texts: Sequence[str],
    model: Literal["wordpiece", "bpe"],
    vocab_size: int,
    max_chars: int,
    cache_dir: str,
    extra_special_tokens: Sequence[str] = (),
    segmenter: Segmenter = None,
) -> Tokenizer:
    """Loads the tokenizer trained on these ``texts`` with these settings, or trains it."""
    extra = [f"special:{token}" for token in extra_special_tokens]  # none: the old cache keys
    if segmenter:  # BPE on words keeps its characters both ways since -v2: a new key
        extra.append(f"segmenter:{segmenter}" + ("-v2" if model == "bpe" else ""))
    key = fingerprint(TOKENIZER_RECIPE, model, str(vocab_size), str(max_chars), *extra, texts)
    path = Path(cache_dir) / "tokenizers" / key / "tokenizer.json"
    if path.exists():
        logger.info("Loading cached tokenizer %s", path)
        return Tokenizer.from_file(str(path))
    tokenizer = train_tokenizer(
        texts, model, vocab_size, max_chars, extra_special_tokens, segmenter
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # DDP ranks may race: write then rename
    tokenizer.save(str(tmp))
    tmp.replace(path)
    logger.info("Trained a %s tokenizer of %d tokens: %s", model, tokenizer.get_vocab_size(), path)
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, cache_dir: str | None = None) -> Path:
    """Write `tokenizer` into the cache under its own fingerprint and return the path (written
    once; a second call with the same tokenizer finds the file)."""
    text = tokenizer.to_str()
    path = (
        Path(cache_dir or default_cache_dir()) / "tokenizers" / fingerprint(text) / "tokenizer.json"
    )
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return path
