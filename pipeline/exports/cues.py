"""Subtitle cues from word timestamps: where a cue ends, and how its text is cut into lines.

A cue is a run of consecutive words of one row (a row boundary always ends a cue). The words go in one by one; a
cue ends before a word when
- the pause between the previous word's end and this word's start is longer than `pause_s` (0.5 s),
- the previous word ends a sentence (`.`, `?`, `!`, `…` and the CJK full stops, closing quotes and brackets after
  them allowed), so a cased, punctuated model's sentences start cues of their own,
- the cue would last longer than `max_cue_s` (7 s) from its first word's start to this word's end, or
- its text would no longer fit in `max_lines` (2) lines of at most `max_line_chars` (42) characters, wrapped at
  spaces (the rules of most broadcasters' subtitle guides: 37-42 characters, 2 lines, 1-7 s a cue).
A word longer than a line is never cut: it gets a line of its own.

A cue's lines are balanced: the shortest width that still wraps its words into as few lines as `max_line_chars`
allows, so that two lines are about equally long rather than a full line and a stub (`balanced_lines`).

Times: a cue runs from its first word's start to its last word's end, then is held at least `min_cue_s` (0.5 s)
on screen where the next cue leaves room (`hold`), and never ends before it starts.

Dims: none; pure Python on one row's words (a row has tens to thousands of words, each looked at once).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeline.settings import check_settings, setting

SENTENCE_ENDS = (".", "?", "!", "…", "。", "？", "！")
CLOSERS = "\"'”’»)]}"  # may follow a sentence's end: `"Go."` and `(yes!)` end sentences too
MIN_TICK_S = 0.001  # the shortest cue: subtitle times are whole milliseconds


@dataclass(frozen=True)
class CueRules:
    """When a subtitle cue ends and how its lines are cut (module docstring)."""

    max_line_chars: int = setting(42, "most characters in a subtitle line (a longer word gets a line of its own)",
                                  minimum=1)
    max_lines: int = setting(2, "most lines in a subtitle cue", minimum=1)
    max_cue_s: float = setting(7.0, "longest a subtitle cue lasts, seconds", above=0, finite=True)
    pause_s: float = setting(0.5, "a pause between two words longer than this, seconds, ends a subtitle cue",
                             minimum=0, finite=True)
    min_cue_s: float = setting(0.5, "shortest a subtitle cue is shown where the next one leaves room, seconds",
                               minimum=0, finite=True)

    def __post_init__(self) -> None:
        check_settings(self, "cues")


@dataclass(frozen=True)
class TimedWord:
    text: str
    start_s: float  # from the start of the recording
    end_s: float
    confidence: float | None = None


@dataclass(frozen=True)
class Cue:
    start_s: float
    end_s: float
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def ends_sentence(word: str) -> bool:
    return word.rstrip(CLOSERS).endswith(SENTENCE_ENDS)


def line_count(lengths: Sequence[int], width: int) -> int:
    """Lines that words of these lengths take, wrapped greedily at spaces to `width` characters (a longer word takes
    a line of its own). Greedy filling gives the fewest lines."""
    lines, used = 0, 0
    for length in lengths:
        if lines and used + 1 + length <= width:
            used += 1 + length
        else:
            lines, used = lines + 1, length
    return lines


def wrap(words: Sequence[str], width: int) -> list[str]:
    """The words wrapped greedily at spaces to `width` characters."""
    lines: list[list[str]] = []
    used = 0
    for word in words:
        if lines and used + 1 + len(word) <= width:
            lines[-1].append(word)
            used += 1 + len(word)
        else:
            lines.append([word])
            used = len(word)
    return [" ".join(line) for line in lines]


def balanced_lines(words: Sequence[str], max_line_chars: int) -> list[str]:
    """The words in as few lines of at most `max_line_chars` as they fit in, at the narrowest width that keeps that
    many lines (found by bisection), so that the lines come out about equally long."""
    lengths = [len(word) for word in words]
    fewest = line_count(lengths, max_line_chars)
    # never wider than the rule: a word longer than a line sits alone at any width (`wrap`)
    low, high = min(max(lengths, default=0), max_line_chars), max_line_chars
    while low < high:  # the narrowest width whose greedy wrap needs no more than `fewest` lines
        middle = (low + high) // 2
        if line_count(lengths, middle) <= fewest:
            high = middle
        else:
            low = middle + 1
    return wrap(words, low)


def split_cues(words: Iterable[TimedWord], rules: CueRules) -> list[Cue]:
    """One row's words (in time order, times from the recording's start) -> its cues, by the rules of the module
    docstring. Cues are not yet `hold`-extended: that needs the recording's next cue."""
    cues: list[Cue] = []
    current: list[TimedWord] = []
    lines, used = 0, 0  # the greedy wrap of `current` at max_line_chars, kept as words come
    for word in words:
        if current:
            previous = current[-1]
            fits_line = used + 1 + len(word.text) <= rules.max_line_chars
            if (word.start_s - previous.end_s > rules.pause_s or ends_sentence(previous.text)
                    or word.end_s - current[0].start_s > rules.max_cue_s
                    or not fits_line and lines + 1 > rules.max_lines):
                cues.append(make_cue(current, rules))
                current, lines, used = [], 0, 0
        if current and used + 1 + len(word.text) <= rules.max_line_chars:
            used += 1 + len(word.text)
        else:
            lines, used = lines + 1, len(word.text)
        current.append(word)
    if current:
        cues.append(make_cue(current, rules))
    return cues


def make_cue(words: Sequence[TimedWord], rules: CueRules) -> Cue:
    start_s = words[0].start_s
    end_s = max(max(word.end_s for word in words), start_s + MIN_TICK_S)
    return Cue(start_s, end_s, tuple(balanced_lines([word.text for word in words], rules.max_line_chars)))


def hold(cues: Sequence[Cue], min_cue_s: float) -> list[Cue]:
    """A recording's cues in start order, each held until at least `min_cue_s` after its start where the next cue
    starts later than that (else until the next cue starts, never shortened)."""
    held = []
    for index, cue in enumerate(cues):
        wanted = cue.start_s + min_cue_s
        if cue.end_s < wanted:
            next_start = cues[index + 1].start_s if index + 1 < len(cues) else float("inf")
            cue = Cue(cue.start_s, max(cue.end_s, min(wanted, next_start)), cue.lines)
        held.append(cue)
    return held
