"""The encoder-decoder task: its loss, learning a few headlines by heart, init_from a pretrain.py
checkpoint, and the ROUGE code it shares with the baselines."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tests.data.test_headlines import write_pairs
from tscratch.cli.headline_baselines import baseline_scores, first_sentence, lead_words
from tscratch.data.headlines import HeadlineData
from tscratch.data.seq2seq_pairs import Pair
from tscratch.errors import UserError
from tscratch.training.masked_lm import MaskedLMTask
from tscratch.training.rouge import rouge
from tscratch.training.seq2seq import Seq2SeqTask

TINY = dict(d_model=32, num_heads=4, d_ff=64, num_layers=2, num_decoder_layers=1, max_len=32)


@pytest.fixture
def pairs_data(tmp_path, data_cache) -> HeadlineData:
    data = HeadlineData(
        dataset=str(write_pairs(tmp_path / "pairs.csv")), source_column="article",
        target_column="title", vocab_size=100, max_length=16, target_max_length=8, batch_size=8,
    )  # fmt: skip
    data.setup("fit")
    return data


def tiny_task(data: HeadlineData, **changes) -> Seq2SeqTask:
    task = Seq2SeqTask(
        **{**TINY, "dropout": 0.0, **changes}, vocab_size=data.vocab_size, pad_id=data.pad_id,
        bos_id=data.bos_id, eos_id=data.eos_id, max_new_tokens=8,
    )  # fmt: skip
    task.tokenizer_json = data.tokenizer_json()
    return task


def test_the_loss_is_cross_entropy_over_real_target_tokens(pairs_data, seed):
    task = tiny_task(pairs_data, label_smoothing=0.2)
    batch = next(iter(pairs_data.train_dataloader()))
    logits = task(batch)
    real = batch["labels"] != -100
    expected = F.cross_entropy(logits[real], batch["labels"][real], label_smoothing=0.2)
    assert torch.allclose(task._loss(logits, batch["labels"], 0.2), expected)
    assert real.sum() < real.numel()  # there was padding to ignore


def test_a_tiny_model_learns_a_few_headlines_by_heart(pairs_data, seed, single_thread):
    task = tiny_task(pairs_data)
    batch = pairs_data.collator()(pairs_data.encode(pairs_data.pairs("train")[:8]))
    optimizer = torch.optim.Adam(task.parameters(), lr=3e-3)
    task.train()
    for _ in range(150):
        loss = task._loss(task(batch), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    task.eval()
    greedy = task.generate_texts(batch["input_ids"], batch["attention_mask"])
    beams = task.generate_texts(batch["input_ids"], batch["attention_mask"], num_beams=3)
    real = [p.target for p in pairs_data.pairs("train")[:8]]
    assert greedy == real and beams == real
    task._evaluate({**batch, "references": real}, "val", num_beams=1)
    assert float(task.val_rouge.compute()["rougeL_fmeasure"]) == 1.0


def test_init_from_a_pretrain_checkpoint_copies_its_encoder_and_embedding(
    pairs_data, tmp_path, seed
):
    encoder = {k: v for k, v in TINY.items() if k != "num_decoder_layers"}
    pretrained = MaskedLMTask(**encoder, vocab_size=pairs_data.vocab_size)
    path = tmp_path / "pretrain.ckpt"
    torch.save(
        {
            "state_dict": pretrained.state_dict(),
            "hyper_parameters": dict(pretrained.hparams),
            "tokenizer_json": pairs_data.tokenizer_json(),
        },
        path,
    )
    task = tiny_task(pairs_data, init_from=str(path))
    decoder_before = {k: v.clone() for k, v in task.model.decoder.state_dict().items()}
    task._trainer = SimpleNamespace(ckpt_path=None, datamodule=None)
    task.setup("fit")
    for key, value in pretrained.model.encoder.state_dict().items():
        assert torch.equal(task.model.encoder.state_dict()[key], value), key
    assert torch.equal(task.model.tok_emb.weight, pretrained.model.encoder.tok_emb.weight)
    for key, value in task.model.decoder.state_dict().items():
        assert torch.equal(value, decoder_before[key]), key  # the decoder stays new


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"label_smoothing": 1.0}, r"^label_smoothing \(1.0\) must be in \[0, 1\)$"),
        ({"num_beams": 0}, r"^num_beams \(0\) must be at least 1$"),
        ({"length_penalty": -1.0}, r"^length_penalty \(-1.0\) must be >= 0$"),
        (
            {"no_repeat_ngram_size": -1},
            r"^no_repeat_ngram_size \(-1\) must be 0 \(off\) or positive$",
        ),
    ],
)
def test_bad_task_options_are_one_line(changes, message):
    with pytest.raises(UserError, match=message):
        Seq2SeqTask(vocab_size=50, **changes)


def test_rouge_on_known_strings():
    scores = rouge(["the cat sat on the mat", "a b c"], ["the cat was on the mat", "a b c"])
    # pair 1: 5 of 6 unigrams, 3 of 5 bigrams, LCS 5 of 6; pair 2 matches exactly
    assert scores["rouge1"] == pytest.approx((5 / 6 + 1) / 2, abs=1e-6)
    assert scores["rouge2"] == pytest.approx((3 / 5 + 1) / 2, abs=1e-6)
    assert scores["rougeL"] == pytest.approx((5 / 6 + 1) / 2, abs=1e-6)
    assert rouge(["Cats, dogs!"], ["cats dogs"])["rouge2"] == pytest.approx(1.0)  # normalised


def test_the_baselines_read_the_lead_and_the_first_sentence():
    body = 'Shares rose 1.13% at U.S.-based Acme. "We won," it said.\n\nA second paragraph.'
    assert lead_words(body, 3) == "Shares rose 1.13%"
    assert first_sentence(body) == "Shares rose 1.13% at U.S.-based Acme."
    assert first_sentence("No end here\nnext line.") == "No end here"
    pairs = {
        "train": [Pair("x", "one two three"), Pair("y", "one")],  # mean 2 words: lead-2
        "test": [Pair("acme shares rose. later", "acme shares")],
    }
    header, lead, sentence = baseline_scores(pairs)
    assert header == {"mean_headline_words": 2, "n": 2}
    assert (lead["baseline"], lead["rouge1"], lead["rouge2"]) == ("lead-2", 1.0, 1.0)
    assert sentence["baseline"] == "first sentence"
    assert sentence["rouge1"] == pytest.approx(0.8) and sentence["rouge2"] == pytest.approx(2 / 3)


def test_generation_without_the_linked_special_ids_is_one_line():
    task = Seq2SeqTask(vocab_size=50).eval()
    ids = torch.tensor([[2, 5, 6]])
    with pytest.raises(UserError, match=r"^bos_id and eos_id are not set; they come from the data"):
        task.generate_texts(ids, torch.ones_like(ids, dtype=torch.bool))
