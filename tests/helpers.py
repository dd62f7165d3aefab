"""What every test that runs a script in a subprocess shares (import as `tests.helpers`)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY_YAML = REPO / "tscratch" / "configs" / "tiny.yaml"


def script_env(cache: Path | str, home: Path | str, *, tests_importable: bool = False, **extra):
    """The environment of a script under test: offline, one thread, caches and $HOME in tmp.

    Args:
        cache: `$TSCRATCH_CACHE`, so tokenizers and tokenized splits never land in ~/.cache.
        home: `$HOME` (matplotlib writes its font cache there).
        tests_importable: put the repository on PYTHONPATH, for callbacks defined in test
            modules (`--trainer.callbacks tests.<dir>.<module>.<Class>`).
        extra: further variables.
    """
    env = dict(
        os.environ,
        TSCRATCH_CACHE=str(cache),
        HOME=str(home),
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        **extra,
    )
    if tests_importable:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return env
