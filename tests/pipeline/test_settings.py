"""A setting declared once gives its flag, its YAML key and its checks (`pipeline/settings.py`)."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Literal

import pytest

from pipeline.config import TranscribeJobConfig, config_from_dict
from pipeline.settings import (
    SECTION,
    SETTING,
    add_flags,
    check_settings,
    declared,
    overrides_from_args,
    section,
    sections,
    setting,
)


@dataclass(frozen=True)
class Inner:
    size: int = setting(4, "how many", minimum=1)
    mode: Literal["a", "b"] = setting("a", "which one")
    rate: float | None = setting(None, "how fast", above=0, finite=True, default_help="as fast as it goes")
    fast: bool = setting(False, "go fast")
    careful: bool = setting(True, "skip the checks", flag="--no-care")

    def __post_init__(self) -> None:
        check_settings(self, "inner")


@dataclass(frozen=True)
class Outer:
    name: str = setting("x", "a name", aliases=("--title",))
    inner: Inner = section("the inner part", Inner)

    def __post_init__(self) -> None:
        check_settings(self)


def parse(*argv: str) -> dict:
    p = argparse.ArgumentParser()
    add_flags(p, Outer)
    return overrides_from_args(p.parse_args(list(argv)), Outer)


def test_one_declaration_gives_the_flag_the_yaml_key_and_the_check():
    assert parse() == {"name": None, "inner": {"size": None, "mode": None, "rate": None, "fast": None,
                                               "careful": None}}  # nothing given: nothing overrides YAML
    given = parse("--size", "8", "--mode", "b", "--rate", "1.5", "--fast", "--no-care", "--title", "y")
    assert given == {"name": "y", "inner": {"size": 8, "mode": "b", "rate": 1.5, "fast": True, "careful": False}}
    assert Outer(given["name"], Inner(**given["inner"])) == Outer("y", Inner(8, "b", 1.5, True, False))
    p = argparse.ArgumentParser()
    add_flags(p, Outer)
    help_text = p.format_help()
    assert "how many (default: 4)" in help_text and "(default: as fast as it goes)" in help_text
    assert "the inner part" in help_text
    with pytest.raises(SystemExit):  # a choice outside the Literal is refused by argparse too
        parse("--mode", "c")


@pytest.mark.parametrize(("values", "message"), [
    ({"size": 0}, "inner.size must be an integer >= 1, got 0"),
    ({"size": 2.5}, "inner.size must be an integer >= 1, got 2.5"),
    ({"size": True}, "inner.size must be an integer"),
    ({"mode": "c"}, "inner.mode must be one of a or b, got 'c'"),
    ({"rate": 0.0}, "inner.rate must be a number > 0, got 0.0"),
    ({"rate": float("inf")}, "inner.rate must be a finite number > 0"),
    ({"rate": float("nan")}, "inner.rate must be a number > 0"),
    ({"fast": "yes"}, "inner.fast must be true or false"),
])
def test_checks_come_from_the_declaration(values, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Inner(**values)
    Inner(rate=None)  # optional: None is allowed


def test_every_job_setting_has_one_flag_and_its_yaml_key():
    p = argparse.ArgumentParser()
    add_flags(p, TranscribeJobConfig)
    flags = [a for a in p._actions if a.dest != "help"]
    keys = [key for key, *_ in declared(TranscribeJobConfig)]
    assert sorted({a.dest for a in flags}) == sorted(keys)  # each setting a flag, the hidden old names beside it
    for cls in (TranscribeJobConfig, *(c for _, c in sections(TranscribeJobConfig).values())):
        assert all(SETTING in f.metadata or SECTION in f.metadata for f in dataclasses.fields(cls)), cls
    nested = overrides_from_args(p.parse_args([]), TranscribeJobConfig)
    assert config_from_dict({k: v for k, v in nested.items() if v is not None and not isinstance(v, dict)}) \
        == TranscribeJobConfig()
