"""Command-line flags generated from a dataclass, and dataclasses read back from JSON.

    parser = argparse.ArgumentParser()
    add_flags(parser, TrainConfig, aliases={"updates": "--steps"})   # --lr, --grpo.beta, --shaping.zscore ...
    args = parser.parse_args(["--lr", "3e-4", "--grpo.beta", "0.1"])
    cfg = build(TrainConfig, given(args))                             # TrainConfig(lr=3e-4, grpo=GRPOSettings(beta=0.1))
    cfg = build(TrainConfig, given(args), base=json.load(open("runs/x/config.json")))

Every field becomes ``--name`` (nested dataclasses ``--parent.name``), its help is the field's
comment in the class source plus its default, and a field added to the dataclass gets its flag
without touching the command line. A flag that is not given stays out of the result, so a
config file's values hold unless a flag overrides them.

Why not tyro or simple-parsing: agentlab's command is argparse with one subparser per command,
its configs use a handful of types (bool, int, float, str, their None-able forms, ``int |
list[int]``, a tuple, a dict), and this file is the whole mapping, readable next to the
dataclass. Values on the command line are plain text: ``none`` for None, ``0,1`` or ``[0, 1]``
for lists and tuples, JSON for dicts.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import io
import json
import tokenize
import types
import typing
from typing import Any, Union

# ---------------------------------------------------------------------------- reading the dataclass


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's one-line doc: the ``# comment`` on the line that declares it."""
    docs: dict[str, str] = {}
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # defined where no source file is kept (a REPL): no help text
        return docs
    for line in source.splitlines():
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
        except (tokenize.TokenError, IndentationError):
            continue
        if len(tokens) > 2 and tokens[0].type == tokenize.NAME and tokens[1].string == ":":
            comment = next((t.string for t in tokens if t.type == tokenize.COMMENT), None)
            if comment:
                docs[tokens[0].string] = comment.lstrip("#").strip()
    return docs


def hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def leaves(cls: type, prefix: str = ""):
    """``(dotted name, type, default, doc)`` for every field, nested dataclasses opened up."""
    types_, docs = hints(cls), field_docs(cls)
    for f in dataclasses.fields(cls):
        hint = types_[f.name]
        if dataclasses.is_dataclass(hint):
            yield from leaves(hint, f"{prefix}{f.name}.")
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        yield f"{prefix}{f.name}", hint, default, docs.get(f.name, "")


def type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _members(hint: Any) -> tuple | None:
    """The members of a union type (``int | None``, ``Union[int, str]``), else None."""
    return typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else None


# ---------------------------------------------------------------------------- text and JSON to values

def parse_text(text: str, hint: Any) -> Any:
    """A command-line string as a value of type ``hint``; ValueError says what was expected."""
    members = _members(hint)
    if members is not None:
        if type(None) in members and text.strip().lower() in ("none", "null"):
            return None
        for member in (m for m in members if m is not type(None)):
            try:
                return parse_text(text, member)
            except ValueError:
                continue
        raise ValueError(f"{text!r} is not a {type_name(hint)}")
    origin = typing.get_origin(hint) or hint
    if hint is bool:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{text!r} is not true or false")
    if hint in (int, float, str):
        return hint(text)
    if origin in (list, tuple):
        items = json.loads(text) if text.strip().startswith("[") else [t for t in text.split(",") if t.strip()]
        args = typing.get_args(hint)
        item_types = args if origin is tuple and args and args[-1] is not Ellipsis else [args[0] if args else str] * len(items)
        if len(item_types) != len(items):
            raise ValueError(f"{text!r} has {len(items)} items; {type_name(hint)} takes {len(item_types)}")
        values = [_item(v, t) for v, t in zip(items, item_types)]
        return tuple(values) if origin is tuple else values
    if origin is dict:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"{text!r} is not a JSON object")
        return value
    raise ValueError(f"no command-line form for {type_name(hint)}")


def _item(value: Any, hint: Any) -> Any:
    """One item of a list given on the command line: text (``0,1``) or a JSON value (``[0, 1]``)."""
    if isinstance(value, str):
        return parse_text(value, hint)
    try:
        return coerce(value, hint, "item")
    except TypeError as err:
        raise ValueError(str(err)) from None


def coerce(value: Any, hint: Any, where: str) -> Any:
    """A JSON value as type ``hint`` (lists become tuples where the field is a tuple, objects become
    nested dataclasses); TypeError names the field ``where`` and what was expected."""
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object of {hint.__name__} fields, got {value!r}")
        return from_dict(hint, value, f"{where}.")
    members = _members(hint)
    if members is not None:
        if value is None and type(None) in members:
            return None
        for member in (m for m in members if m is not type(None)):
            try:
                return coerce(value, member, where)
            except TypeError:
                continue
        raise TypeError(f"{where}: expected {type_name(hint)}, got {value!r}")
    origin = typing.get_origin(hint) or hint
    ok = {bool: isinstance(value, bool), int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool), str: isinstance(value, str),
          dict: isinstance(value, dict), list: isinstance(value, list), tuple: isinstance(value, list)}.get(origin)
    if ok is None:
        return value  # a type this module does not know: taken as given
    if not ok:
        raise TypeError(f"{where}: expected {type_name(hint)}, got {value!r}")
    if origin is float:
        return float(value)
    if origin in (list, tuple):
        args = typing.get_args(hint)
        item_types = args if origin is tuple and args and args[-1] is not Ellipsis else [args[0] if args else Any] * len(value)
        if len(item_types) != len(value):
            raise TypeError(f"{where}: expected {len(item_types)} items ({type_name(hint)}), got {value!r}")
        items = [v if t is Any else coerce(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, item_types))]
        return tuple(items) if origin is tuple else items
    return value


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """``cls`` from a dict such as ``dataclasses.asdict`` writes (a run's ``config.json``); fields it
    lacks keep their defaults, and an unknown key or a value of the wrong type is an error naming it
    (``prefix``: the dotted name of a nested dataclass, for the message)."""
    if not isinstance(data, dict):
        raise TypeError(f"expected an object of {cls.__name__} fields, got {data!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown} for {cls.__name__}{f' ({prefix[:-1]})' if prefix else ''}; "
                         f"known: {sorted(known)}")
    types_ = hints(cls)
    return cls(**{k: coerce(v, types_[k], f"{prefix}{k}") for k, v in data.items()})


def with_value(obj: Any, dotted: str, value: Any) -> Any:
    """A copy of dataclass ``obj`` with the field at ``dotted`` ("grpo.beta") set to ``value``."""
    head, _, rest = dotted.partition(".")
    return dataclasses.replace(obj, **{head: with_value(getattr(obj, head), rest, value) if rest else value})


# ---------------------------------------------------------------------------- flags

def add_flags(parser: argparse.ArgumentParser, cls: type, aliases: dict[str, str] | None = None,
              choices: dict[str, tuple] | None = None) -> None:
    """One flag per field of ``cls`` (see the module docstring). ``aliases`` adds a second name for
    a field (``{"updates": "--steps"}``); ``choices`` limits a field's values."""
    aliases, choices = aliases or {}, choices or {}
    groups: dict[str, Any] = {}
    for name, hint, default, doc in leaves(cls):
        parent = name.rpartition(".")[0]
        if parent and parent not in groups:  # nested settings get a heading: their class's first docstring line
            nested = hints(cls)[parent.split(".")[0]]
            groups[parent] = parser.add_argument_group(f"{parent}", (nested.__doc__ or "").strip().splitlines()[0])
        target = groups.get(parent, parser)
        flags = [f"--{name.replace('_', '-')}"] + ([aliases[name]] if name in aliases else [])
        shown = json.dumps(default) if isinstance(default, (dict, list, tuple)) else default
        help_text = f"{doc} (default: {shown})".strip().replace("%", "%%")  # argparse formats help with %
        if hint is bool:
            target.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                                help=help_text)
            continue
        convert = functools.partial(parse_text, hint=hint)
        convert.__name__ = type_name(hint)  # argparse names the type in its error message
        metavar = "|".join(map(str, choices[name])) if name in choices else type_name(hint).upper().replace(" ", "")
        target.add_argument(*flags, dest=name, type=convert, choices=choices.get(name), default=argparse.SUPPRESS,
                            metavar=metavar, help=help_text)


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of ``cls`` set on the command line, by dotted name."""
    names = {name for name, *_ in leaves(cls)}
    return {k: v for k, v in vars(args).items() if k in names}


def build(cls: type, values: dict[str, Any], base: dict | None = None, source: str = "config") -> Any:
    """``cls`` from ``base`` (a dict, e.g. a config file; else the defaults) with ``values`` (dotted
    names, e.g. from `given`) set on top. Errors in ``base`` name ``source``."""
    try:
        obj = from_dict(cls, base or {})
    except (TypeError, ValueError) as err:
        raise type(err)(f"{source}: {err}") from None
    for dotted, value in values.items():
        obj = with_value(obj, dotted, value)
    return obj


def normalize_flag(token: str) -> str:
    """``--grpo.clip_coef=0.1`` -> ``--grpo.clip-coef=0.1``: field names are accepted as written in Python."""
    if not token.startswith("--"):
        return token
    name, sep, value = token.partition("=")
    return name.replace("_", "-") + sep + value
