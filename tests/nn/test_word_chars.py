"""A word's vector mixed with its characters' (`tscratch.nn.word_chars`, `EncoderConfig.word_chars`,
`tscratch.training.word_chars`): the table read from a words tokenizer, the mix written out by hand,
that an unfilled table changes nothing, that a word's gradient reaches its characters' rows, and
that the table travels in the state dict."""

from __future__ import annotations

import logging

import pytest
import torch

from tests.nn.encoder_properties import PAD, TOL, V, config, random_ids
from tscratch.data.tokenizer import train_tokenizer
from tscratch.data.words import jieba_installed
from tscratch.errors import UserError
from tscratch.model import TransformerEncoder
from tscratch.nn.word_chars import identity_table, mix_characters
from tscratch.training.word_chars import word_char_table

pytestmark = pytest.mark.usefixtures("seed", "single_thread")

REVIEWS = ["酒店的服务很不错，房间也干净。", "房间太小，早餐很一般，非常失望。"] * 4


def test_the_mix_is_the_mean_of_a_tokens_row_and_its_characters_mean_row():
    table = torch.nn.Embedding(6, 3)
    chars = identity_table(6, 3, pad_id=0)
    chars[4] = torch.tensor([1, 2, 3])  # entry 4 is a word of characters 1, 2 and 3
    chars[5] = torch.tensor([2, 3, 0])  # entry 5, of characters 2 and 3
    got = mix_characters(table, torch.tensor([[4, 5, 2, 0]]), chars, pad_id=0)
    w = table.weight
    want = torch.stack([
        (w[4] + (w[1] + w[2] + w[3]) / 3) / 2,
        (w[5] + (w[2] + w[3]) / 2) / 2,
        w[2],  # a single character is its own only character
        w[0],  # so is the pad entry
    ])[None]  # fmt: skip
    assert torch.allclose(got, want, **TOL)


def test_an_unfilled_table_gives_the_encoder_without_it():
    mixed = TransformerEncoder(config(word_chars=4)).eval()
    plain = TransformerEncoder(config()).eval()
    state = {k: v for k, v in mixed.state_dict().items() if k != "word_char_ids"}
    plain.load_state_dict(state)
    ids = random_ids(2, 7)
    assert torch.allclose(mixed(ids).last_hidden_state, plain(ids).last_hidden_state, **TOL)
    assert mixed.word_char_ids.equal(identity_table(V, 4, PAD))


def test_a_words_gradient_reaches_its_characters_rows_and_the_table_is_in_the_state_dict():
    encoder = TransformerEncoder(config(word_chars=2))
    encoder.word_char_ids[7] = torch.tensor([3, 5])
    encoder(torch.tensor([[7, 7]])).last_hidden_state.sum().backward()
    touched = encoder.tok_emb.weight.grad.abs().sum(-1).nonzero().flatten().tolist()
    assert touched == [3, 5, 7]
    again = TransformerEncoder(config(word_chars=2))
    again.load_state_dict(encoder.state_dict())
    assert again.word_char_ids.equal(encoder.word_char_ids)


@pytest.mark.parametrize("value", [-1, True, 1.5, "auto", 17])
def test_word_chars_must_be_a_whole_number_up_to_16(value):
    message = rf"^word_chars \({value!r}\) must be an integer from 0 \(none\) to 16$"
    with pytest.raises(UserError, match=message):
        config(word_chars=value)


@pytest.mark.skipif(not jieba_installed(), reason="needs jieba (the zh extra)")
def test_the_table_holds_each_words_characters_as_single_entries():
    tokenizer = train_tokenizer(REVIEWS, "wordpiece", 80, 1000, segmenter="jieba")
    table = word_char_table(tokenizer, 3, pad_id=0)
    vocab = tokenizer.get_vocab()
    assert vocab.get("房间") is not None  # a word the tokenizer holds whole
    assert table[vocab["房间"]].tolist() == [vocab["房"], vocab["间"], 0]
    for token in ("房", "##间", "[CLS]", "[PAD]", "[JIEBA]"):  # characters and specials: themselves
        assert table[vocab[token]].tolist() == [vocab[token], 0, 0]
    words = [t for t in vocab if len(t.removeprefix("##")) > 1 and not t.startswith("[")]
    for word in words:  # a ## piece of two characters lends from the plain characters too
        row = [i for i in table[vocab[word]].tolist() if i]
        assert [tokenizer.id_to_token(i) for i in row] == list(word.removeprefix("##"))[:3]


def test_a_fit_without_a_data_module_says_the_table_stays_unfilled(tmp_path, caplog):
    from tests.training.test_hparams import _fit_one_step
    from tscratch.training.classification import ClassificationTask

    task = ClassificationTask(vocab_size=60, d_model=16, num_heads=2, d_ff=32, num_layers=1,
                              max_len=16, word_chars=2, num_classes=3)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="tscratch"):
        _fit_one_step(task, tmp_path)
    assert task.model.encoder.word_char_ids.equal(identity_table(60, 2, 0))
    assert (
        "--model.word_chars: no data module's tokenizer to read the entries' characters from, "
        "so each entry keeps its own vector alone"
    ) in caplog.text


@pytest.mark.skipif(not jieba_installed(), reason="needs jieba (the zh extra)")
def test_the_pretraining_stage_fills_the_table_and_a_mismatched_tokenizer_is_one_line():
    from types import SimpleNamespace

    from tscratch.training.masked_lm import MaskedLMTask

    tokenizer = train_tokenizer(REVIEWS, "wordpiece", 80, 1000, segmenter="jieba")
    size = tokenizer.get_vocab_size()
    task = MaskedLMTask(vocab_size=size, d_model=16, num_heads=2, d_ff=32, num_layers=1,
                        max_len=16, word_chars=3)  # fmt: skip
    task._trainer = SimpleNamespace(datamodule=SimpleNamespace(tokenizer=tokenizer))
    task.fill_word_chars()
    assert task.model.encoder.word_char_ids.equal(word_char_table(tokenizer, 3, 0))
    other = MaskedLMTask(vocab_size=size + 5, d_model=16, num_heads=2, d_ff=32, num_layers=1,
                         max_len=16, word_chars=3)  # fmt: skip
    other._trainer = task._trainer
    with pytest.raises(UserError) as caught:
        other.fill_word_chars()
    assert str(caught.value) == (
        f"--model.word_chars: the tokenizer has {size:,} entries but the model's vocab_size is "
        f"{size + 5:,}; build the model from the tokenizer's size (the CLI does this for you)"
    )


def test_the_encoder_decoder_refuses_word_chars():
    from tscratch.seq2seq.config import Seq2SeqConfig
    from tscratch.seq2seq.model import TransformerSeq2Seq

    config = Seq2SeqConfig(vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=1,
                           max_len=16, word_chars=2)  # fmt: skip
    with pytest.raises(UserError, match=r"^word_chars \(2\): the decoder reads and writes each "):
        TransformerSeq2Seq(config)
