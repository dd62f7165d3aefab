"""The packaged configs: `--config NAME` is `tscratch/configs/NAME.yaml`, shipped in the wheel.

`fit`, `pretrain` and `fit-seq2seq` take them as LightningCLI configs, `test` and `sweep` read
them too, and the lab builds its runs from them. Plain Python: nothing here imports torch.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tscratch.errors import UserError

CONFIGS = Path(__file__).resolve().parent
"""The folder of the packaged YAML files."""
FIT_DEFAULTS = CONFIGS / "fit_options.json"
"""fit's parser defaults, read instead of building the parser (`tscratch.cli.fit_options`)."""
OPTION_NAMES = CONFIGS / "cli_options.json"
"""The option names of fit, pretrain and fit-seq2seq and the help of fit's first screen, read
instead of building their parsers (`tscratch.cli.fit_options`)."""


def packaged_config(name: str) -> str:
    """`tiny` -> the path of tscratch/configs/tiny.yaml; a file path is returned as given.

    A bare name that is neither a packaged config nor a file is a `UserError` listing the
    packaged configs.
    """
    candidate = CONFIGS / f"{name}.yaml"
    bare = "/" not in name and not name.endswith((".yaml", ".yml", ".json"))
    if bare and candidate.is_file():
        return str(candidate)
    if bare and not Path(name).exists():
        names = packaged_configs()
        near = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise UserError(
            f"--config {name}: no such packaged config or file; {hint}packaged: {', '.join(names)}"
        )
    return name


def packaged_configs() -> list[str]:
    """The names `--config` takes without a path (tscratch/configs/*.yaml)."""
    return sorted(p.stem for p in CONFIGS.glob("*.yaml"))


OTHER_COMMANDS = {"pretrain": "pretrain", "seq2seq": "fit-seq2seq"}
"""Packaged configs named after another command than fit (`pretrain_tiny` is pretrain's)."""


def configs_for(command: str) -> list[str]:
    """The packaged configs of ``command`` (fit, pretrain, fit-seq2seq), by name."""
    return [
        name
        for name in packaged_configs()
        if OTHER_COMMANDS.get(name.split("_")[0], "fit") == command
    ]
