"""One place per fact: a config dataclass's fields become a LightningModule's flat arguments.

A task module is written against the typed config it trains (`__init__(self, config, *, lr...)`)
and decorated with `@config_arguments(EncoderConfig)`. The decorator gives `__init__` a signature
whose keyword arguments are the config's fields (types, defaults and docstrings taken from the
dataclass) followed by the module's own, so that

- the CLI and YAML files say `--model.d_model 128`, with `--help` text from the field docstring;
- a checkpoint's `hyper_parameters` hold plain values, and `load_from_checkpoint` rebuilds the
  module from them;
- adding a field to the config is one edit: it is then a flag, a hyperparameter, a checkpoint
  entry and (unless listed in the config's `RUNTIME_FIELDS`) part of the resume check.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import docstring_parser

_KW = inspect.Parameter.KEYWORD_ONLY


def config_arguments(config_class: type, *, param: str = "config") -> Callable:
    """Decorate `__init__(self, <param>: config_class, *, ...)` to take the fields flat.

    The decorated `__init__` must not call `save_hyperparameters`: the wrapper saves every
    argument, flat, after it returns.

    Args:
        config_class: a dataclass; each field becomes a keyword argument of the same name.
        param: the name of the `__init__` argument that receives the built config.
    """
    hints = typing.get_type_hints(config_class)
    fields = dataclasses.fields(config_class)
    docs = {
        p.arg_name: p.description or ""
        for p in docstring_parser.parse_from_object(config_class).params
    }

    def decorate(init: Callable) -> Callable:
        own = inspect.signature(init).parameters
        if param not in own:
            raise TypeError(f"{init.__qualname__} has no argument {param!r} for the config")
        flat = [
            inspect.Parameter(f.name, _KW, default=_default(f), annotation=hints[f.name])
            for f in fields
        ]
        rest = [p.replace(kind=_KW) for name, p in own.items() if name not in ("self", param)]
        signature = inspect.Signature([own["self"], *flat, *rest])
        names = {f.name for f in fields}

        @functools.wraps(init)
        def wrapper(self: Any, **kwargs: Any) -> None:
            bound = signature.bind(self, **kwargs)  # TypeError naming an unknown argument
            bound.apply_defaults()
            args = {k: v for k, v in bound.arguments.items() if k != "self"}
            flat = dict(args)
            config = config_class(**{k: args.pop(k) for k in list(args) if k in names})
            init(self, **{param: config}, **args)
            # Plain values under the CLI's own names. The frame is this function's: Lightning
            # would otherwise read `init`'s locals, which lack the flat names.
            self.save_hyperparameters(flat, frame=inspect.currentframe())

        wrapper.__signature__ = signature  # what inspect, jsonargparse and help() see
        wrapper.config_class = config_class  # the one place a task names its config
        wrapper.__doc__ = _with_field_docs(init.__doc__ or "", fields, docs)
        return wrapper

    return decorate


def architecture_keys(config_class: type) -> list[str]:
    """The config fields that shape the weights or give them their meaning (resume must match)."""
    runtime = getattr(config_class, "RUNTIME_FIELDS", frozenset())
    return [f.name for f in dataclasses.fields(config_class) if f.name not in runtime]


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty


def _with_field_docs(doc: str, fields: tuple, docs: dict[str, str]) -> str:
    """Append the config fields to the docstring's `Args:` section (jsonargparse's `--help`)."""
    lines = [f"    {f.name}: {' '.join(docs.get(f.name, '').split())}" for f in fields]
    head, sep, tail = doc.partition("Args:\n")
    if not sep:
        return f"{doc.rstrip()}\n\nArgs:\n" + "\n".join(lines) + "\n"
    indent = tail[: len(tail) - len(tail.lstrip(" "))]
    return head + sep + "\n".join(indent + line.strip() for line in lines) + "\n" + tail
