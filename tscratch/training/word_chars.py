"""Each vocabulary entry's characters, as the ids of the entries for those characters alone.

`tscratch.nn.word_chars` mixes a word's vector with its characters' (``--model.word_chars``);
this builds the (V, K) table it reads, from the tokenizer. A words tokenizer
(`tscratch.data.tokenizer`, ``--data.segmenter jieba``) holds every character it has as an entry
of its own, in both forms (``c`` and ``##c``), so every character of a word has a row to lend.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer
from torch import Tensor

from tscratch.nn.word_chars import identity_table


def word_char_table(tokenizer: Tokenizer, width: int, pad_id: int) -> Tensor:
    """(V, width) long: row i holds the ids of entry i's first `width` characters, each as the
    entry for that character alone (``c``, else ``##c``), then `pad_id`. An entry of one
    character, a special token, or one with a character the vocabulary lacks keeps the
    identity row (itself, then `pad_id`): its vector stays its own."""
    vocab = tokenizer.get_vocab()
    table = identity_table(tokenizer.get_vocab_size(), width, pad_id)
    specials = set(tokenizer.get_added_tokens_decoder())
    for token, index in vocab.items():
        text = token.removeprefix("##")
        if index in specials or len(text) < 2:
            continue
        ids = [vocab.get(c, vocab.get(f"##{c}")) for c in text[:width]]
        if None not in ids:
            table[index, : len(ids)] = torch.tensor(ids)
    return table


__all__ = ["word_char_table"]
