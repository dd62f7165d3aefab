"""A BERT checkpoint's tokenizer: its tokenizer.json, or WordPiece built from vocab.txt."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from tscratch.errors import MissingFile, UserError

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")  # first found wins


def read_tokenizer(folder: Path) -> Tokenizer:
    """tokenizer.json, or a BERT WordPiece tokenizer built from vocab.txt; never pads/truncates."""
    if (folder / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif (folder / "vocab.txt").is_file():
        tokenizer = wordpiece_tokenizer(folder / "vocab.txt", _lowercase(folder))
    else:
        raise MissingFile(f"{folder}: no tokenizer ({' or '.join(TOKENIZER_FILES)})")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _lowercase(folder: Path) -> bool:
    path = folder / "tokenizer_config.json"
    return bool(json.loads(path.read_text()).get("do_lower_case", True)) if path.is_file() else True


def wordpiece_tokenizer(vocab_file: Path, lowercase: bool = True) -> Tokenizer:
    """BERT's tokenizer from its vocab.txt: the same pipeline HF's BertTokenizerFast uses."""
    vocab = WordPiece.read_file(str(vocab_file))
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]") if t not in vocab]
    if missing:
        raise UserError(f"{vocab_file}: no {', '.join(missing)} token; is it a BERT vocab?")
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = [("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=special
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens(
        [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t in vocab]
    )
    return tokenizer
