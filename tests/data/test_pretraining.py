"""Pretraining text: sources, the held-out slice, chunking, and the masked batches served."""

from __future__ import annotations

import pytest
import torch

from tscratch.data.documents import chunk_rows, heldout_split, is_text_source, read_text_files
from tscratch.data.loading import load_source
from tscratch.data.masking import IGNORE_INDEX
from tscratch.data.pretraining import PretrainingTextData
from tscratch.data.sources import column, prepare_splits
from tscratch.data.tokenizer import train_tokenizer
from tscratch.errors import MissingFile, UserError

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "log", "quickly"]
WORDS += ["slowly", "red", "blue", "big", "small"]


def write_corpus(folder, files: int = 3, lines: int = 40, seed: int = 0):
    """`files` .txt files of `lines` random sentences each (one sentence per line)."""
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        sentences = [
            " ".join(WORDS[i] for i in torch.randint(len(WORDS), (int(n),), generator=g))
            for n in torch.randint(3, 30, (lines,), generator=g)
        ]
        (folder / f"part{f}.txt").write_text("\n".join(sentences) + "\n\n", encoding="utf-8")
    return folder


def test_txt_sources_give_one_document_per_file_or_per_line(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    (corpus / "nested").mkdir()
    (corpus / "nested" / "more.txt").write_text("one line\n\nanother line\n")
    assert is_text_source(str(corpus)) and is_text_source(str(corpus / "part0.txt"))
    assert not is_text_source("bbc_news")
    assert len(read_text_files(str(corpus))) == 4
    assert len(read_text_files(str(corpus), line_per_document=True)) == 3 * 40 + 2
    with pytest.raises(MissingFile, match=r"text source '/missing.txt': no such file or folder"):
        read_text_files("/missing.txt")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(UserError, match=r"holds no text \(1 .txt files\)"):
        read_text_files(str(tmp_path / "empty.txt"))


def test_heldout_split_is_seeded_disjoint_and_complete():
    docs = [f"doc {i}" for i in range(100)]
    train, held = heldout_split(docs, 0.05, seed=1)
    assert len(held) == 5 and set(train) | set(held) == set(docs) and not set(train) & set(held)
    assert heldout_split(docs, 0.05, seed=1) == (train, held)
    assert heldout_split(docs, 0.05, seed=2)[1] != held
    assert heldout_split(["a", "b"], 0.05, seed=0)[1] != []  # at least one held out
    with pytest.raises(UserError, match="at least 2 distinct documents, got 1"):
        heldout_split(["a"], 0.05, seed=0)


def test_chunks_cover_the_document_and_start_with_cls():
    tokenizer = train_tokenizer([" ".join(WORDS)] * 5, "wordpiece", 60, 10_000, ("[MASK]",))
    document = " ".join(WORDS * 5)  # 80 words
    rows, _ = chunk_rows(tokenizer, [document], max_length=16)
    cls = tokenizer.token_to_id("[CLS]")
    assert all(len(r) <= 16 and r[0] == cls for r in rows)
    assert [t for r in rows for t in r[1:]] == tokenizer.encode(document).ids[1:]


def test_pretraining_on_a_classification_source_reads_only_fits_train_split(data_cache):
    data = PretrainingTextData("bbc_news")
    splits = prepare_splits(load_source("bbc_news"))  # fit.py's split, with its defaults
    documents = data.documents()
    assert documents == list(dict.fromkeys(column(splits.train, "text")))
    eval_texts = set(column(splits.validation, "text")) | set(column(splits.test, "text"))
    assert not eval_texts & set(documents)


def test_batches_are_masked_padded_and_bucketed(tmp_path, data_cache):
    corpus = write_corpus(tmp_path / "corpus")
    data = PretrainingTextData(
        str(corpus), line_per_document=True, vocab_size=60, max_length=16, batch_size=8
    )
    data.setup("fit")
    assert data.tokenizer.token_to_id("[MASK]") == 4 and data.pad_id == 0
    assert all(len(r) <= 16 for r in data.rows("train"))
    batch = next(iter(data.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "labels", "index"}
    assert batch["labels"].shape == batch["input_ids"].shape == (8, 16)
    selected = batch["labels"] != IGNORE_INDEX
    assert selected.any(dim=1).all() and not (selected & ~batch["attention_mask"]).any()
    first, again = (next(iter(data.val_dataloader())) for _ in range(2))
    assert torch.equal(first["input_ids"], again["input_ids"])  # fixed validation masks
    assert "6 documents" in data.describe()  # 5% of 120 lines held out
    assert data.describe().endswith("; masking 15% of the tokens.")


def test_a_tokenizer_without_mask_is_refused_in_one_line(tmp_path, data_cache):
    corpus = write_corpus(tmp_path / "corpus")
    path = tmp_path / "tokenizer.json"
    train_tokenizer([" ".join(WORDS)], "wordpiece", 60, 10_000).save(str(path))
    data = PretrainingTextData(str(corpus), tokenizer=str(path))
    with pytest.raises(UserError, match=r"the tokenizer has no \[MASK\] token"):
        data.vocab_size  # noqa: B018
