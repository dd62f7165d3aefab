"""One place per fact: a config dataclass's fields become a LightningModule's flat arguments.

A task module is written against the typed configs it trains (`__init__(self, config, *, ...,
optim, ...)`) and decorated once per config: `@config_arguments(EncoderConfig)` for the
architecture, `@config_arguments(OptimizerConfig, param="optim")` for the optimizer and its
schedule. Each decorator puts the config's fields (types, defaults and docstrings taken from the
dataclass) in the signature where its argument stood, so that

- the CLI and YAML files say `--model.d_model 128` and `--model.lr 3e-4`, with `--help` text
  from the field docstring;
- a checkpoint's `hyper_parameters` hold plain values, and `load_from_checkpoint` rebuilds the
  module from them;
- adding a field to a config is one edit: it is then a flag, a hyperparameter, a checkpoint
  entry and (for the architecture config, unless listed in its `RUNTIME_FIELDS`) part of the
  resume check.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any

import docstring_parser

_KW = inspect.Parameter.KEYWORD_ONLY


def config_arguments(
    config_class: type,
    *,
    param: str = "config",
    defaults: Mapping[str, Any] | None = None,
    auto: Collection[str] = (),
) -> Callable:
    """Decorate `__init__(self, ..., <param>: config_class, ...)` to take the fields flat.

    Decorators stack, one per config: together they build every config from the flat arguments
    (the outermost first) and save the hyperparameters once. The decorated `__init__` must not
    call `save_hyperparameters`: the outermost wrapper saves every argument, flat, after it
    returns.

    Args:
        config_class: a dataclass; each field becomes a keyword argument of the same name.
        param: the name of the `__init__` argument that receives the built config. `config`
            names the architecture: the config `EncoderTask.config_class()` returns.
        defaults: field name -> the default this `__init__` gives it, where it differs from the
            dataclass's.
        auto: fields that also take "auto" (the CLI's type, for tscratch fit to choose from the
            data before the module is built; the config itself refuses it).
    """
    hints = typing.get_type_hints(config_class)
    fields = dataclasses.fields(config_class)
    names = {f.name for f in fields}
    defaults = dict(defaults or {})
    if unknown := sorted(set(defaults) - names):
        raise TypeError(f"{config_class.__name__} has no field {unknown[0]!r} to give a default")
    if unknown := sorted(set(auto) - names):
        raise TypeError(f"{config_class.__name__} has no field {unknown[0]!r} to take 'auto'")
    annotations = {
        name: hint | typing.Literal["auto"] if name in auto else hint
        for name, hint in hints.items()
    }
    docs = {
        p.arg_name: p.description or ""
        for p in docstring_parser.parse_from_object(config_class).params
    }

    def decorate(init: Callable) -> Callable:
        own = inspect.signature(init).parameters
        if param not in own:
            raise TypeError(f"{init.__qualname__} has no argument {param!r} for the config")
        flat = [
            inspect.Parameter(
                f.name,
                _KW,
                default=defaults.get(f.name, _default(f)),
                annotation=annotations[f.name],
            )
            for f in fields
        ]
        parameters = [own["self"]]
        for name, p in own.items():
            if name == param:
                parameters += flat  # where the config stood: the signature keeps its order
            elif name != "self":
                parameters.append(p.replace(kind=_KW))
        signature = inspect.Signature(parameters)
        call = getattr(init, "build", init)  # a decorator below builds its own config

        def build(self: Any, **kwargs: Any) -> dict[str, Any]:
            """Build the config, run `init`; the flat arguments, defaults applied."""
            bound = signature.bind(self, **kwargs)  # TypeError naming an unknown argument
            bound.apply_defaults()
            args = {k: v for k, v in bound.arguments.items() if k != "self"}
            rest = {k: v for k, v in args.items() if k not in names}
            call(self, **{param: config_class(**{k: args[k] for k in names})}, **rest)
            return args

        @functools.wraps(init)
        def wrapper(self: Any, **kwargs: Any) -> None:
            flat = build(self, **kwargs)
            # Plain values under the CLI's own names. The frame is this function's: Lightning
            # would otherwise read `init`'s locals, which lack the flat names.
            self.save_hyperparameters(flat, frame=inspect.currentframe())

        wrapper.__signature__ = signature  # what inspect, jsonargparse and help() see
        wrapper.build = build  # what a decorator stacked above calls instead: it saves once
        # The one place a task names its configs: argument -> config class.
        wrapper.configs = {**getattr(init, "configs", {}), param: config_class}
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
    """Add the config fields to the docstring's `Args:` section (jsonargparse's `--help`)."""
    lines = [f"    {f.name}: {' '.join(docs.get(f.name, '').split())}" for f in fields]
    head, sep, tail = doc.partition("Args:\n")
    if not sep:
        return f"{doc.rstrip()}\n\nArgs:\n" + "\n".join(lines) + "\n"
    indent = tail[: len(tail) - len(tail.lstrip(" "))]
    return head + sep + "\n".join(indent + line.strip() for line in lines) + "\n" + tail
