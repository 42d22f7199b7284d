from __future__ import annotations

import pytest

from decoders.timestamps import token_frame_spans, token_spans, word_spans


def test_rnnt_and_tdt_frame_spans():
    assert token_frame_spans([0, 0, 3]) == [(0, 1), (0, 1), (3, 4)]
    assert token_frame_spans([0, 2, 2], [2, 0, 3], kind="tdt") == [(0, 2), (2, 2), (2, 5)]
    with pytest.raises(ValueError, match="duration"):
        token_frame_spans([0, 1], [1], kind="tdt")
    with pytest.raises(ValueError, match="kind"):
        token_frame_spans([0], kind="ctc")


def test_words_start_at_word_pieces_and_span_their_pieces():
    pieces = ["▁he", "llo", "▁wor", "ld", "▁a"]
    spans = token_frame_spans([1, 2, 5, 7, 9])
    words = word_spans(pieces, spans, frame_shift_s=0.08)
    assert [w.text for w in words] == ["hello", "world", "a"]
    assert [(w.start_frame, w.end_frame) for w in words] == [(1, 3), (5, 8), (9, 10)]
    assert words[1].start_s == pytest.approx(0.40) and words[1].end_s == pytest.approx(0.64)


def test_first_piece_without_marker_and_lone_markers():
    words = word_spans(["ab", "▁", "c", "▁"], [(0, 1), (2, 3), (3, 4), (6, 7)], frame_shift_s=0.04)
    assert [(w.text, w.start_frame, w.end_frame) for w in words] == [("ab", 0, 1), ("c", 2, 4)]
    assert word_spans([], [], 0.08) == []


def test_token_spans_in_seconds():
    spans = token_spans(["▁a", "b"], [(2, 3), (3, 5)], frame_shift_s=0.08)
    assert [(s.text, s.start_s, s.end_s) for s in spans] == [("▁a", pytest.approx(0.16), pytest.approx(0.24)),
                                                             ("b", pytest.approx(0.24), pytest.approx(0.40))]
    with pytest.raises(ValueError, match="pieces"):
        token_spans(["a"], [], 0.08)
