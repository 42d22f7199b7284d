"""Subtitle cues from word timestamps (`pipeline/exports/cues.py`): where a cue ends, how its lines are cut, how long
it stays; each rule on words whose right cues are obvious, and the rules together on random words."""

from __future__ import annotations

import random

import pytest

from pipeline.exports.cues import Cue, CueRules, TimedWord, balanced_lines, hold, split_cues

RULES = CueRules()


def spoken(text: str, start_s: float = 0.0, word_s: float = 0.3, gap_s: float = 0.05) -> list[TimedWord]:
    """The words of `text`, one after another: each `word_s` long, `gap_s` apart."""
    words = []
    for word in text.split():
        words.append(TimedWord(word, start_s, start_s + word_s))
        start_s += word_s + gap_s
    return words


def texts(cues: list[Cue]) -> list[str]:
    return [" ".join(cue.lines) for cue in cues]


def test_a_short_sentence_is_one_cue_on_one_line_from_its_first_word_to_its_last():
    (cue,) = split_cues(spoken("the tree split with a great ripping sound", start_s=1.0), RULES)
    assert cue.lines == ("the tree split with a great ripping sound",)
    assert cue.start_s == 1.0 and cue.end_s == pytest.approx(1.0 + 8 * 0.3 + 7 * 0.05)


def test_a_pause_longer_than_the_rule_ends_a_cue_and_a_shorter_one_does_not():
    words = spoken("call luis") + spoken("from the office", start_s=0.65 + 0.51)
    assert texts(split_cues(words, RULES)) == ["call luis", "from the office"]
    words = spoken("call luis") + spoken("from the office", start_s=0.65 + 0.49)
    assert texts(split_cues(words, RULES)) == ["call luis from the office"]
    assert texts(split_cues(words, CueRules(pause_s=0.4))) == ["call luis", "from the office"]


def test_a_sentence_end_ends_a_cue():
    assert texts(split_cues(spoken('Yes. No! "Really?" (fine.) maybe… Then more'), RULES)) == [
        "Yes.", "No!", '"Really?"', "(fine.)", "maybe…", "Then more"]
    assert texts(split_cues(spoken("3.5 percent e.g. done"), RULES)) == ["3.5 percent e.g.", "done"]


def test_a_cue_holds_at_most_two_lines_of_42_characters_balanced():
    text = "freedom is nothing else but the chance to do better and that is all we ever wanted from them"
    cues = split_cues(spoken(text, word_s=0.1, gap_s=0.0), RULES)
    assert " ".join(texts(cues)) == text
    for cue in cues:
        assert 1 <= len(cue.lines) <= 2 and all(len(line) <= 42 for line in cue.lines)
    first = cues[0]
    assert len(first.lines) == 2 and abs(len(first.lines[0]) - len(first.lines[1])) <= 8  # balanced, not 42 + stub
    # the first cue is as full as two lines allow: the next word would not fit
    assert len(balanced_lines(first.text.split() + [cues[1].lines[0].split()[0]], 42)) == 3


def test_a_cue_lasts_at_most_the_rule():
    words = spoken(" ".join(["go"] * 40), word_s=0.3, gap_s=0.1)  # 16 s of short words, no pause
    cues = split_cues(words, RULES)
    assert len(cues) > 2 and all(cue.end_s - cue.start_s <= 7.0 + 1e-9 for cue in cues)
    assert sum(len(cue.text.split()) for cue in cues) == 40


def test_a_word_longer_than_a_line_gets_a_line_of_its_own_and_is_never_cut():
    long = "pneumonoultramicroscopicsilicovolcanoconiosis-and-more"  # 54 characters
    cues = split_cues(spoken(f"a {long} b c"), RULES)
    assert " ".join(texts(cues)) == f"a {long} b c"
    assert any(line == long for cue in cues for line in cue.lines)


def test_balanced_lines_keep_the_fewest_lines_at_the_narrowest_width():
    assert balanced_lines("aaaa bb cc dddd".split(), 42) == ["aaaa bb cc dddd"]
    assert balanced_lines("aaaa bb cc dddd".split(), 10) == ["aaaa bb", "cc dddd"]
    assert balanced_lines(["x" * 50], 42) == ["x" * 50]
    assert balanced_lines([], 42) == []


def test_a_short_cue_is_held_until_the_next_one_or_the_minimum():
    cues = [Cue(0.0, 0.1, ("a",)), Cue(0.3, 0.4, ("b",)), Cue(5.0, 5.2, ("c",)), Cue(6.0, 8.0, ("d",))]
    held = hold(cues, 0.5)
    assert [(cue.start_s, cue.end_s) for cue in held] == [(0.0, 0.3), (0.3, 0.8), (5.0, 5.5), (6.0, 8.0)]


def test_a_word_without_duration_still_makes_a_cue_that_ends_after_it_starts():
    (cue,) = split_cues([TimedWord("uh", 2.0, 2.0)], RULES)
    assert cue.end_s > cue.start_s


@pytest.mark.parametrize("seed", range(5))
def test_every_word_is_in_exactly_one_cue_in_order_and_every_rule_holds(seed):
    generator = random.Random(seed)
    vocabulary = ["a", "the", "of", "transcription", "pipeline", "ray", "decoder", "okay.", "what?", "x" * 45]
    words, start_s = [], 0.0
    for _ in range(300):
        start_s += generator.choice([0.0, 0.05, 0.2, 0.6, 1.5])
        length_s = generator.uniform(0.0, 0.8)
        words.append(TimedWord(generator.choice(vocabulary), start_s, start_s + length_s))
        start_s += length_s
    rules = CueRules(max_line_chars=generator.choice([20, 42]), max_lines=generator.choice([1, 2, 3]))
    cues = split_cues(words, rules)
    assert " ".join(texts(cues)).split() == [word.text for word in words]
    assert all(a.start_s <= b.start_s for a, b in zip(cues, cues[1:]))
    position = 0
    for cue in cues:
        count = len(cue.text.split())
        inside = words[position:position + count]
        position += count
        assert cue.start_s == inside[0].start_s and cue.end_s >= max(word.end_s for word in inside)
        assert len(inside) == 1 or inside[-1].end_s - inside[0].start_s <= rules.max_cue_s
        assert all(b.start_s - a.end_s <= rules.pause_s for a, b in zip(inside, inside[1:]))
        assert len(cue.lines) <= rules.max_lines or len(inside) == 1
        assert all(len(line) <= rules.max_line_chars or " " not in line for line in cue.lines)
