"""The phrase-list format, for `--phrases` files and a manifest row's `phrases`: one phrase a line (an item), and
`phrase<TAB>weight` to give a phrase its own context score. Light (no torch): the manifest reader checks rows'
lists with it; `decoders/boosting/tree.py` builds the tree.

Casing (`phrase_casings`), for a model whose tokenizer writes capitals (parakeet's): its tokens for "Paris" and
"paris" differ, and it writes "Paris". A phrase that holds a capital is boosted as written: its writer chose the
casing ("NASA", "iPhone", "McDonald's"). A phrase written all in lower case is boosted as written, with its first
letter capitalised (a sentence's start: "Turn on the lights"), and with every word capitalised but the minor ones
inside it (a name: "Bank of America", "Paris"). Acronyms are not guessed ("bbc" is not also "BBC": "Bob" would
then be "BOB" too): write them in capitals. A lower-case tokenizer lowercases every phrase instead, as before.
"""

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


# words a capitalised name keeps in lower case inside it ("Bank of America", "Tower of London")
MINOR_WORDS = frozenset("a an and as at but by de del der for from in la le nor of on or the to van von with".split())


def phrase_casings(text: str) -> list[str]:
    """The casings a cased tokenizer's model may write a phrase in (module docstring): `text` first, then for a
    phrase written all in lower case its sentence-start and name casings, each once."""
    if not any(char.islower() for char in text) or any(char.isupper() for char in text):
        return [text]
    words = text.split(" ")
    sentence = [_capitalised(words[0]), *words[1:]]
    name = [_capitalised(word) if index == 0 or word not in MINOR_WORDS else word
            for index, word in enumerate(words)]
    return list(dict.fromkeys([text, " ".join(sentence), " ".join(name)]))


def _capitalised(word: str) -> str:
    return word[:1].upper() + word[1:] if word[:1].isalpha() and len(word[:1].upper()) == 1 else word


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


__all__ = ["MINOR_WORDS", "Phrase", "PhraseListError", "parse_phrase_lines", "phrase_casings", "read_phrase_list",
           "split_phrase"]
