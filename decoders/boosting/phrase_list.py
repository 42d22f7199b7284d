"""The phrase-list format, for `--phrases` files and a manifest row's `phrases`: one phrase a line (an item), and
`phrase<TAB>weight` to give a phrase its own context score. Light (no torch): the manifest reader checks rows'
lists with it; `decoders/boosting/tree.py` builds the tree."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


def split_phrase(line: str, weighted: bool = True) -> tuple[str, float | None]:
    """`phrase` or `phrase<TAB>weight` -> (the phrase, its runs of spaces made one; the weight, None without one);
    `PhraseListError` (saying what, not where) for a weight that is not a number > 0 or an empty phrase. Not
    `weighted` (the phrase of a [phrase, weight] pair): a tab is a space like any other."""
    text, weight = line, None
    if weighted and "\t" in line:
        text, _, weight_text = line.rpartition("\t")
        try:
            weight = float(weight_text)
        except ValueError:
            raise PhraseListError(f"the weight after the tab must be a number > 0, got "
                                  f"{weight_text.strip()!r}") from None
        if not math.isfinite(weight) or weight <= 0:
            raise PhraseListError(f"the weight after the tab must be a number > 0, got {weight_text!r}")
    text = " ".join(text.split())
    if not text:
        raise PhraseListError("empty phrase (a blank line, only spaces, or nothing before the tab)")
    return text, weight


class PhraseListError(ValueError):
    """A phrase list that cannot be used: the message names the file and line."""


@dataclass(frozen=True)
class Phrase:
    text: str
    weight: float | None  # the phrase's own context score; None: the tree's default
    where: str  # "FILE, line N", for messages


def parse_phrase_lines(lines: Iterable[str], name: str) -> list[Phrase]:
    """Lines of a phrase list (`phrase` or `phrase<TAB>weight`) -> phrases; raises `PhraseListError` naming `name`
    and the line for an empty phrase or a weight that is not a number > 0. A weight is the phrase's context score:
    it replaces `CONTEXT_SCORE` for that phrase's tokens."""
    phrases = []
    for number, line in enumerate(lines, start=1):
        where = f"{name}, line {number}"
        try:
            text, weight = split_phrase(line.rstrip("\r\n"))
        except PhraseListError as error:
            raise PhraseListError(f"{where}: {error}") from None
        phrases.append(Phrase(text, weight, where))
    if not phrases:
        raise PhraseListError(f"{name}: no phrases (the file is empty)")
    return phrases


def read_phrase_list(path: str, name: str | None = None) -> list[Phrase]:
    """A phrase list file (UTF-8) -> phrases; see `parse_phrase_lines`."""
    name = name or str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except UnicodeDecodeError as error:
        raise PhraseListError(f"{name}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return parse_phrase_lines(lines, name)


__all__ = ["Phrase", "PhraseListError", "parse_phrase_lines", "read_phrase_list", "split_phrase"]
