"""Settings declared once: a config dataclass's field carries its help, flag and bounds (`setting`), and from it
come the command-line flag (`add_flags`), the YAML key (the field's name), the value read back from the flags
(`overrides_from_args`) and the checks of its type, choices and bounds (`check_settings`).

    beam_size: int = setting(4, "beam width", minimum=1)

gives `--beam-size N` (help "beam width (default: 4)"), the YAML key `decoding.beam_size` and the refusal
"decoding.beam_size must be an integer >= 1, got 0". A section of a job's config is a field declared with
`section(title, Class)`: its settings are grouped under that title in `--help` and nested under its name in YAML.
Checks that tie two settings together stay in the dataclass's `__post_init__`, after `check_settings`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import operator
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

SETTING = "loopscribe.setting"
SECTION = "loopscribe.section"


@dataclass(frozen=True)
class Setting:
    """What a field declares beside its default: see `setting`."""

    help: str | Callable[[], str]
    flag: str | None = None  # the flag's name; None: `--` + the field's name with dashes
    aliases: tuple[str, ...] = ()  # more names of the same flag, listed in --help (NeMo's names)
    hidden_aliases: tuple[str, ...] = ()  # old names, still read, not listed
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None  # an exclusive minimum
    finite: bool = False
    choices: tuple[Any, ...] | Callable[[], tuple[Any, ...]] | None = None  # None: a Literal annotation's values
    parse: Callable[[str], Any] | None = None  # the flag's value parser; None: from the annotation
    metavar: str | None = None
    default_help: str | None = None  # what --help calls the default; None: the value itself
    checked: bool = True  # False: the annotation is not checked here (its own __post_init__ check does)
    group: str | None = None  # the --help group it is listed in; None: its section's


def setting(default: Any = dataclasses.MISSING, help: str | Callable[[], str] = "", *,
            default_factory: Any = dataclasses.MISSING, **declared: Any) -> Any:
    """A dataclass field with its declaration (the keywords of `Setting`)."""
    return field(default=default, default_factory=default_factory, metadata={SETTING: Setting(help, **declared)})


def shared(config_class: type, key: str, **changes: Any) -> Any:
    """A field declared as the setting at dotted `key` of `config_class` is (its default, help, flag and bounds), with
    `changes` (`default=` among them): for a job whose config holds a setting of another job's, declared once."""
    for dotted, f, declaration, hint in declared(config_class):
        if dotted == key:
            default = changes.pop("default", _default_of(f))
            changes.setdefault("choices", _choices(declaration, hint))  # a Literal's values, whatever it is annotated
            return field(default=default, metadata={SETTING: dataclasses.replace(declaration, **changes)})
    raise KeyError(f"{config_class.__name__} has no setting {key}")


def section(title: str, section_class: type) -> Any:
    """A dataclass field holding a section of settings (`section_class`), titled `title` in --help."""
    return field(default_factory=section_class, metadata={SECTION: title})


# --- reading the declarations ------------------------------------------------------------------------------
def declared(config_class: type) -> Iterable[tuple[str, dataclasses.Field, Setting, Any]]:
    """(dotted key, field, its Setting, its resolved annotation) of every setting of `config_class`, sections
    included, in declaration order."""
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        if SECTION in f.metadata:
            for key, inner, declaration, hint in declared(hints[f.name]):
                yield f"{f.name}.{key}", inner, declaration, hint
        elif SETTING in f.metadata:
            yield f.name, f, f.metadata[SETTING], hints[f.name]


def sections(config_class: type) -> dict[str, tuple[str, type]]:
    """name -> (title, class) of `config_class`'s sections."""
    hints = typing.get_type_hints(config_class)
    return {f.name: (f.metadata[SECTION], hints[f.name]) for f in dataclasses.fields(config_class)
            if SECTION in f.metadata}


def _base(hint: Any) -> tuple[Any, bool]:
    """An annotation without its `| None` -> (the rest, whether None is allowed)."""
    args = typing.get_args(hint)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return functools.reduce(operator.or_, rest), True
    return hint, False


def _choices(declaration: Setting, hint: Any) -> tuple[Any, ...] | None:
    if declaration.choices is not None:
        return declaration.choices() if callable(declaration.choices) else declaration.choices
    base, _ = _base(hint)
    return typing.get_args(base) if typing.get_origin(base) is Literal else None


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def _words(values: Iterable[Any]) -> str:
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


# --- checks -------------------------------------------------------------------------------------------------
def check_settings(instance: Any, prefix: str = "") -> None:
    """Refuse a value of the wrong type, outside its choices or bounds, naming the setting (`prefix.name`)."""
    hints = typing.get_type_hints(type(instance))
    for f in dataclasses.fields(instance):  # its own settings: a section checks its own
        declaration = f.metadata.get(SETTING)
        if declaration is None or not declaration.checked:
            continue
        value = getattr(instance, f.name)
        problem = _problem(value, declaration, hints[f.name])
        if problem:
            raise ValueError(f"{prefix + '.' if prefix else ''}{f.name} must be {problem}, got {value!r}")


def _problem(value: Any, declaration: Setting, hint: Any) -> str | None:
    base, optional = _base(hint)
    if value is None:
        return None if optional else "given"
    choices = _choices(declaration, hint)
    if choices is not None:
        return None if value in choices else f"one of {_words(choices)}"
    if base is bool:
        return None if isinstance(value, bool) else "true or false"
    if base is str:
        return None if isinstance(value, str) else "a string"
    if base is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"an integer{_bounds(declaration)}"
    elif base is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return f"a number{_bounds(declaration)}"
        if declaration.finite and not math.isfinite(value):
            return f"a finite number{_bounds(declaration)}"
    else:
        return None
    kind = "an integer" if base is int else "a number"
    if declaration.minimum is not None and value < declaration.minimum or \
            declaration.maximum is not None and value > declaration.maximum or \
            declaration.above is not None and not value > declaration.above:
        return f"{kind}{_bounds(declaration)}"
    return None


def _bounds(declaration: Setting) -> str:
    low, high, above = declaration.minimum, declaration.maximum, declaration.above
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}"
    if low is not None:
        return f" >= {low:g}"
    if above is not None:
        return f" > {above:g}"
    return f" <= {high:g}" if high is not None else ""


# --- flags --------------------------------------------------------------------------------------------------
def flag_of(f: dataclasses.Field, declaration: Setting) -> str:
    return declaration.flag or "--" + f.name.replace("_", "-")


def add_flags(parser: argparse.ArgumentParser, config_class: type, keys: Iterable[str] | None = None,
              dests: dict[str, str] | None = None) -> None:
    """A flag for each setting of `config_class` (or those of `keys`, dotted), grouped by section. A flag stores
    None unless given, so that `overrides_from_args` tells given flags from defaults; its dest is the dotted key
    unless `dests` names another."""
    wanted = None if keys is None else set(keys)
    titles = sections(config_class)
    groups: dict[str, Any] = {}
    for key, f, declaration, hint in declared(config_class):
        if wanted is not None and key not in wanted:
            continue
        title = declaration.group or (titles[key.split(".")[0]][0] if "." in key else None)
        if wanted is None and title and title not in groups:
            groups[title] = parser.add_argument_group(title)
        target = groups.get(title, parser)
        _add_flag(target, key, f, declaration, hint, _default_of(f), (dests or {}).get(key, key))


def parser_for(config_class: type, description: str | None, prog: str | None = None) -> argparse.ArgumentParser:
    """A job's parser: a flag for every setting of `config_class` (`add_flags`), the job's docstring as its help."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(parser, config_class)
    return parser


def _add_flag(target: Any, key: str, f: dataclasses.Field, declaration: Setting, hint: Any, default: Any,
              dest: str) -> None:
    help_text = declaration.help() if callable(declaration.help) else declaration.help
    base, _ = _base(hint)
    names = [flag_of(f, declaration), *declaration.aliases]
    if base is bool:
        action = "store_false" if default else "store_true"
        target.add_argument(*names, dest=dest, action=action, default=None, help=help_text)
    else:
        shown = declaration.default_help if declaration.default_help is not None else \
            f"{default:g}" if isinstance(default, float) else \
            " ".join(map(str, default)) if isinstance(default, tuple) else default
        if shown is not None and shown != "":
            help_text = f"{help_text} (default: {shown})"
        options: dict[str, Any] = {"dest": dest, "default": None, "help": help_text}
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            options["required"] = True
        if typing.get_origin(base) is tuple:
            options["nargs"] = "+"
            item = typing.get_args(base)[0]
            if item in (int, float):
                options["type"] = item
        elif declaration.parse is not None:
            options["type"] = declaration.parse
        elif base in (int, float):
            options["type"] = base
        choices = _choices(declaration, hint)
        if choices is not None and declaration.parse is None:
            options["choices"] = choices
        if declaration.metavar or "choices" not in options:
            options["metavar"] = declaration.metavar or f.name.upper()
        target.add_argument(*names, **options)
    for old in declaration.hidden_aliases:
        target.add_argument(old, dest=dest, default=None, help=argparse.SUPPRESS,
                            **({"type": base} if base in (int, float) else {}))


def from_args(config_class: type, args: argparse.Namespace) -> Any:
    """`config_class` from the flags `add_flags` declared: the flags given, the defaults for the rest."""
    return _build(config_class, overrides_from_args(args, config_class))


def _build(config_class: type, values: dict[str, Any]) -> Any:
    titled = sections(config_class)
    given = {name: (_build(titled[name][1], value) if name in titled else
                    tuple(value) if isinstance(value, list) else value)
             for name, value in values.items() if value is not None}
    return config_class(**given)


def overrides_from_args(args: argparse.Namespace, config_class: type,
                        dests: dict[str, str] | None = None) -> dict[str, Any]:
    """The nested settings the flags gave (None where a flag was not given), for `merge` over a YAML file's."""
    nested: dict[str, Any] = {}
    for key, _, _, _ in declared(config_class):
        dest = (dests or {}).get(key, key)
        if not hasattr(args, dest):
            continue
        *path, name = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        value = getattr(args, dest)
        node[name] = list(value) if isinstance(value, tuple) else value
    return nested
