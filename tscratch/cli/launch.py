"""What the three training commands (fit.py, pretrain.py, fit_seq2seq.py) share before their
work starts: console output, packaged config names, and building their `LightningCLI`.

- Log lines go to stdout as plain messages; two warnings that say nothing to a user are
  silenced (Lightning 2.6's `LeafSpec` notice under torch 2.13, and LightningCLI's note that
  `args` is meant for tests: the command line reaches it as `args` once config names are
  resolved, not as `sys.argv`).
- `--config NAME` names a config shipped in `tscratch/configs/` (so it works from a wheel too);
  without any `--config` the command's own packaged default is the parser's default config.
- Every command builds its CLI the same way: not run by Lightning (`run=False`, each command
  drives fit/test itself), seed 0 when none is given, the run's `config.yaml` rewritten on
  resume.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningCLI

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def console() -> None:
    """Plain log lines on stdout, and no warnings that say nothing to a user."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # Lightning 2.6 with torch 2.13
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")


def build_cli(
    cli_class: type[LightningCLI],
    task: type,
    data: type,
    args: list[str] | None,
    default: str,
    trainer_defaults: dict[str, Any],
) -> LightningCLI:
    """`cli_class(task, data)` on `args` (the command line when None), with config names
    resolved and `<default>.yaml` underneath when no `--config` is given; not yet run. Call
    `console()` first, before anything logs."""
    args, defaults = with_configs(sys.argv[1:] if args is None else args, default=default)
    return cli_class(
        task,
        data,
        args=args,
        run=False,
        seed_everything_default=0,  # what `true` means, without Lightning's "No seed found"
        trainer_defaults=trainer_defaults,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"default_config_files": defaults},
    )


def with_configs(args: list[str], default: str = "default") -> tuple[list[str], list[str]]:
    """The arguments with config names resolved, and the default config files.

    `--config tiny` is the packaged tiny.yaml. Without any `--config`, the packaged
    `<default>.yaml` (default.yaml for fit.py) is the parser's default config (flags override
    it; `--help` shows its values); with one, no file is layered underneath: a config never
    inherits from another behind the user's back.
    """
    resolved, named = [], False
    i = 0
    while i < len(args):
        arg = str(args[i])
        if arg in ("--config", "-c") and i + 1 < len(args):
            resolved += [arg, packaged_config(str(args[i + 1]))]
            named, i = True, i + 2
            continue
        if arg.startswith("--config="):
            resolved.append("--config=" + packaged_config(arg.removeprefix("--config=")))
            named = True
        else:
            resolved.append(args[i])
        i += 1
    return resolved, [] if named else [str(CONFIGS / f"{default}.yaml")]


def packaged_config(name: str) -> str:
    """`tiny` -> the path of tscratch/configs/tiny.yaml; anything else is returned as given."""
    candidate = CONFIGS / f"{name}.yaml"
    if "/" not in name and not name.endswith((".yaml", ".yml", ".json")) and candidate.is_file():
        return str(candidate)
    return name
