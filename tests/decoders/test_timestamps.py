from __future__ import annotations

import pytest

from decoders.timestamps import ctc_frame_spans, refine_punctuation_spans, token_frame_spans, token_spans, word_spans


def test_rnnt_and_tdt_frame_spans():
    assert token_frame_spans([0, 0, 3]) == [(0, 1), (0, 1), (3, 4)]
    assert token_frame_spans([0, 2, 2], [2, 0, 3], kind="tdt") == [(0, 2), (2, 2), (2, 5)]
    with pytest.raises(ValueError, match="duration"):
        token_frame_spans([0, 1], [1], kind="tdt")
    with pytest.raises(ValueError, match="kind"):
        token_frame_spans([0], kind="rnn")


def test_token_spans_in_seconds():
    spans = token_spans(["▁a", "b"], [(2, 3), (3, 5)], frame_shift_s=0.08)
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [("▁a", pytest.approx(0.16), pytest.approx(0.24)),
                                                             ("b", pytest.approx(0.24), pytest.approx(0.40))]
    with pytest.raises(ValueError, match="pieces"):
        token_spans(["a"], [], 0.08)


UNK_TEXT = " \u2047 "  # how SentencePiece writes <unk> back as text


def pieces_to_text(pieces):
    return "".join(UNK_TEXT if p == "<unk>" else p for p in pieces).replace("\u2581", " ").strip()


def words(pieces, spans, punctuation=frozenset()):
    texts = [pieces_to_text([p]) for p in pieces]
    found = word_spans(pieces, texts, spans, 0.08, pieces_to_text, frozenset(punctuation))
    return [(w.text, w.start_frame, w.end_frame) for w in found]


def test_ctc_spans_run_from_the_previous_token_to_the_first_frame():
    assert ctc_frame_spans([]) == []
    assert ctc_frame_spans([0]) == [(0, 0)]
    assert ctc_frame_spans([3, 4, 9]) == [(2, 3), (3, 4), (4, 9)]
    assert token_frame_spans([3, 4, 9], kind="ctc") == [(2, 3), (3, 4), (4, 9)]
    assert token_frame_spans([3, 4], [1, 2], kind="tdt") == [(3, 4), (4, 6)]


def test_words_open_at_pieces_that_change_when_decoded():
    pieces = ["\u2581he", "llo", "\u2581wor", "ld"]
    assert words(pieces, [(1, 2), (2, 3), (5, 6), (7, 8)]) == [("hello", 1, 3), ("world", 5, 8)]
    # a word ends where its last piece ends (a TDT piece of duration 0 can end before the one before it)
    assert words(["\u2581a", "b"], [(0, 3), (2, 2)]) == [("ab", 0, 2)]
    # <unk> decodes to " ⁇ ", so it opens a word; pieces without a marker at the start join the first word
    assert words(["a", "\u2581b", "<unk>", "c"], [(0, 1), (1, 2), (2, 3), (4, 5)]) == [
        ("a", 0, 1), ("b", 1, 2), ("\u2047 c", 2, 5)]
    # a lone "▁" opens a word (NeMo keeps it with empty text if nothing follows; we leave it out)
    assert words(["\u2581", "c", "\u2581"], [(0, 1), (2, 3), (6, 7)]) == [("c", 0, 3)]
    assert words([], []) == []


def test_punctuation_joins_the_word_before_it():
    pieces = ["\u2581hi", ",", "\u2581there", "."]
    spans = [(0, 1), (1, 2), (3, 4), (5, 6)]
    assert words(pieces, spans, {",", "."}) == [("hi,", 0, 2), ("there.", 3, 6)]
    assert words(pieces, spans) == [("hi,", 0, 2), ("there.", 3, 6)]  # joined anyway: "," has no marker
    # a mark that carries "▁" joins the open word too, space and all (NeMo's rule, followed as it is)
    assert words(["\u2581a", "\u2581,"], [(0, 1), (4, 5)], {","}) == [("a ,", 0, 5)]


def test_punctuation_spans_shrink_for_ctc_and_tdt_only():
    texts, spans = ["a", "."], [(0, 2), (3, 5)]
    assert refine_punctuation_spans(texts, spans, "rnnt", frozenset(".")) == spans
    assert refine_punctuation_spans(texts, spans, "ctc", frozenset(".")) == [(0, 2), (3, 3)]
    assert refine_punctuation_spans(texts, spans, "tdt", frozenset(".")) == [(0, 2), (2, 2)]
    assert refine_punctuation_spans([".", "a"], spans, "tdt", frozenset(".")) == spans  # never the first
