"""Command-line flags derived from a config dataclass, so a new field is added in one place.

    add_config_flags(parser, JudgeConfig, extra={"critique_includes_verdict": Flag(names=("--include-verdict",))})
    config = config_from_args(JudgeConfig, args)

Every field becomes `--field-name` with the dataclass's default (read by `metadata["parse"]` when the
field has one, else by its type) and, as help, the field's `metadata["help"]` or else its comment (nanoGPT style: on the field's line, or the comment lines
right above it). `Flag` adds what a class cannot say: older option names kept working, choices, a
default tied to another flag. The idea of TRL's `HfArgumentParser`, without its dependency.

`add_store_flag` is the one `--db` of every command that takes a store (sqlite-utils' shared option).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, dataclass
from typing import Any



@dataclass(frozen=True, slots=True, kw_only=True)
class Flag:
    """What a field's flag needs beyond the dataclass: extra option names, choices, a tied default."""

    names: tuple[str, ...] = ()  # more option strings for the same field (older names stay working)
    choices: tuple[Any, ...] | None = None
    tied_to: str | None = None  # unset: take this other field's value (e.g. stage 2's budget follows stage 1's)
    name: str | None = None  # the option string instead of --field-name (e.g. --base-url for base_urls)
    repeat: bool = False  # a tuple field given once per value (--base-url A --base-url B) instead of A,B
    metavar: str | None = None  # how the value is named in --help
    convert: Callable[[str], Any] | None = None  # reads the typed text instead of the field type's reading
    show: Callable[[Any], str] | None = None  # writes the default as it would be typed (with `convert`)
    renamed_from: tuple[str, ...] = ()  # older option names now refused with a one-line error naming this flag


def field_help(cls: type) -> dict[str, str]:
    """Each field's help text: `metadata["help"]`, else its trailing comment, else the comment block above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source shipped (a zipped or compiled install): metadata help only
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls) if "help" in f.metadata}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    out = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        text = next((comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments), "")
        above, n = [], node.lineno - 1
        while not text and n >= 1 and lines[n - 1].strip().startswith("#"):
            above.insert(0, comments[n])
            n -= 1
        out[node.target.id] = text or " ".join(above)
    for f in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():  # a pydantic model: comments only
        if "help" in f.metadata:
            out[f.name] = f.metadata["help"]
    return out


def field_default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    raise TypeError(f"field {f.name} has no default: give it one to derive a flag")


def add_config_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    extra: Mapping[str, Flag] | None = None,
    given_only: bool = False,
    skip: Collection[str] = (),
) -> None:
    """Add one flag per field of the dataclass `cls` (dest = the field's name), except the fields in `skip`.

    `given_only`: every flag defaults to None ("not given"; the help still shows the field's
    default), so `given_flags` can pass on only what was typed, and booleans are plain switches.
    A skipped field keeps its default in `config_from_args` (a command that sets it another way)."""
    extra = extra or {}
    hints = typing.get_type_hints(cls)
    helps = field_help(cls)
    unknown = sorted(set(skip) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise TypeError(f"skip names {unknown[0]!r}, not a field of {cls.__name__}")
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        spec = extra.get(f.name, Flag())
        names = (spec.name or f"--{f.name.replace('_', '-')}", *spec.names)
        default = None if spec.tied_to else field_default(f)
        shown = (f"same as --{spec.tied_to.replace('_', '-')}" if spec.tied_to
                 else (spec.show or _shown)(default).replace("%", "%%"))
        text = helps.get(f.name, "").replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": f.name, "default": None if given_only else default,
                                  "help": f"{text} (default: {shown}){'; repeatable' if spec.repeat else ''}".strip()}
        if spec.choices is not None:
            kwargs["choices"] = spec.choices
        # the flag's own conversion, else a field's own reading (`metadata["parse"]`, e.g. a bounded seed), else its type's
        parsing = ({"type": spec.convert} if spec.convert else
                   {"type": f.metadata["parse"]} if "parse" in f.metadata else _parsing(hints[f.name], f.name))
        if spec.repeat:
            parsing = {"action": "append"}
        elif given_only and parsing.get("action") is argparse.BooleanOptionalAction:
            parsing = {"action": "store_true"}
        if spec.metavar:
            parsing["metavar"] = spec.metavar
        parser.add_argument(*names, **kwargs, **parsing)
        for old in spec.renamed_from:
            parser.add_argument(old, action=_Renamed, new=names[0], help=argparse.SUPPRESS)


class _Renamed(argparse.Action):
    """An option name a command no longer takes: argparse's one-line error names the flag to use instead."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs="?", default=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} was renamed: use {self.new}")


def given_flags(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of `cls` whose flags (added with `given_only=True`) were given, as keyword arguments
    (a repeated flag's values as a tuple)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name, None) is not None}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}


def config_from_args(cls: type, args: argparse.Namespace, *, extra: Mapping[str, Flag] | None = None,
                     **changes: Any) -> Any:
    """An instance of `cls` from the flags `add_config_flags` added (tied fields filled in), plus `changes`.

    A field without a flag (skipped) keeps the class's default."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    for name, spec in (extra or {}).items():
        if spec.tied_to and name in values and values[name] is None:
            if spec.tied_to in values:
                values[name] = values[spec.tied_to]
            else:  # the field it follows has no flag here: both keep the class's defaults
                del values[name]
    return cls(**{**values, **changes})


# --- how a field's type reads from the command line ---------------------------------------------------------


def _parsing(hint: Any, name: str) -> dict[str, Any]:
    """argparse keywords for a field of type `hint`: an action for booleans, else a `type` converter."""
    optional, base = _unwrap_optional(hint)
    if base is bool:
        return {"action": argparse.BooleanOptionalAction}
    origin = typing.get_origin(base)
    if origin is tuple:
        return {"type": _or_none(_comma_list, optional), "metavar": "A,B,..."}
    if origin in (Mapping, dict) or base in (Mapping, dict):
        return {"type": _or_none(_weights, optional), "metavar": "NAME=W,..."}
    if base in (int, float, str):
        return {"type": _or_none(base, optional)} if optional else {"type": base}
    raise TypeError(f"field {name}: no command-line reading for type {hint!r}; give it one in reflectrm.flags")


def _shown(value: Any) -> str:
    """A default as it would be typed: "accuracy=1.0" for a mapping, "a,b" for a tuple of names."""
    if isinstance(value, Mapping) or (isinstance(value, tuple) and value and all(
            isinstance(v, tuple) and len(v) == 2 for v in value)):
        return ",".join(f"{k}={v}" for k, v in dict(value).items())
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def _unwrap_optional(hint: Any) -> tuple[bool, Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return True, args[0]
    return False, hint


def _or_none(convert: Callable[[str], Any], optional: bool) -> Callable[[str], Any]:
    """`convert`, and "none" for None when the field is optional (`--max-time-s none`)."""
    if not optional:
        return convert

    def read(text: str) -> Any:
        return None if text.strip().lower() == "none" else convert(text)

    read.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its error message
    return read


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _weights(text: str) -> dict[str, float]:
    """ "accuracy=1,format=0.5" -> {"accuracy": 1.0, "format": 0.5}."""
    out = {}
    for item in _comma_list(text):
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():  # argparse prints this message as is, with the flag's name and exit 2
            raise argparse.ArgumentTypeError(f"{item!r} is not NAME=WEIGHT: write e.g. accuracy=1,format=0.5")
    return out

