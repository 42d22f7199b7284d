"""Comparing batched decoder output with a reference, utterance by utterance."""

from __future__ import annotations

import pytest


def assert_same_hypotheses(batched, reference, score_tolerance: float = 1e-8) -> None:
    """Same tokens, frames and durations exactly; token scores within 1e-9, totals within `score_tolerance`."""
    assert len(batched) == len(reference)
    for index, (got, expected) in enumerate(zip(batched, reference)):
        assert got.tokens == expected.tokens, f"utterance {index}: tokens"
        assert got.frame_indices == expected.frame_indices, f"utterance {index}: frames"
        assert got.durations == expected.durations, f"utterance {index}: durations"
        assert got.token_scores == pytest.approx(expected.token_scores, abs=1e-9), f"utterance {index}: scores"
        assert got.score == pytest.approx(expected.score, abs=score_tolerance), f"utterance {index}: score"
