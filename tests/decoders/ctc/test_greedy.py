"""Blank collapse and CTC greedy against the per-utterance references in tests/reference/ctc.py.

Emissions are float64 and drawn in three regimes: "peaky" (about 60% confident blanks, like a trained
model), "flat" (random logits) and "ties" (small integers, so several labels often share the maximum and
first-index tie-breaking is exercised).
"""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoders.ctc.greedy import CtcGreedy, collapse_blanks
from tests.reference.ctc import BigramLm, collapse_one, greedy_one

REGIMES = ("peaky", "flat", "ties")


def emissions(regime: str, batch_size: int, frames: int, num_labels: int, blank_id: int, seed: int) -> torch.Tensor:
    """log_probs [B, T, V] in float64."""
    generator = torch.Generator().manual_seed(seed)
    if regime == "ties":
        logits = torch.randint(0, 3, (batch_size, frames, num_labels), generator=generator).double()
    else:
        logits = torch.randn(batch_size, frames, num_labels, generator=generator, dtype=torch.double)
        if regime == "peaky":
            logits = 4.0 * logits
            blank_frames = torch.rand(batch_size, frames, generator=generator) < 0.6
            logits[..., blank_id] += torch.where(blank_frames, 12.0, -2.0)
    return torch.log_softmax(logits, dim=-1)


@st.composite
def ctc_cases(draw, max_frames: int = 30, max_labels: int = 9):
    regime = draw(st.sampled_from(REGIMES))
    batch_size = draw(st.integers(1, 9))
    frames = draw(st.integers(0, max_frames))
    num_labels = draw(st.integers(1, max_labels))
    blank_id = draw(st.sampled_from(sorted({num_labels - 1, 0})))
    length = st.one_of(st.just(0), st.just(1), st.integers(0, frames))
    lengths = torch.tensor([min(draw(length), frames) for _ in range(batch_size)], dtype=torch.long)
    seed = draw(st.integers(0, 2**31 - 1))
    return emissions(regime, batch_size, frames, num_labels, blank_id, seed), lengths, blank_id


SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
THRESHOLDS = st.sampled_from([None, 0.5, 0.9, 0.99, 0.999])


def assert_same(got, expected, frame_map=None):
    assert len(got) == len(expected)
    for index, (a, b) in enumerate(zip(got, expected)):
        frames = a.frame_indices if frame_map is None else [int(frame_map[index, f]) for f in a.frame_indices]
        assert a.tokens == b.tokens, f"utterance {index}: tokens"
        assert frames == b.frame_indices, f"utterance {index}: frames"
        assert a.durations is None
        assert a.token_scores == pytest.approx(b.token_scores, abs=1e-9), f"utterance {index}: token scores"
        assert a.score == pytest.approx(b.score, abs=1e-8), f"utterance {index}: score"


# --- collapse_blanks --------------------------------------------------------------------------------------
@SETTINGS
@given(ctc_cases(), THRESHOLDS)
def test_collapse_matches_reference_and_the_map_is_exact(case, threshold):
    log_probs, lengths, blank_id = case
    collapsed, collapsed_lengths, frame_map = collapse_blanks(log_probs, lengths, blank_id, threshold)
    assert collapsed.shape[:2] == frame_map.shape and collapsed.shape[2] == log_probs.shape[2]
    assert frame_map.dtype == torch.long
    assert collapsed.shape[1] == (int(collapsed_lengths.max()) if len(lengths) else 0)
    for b in range(len(lengths)):
        kept = collapse_one(log_probs[b, : int(lengths[b])], blank_id, threshold)
        n = int(collapsed_lengths[b])
        assert frame_map[b, :n].tolist() == kept
        assert torch.equal(collapsed[b, :n], log_probs[b, kept])
        assert (frame_map[b, n:] == 0).all()


@SETTINGS
@given(ctc_cases())
def test_weak_collapse_leaves_greedy_unchanged(case):
    log_probs, lengths, blank_id = case
    decode = CtcGreedy(blank_id)
    plain = decode(log_probs, lengths).to_list()
    collapsed, collapsed_lengths, frame_map = collapse_blanks(log_probs, lengths, blank_id, None)
    assert_same(decode(collapsed, collapsed_lengths).to_list(), plain, frame_map)


def test_collapse_cases_with_obvious_answers():
    blank = 2
    # frames: b b a b b a a b c b b  (a=0, c=1); p(blank) of the marked frames is 1
    pattern = [blank, blank, 0, blank, blank, 0, 0, blank, 1, blank, blank]
    log_probs = torch.log(torch.nn.functional.one_hot(torch.tensor(pattern), 3).double() * 0.998 + 0.001)
    batch = torch.stack([log_probs, log_probs, torch.full_like(log_probs, -1.0).log_softmax(-1)])
    batch[2, :, blank] = 0.0  # all blank
    collapsed, collapsed_lengths, frame_map = collapse_blanks(batch, torch.tensor([11, 0, 5]), blank, 0.9)
    assert collapsed_lengths.tolist() == [6, 0, 0]
    assert frame_map[0].tolist() == [2, 4, 5, 6, 7, 8]
    assert collapsed.shape == (3, 6, 3)
    empty = collapse_blanks(batch[:0], torch.zeros(0, dtype=torch.long), blank, None)
    assert [tuple(x.shape) for x in empty] == [(0, 0, 3), (0,), (0, 0)]


def test_collapse_rejects_bad_threshold():
    with pytest.raises(ValueError, match="threshold"):
        collapse_blanks(torch.zeros(1, 2, 3), torch.tensor([2]), 2, 1.0)


# --- CtcGreedy --------------------------------------------------------------------------------------------
@SETTINGS
@given(ctc_cases())
def test_greedy_matches_reference(case):
    log_probs, lengths, blank_id = case
    expected = [greedy_one(log_probs[b, : int(lengths[b])], blank_id) for b in range(len(lengths))]
    assert_same(CtcGreedy(blank_id)(log_probs, lengths).to_list(), expected)


@SETTINGS
@given(ctc_cases(), st.sampled_from([0.0, 0.3, 1.0, 5.0]), st.integers(0, 1000))
def test_greedy_with_lm_matches_reference(case, lm_weight, lm_seed):
    log_probs, lengths, blank_id = case
    lm = BigramLm.random(log_probs.shape[2] - 1, seed=lm_seed)
    expected = [greedy_one(log_probs[b, : int(lengths[b])], blank_id, lm, lm_weight) for b in range(len(lengths))]
    assert_same(CtcGreedy(blank_id, lm, lm_weight)(log_probs, lengths).to_list(), expected)


@settings(max_examples=30, deadline=None)
@given(ctc_cases(), st.integers(0, 1000))
def test_greedy_one_batch_of_n_equals_n_batches_of_one(case, lm_seed):
    log_probs, lengths, blank_id = case
    decode = CtcGreedy(blank_id, BigramLm.random(log_probs.shape[2] - 1, seed=lm_seed), 0.7)
    together = decode(log_probs, lengths).to_list()
    apart = [decode(log_probs[b : b + 1], lengths[b : b + 1]).to_list()[0] for b in range(len(lengths))]
    assert_same(together, apart)


def test_greedy_one_hot_path():
    blank = 3
    path = [blank, 0, 0, blank, 0, 1, 1, 2, blank, blank, 2]
    log_probs = torch.log(torch.nn.functional.one_hot(torch.tensor(path), 4).double() * 0.96 + 0.01)
    hypothesis = CtcGreedy(blank)(log_probs.unsqueeze(0), torch.tensor([11])).to_list()[0]
    assert hypothesis.tokens == [0, 0, 1, 2, 2]
    assert hypothesis.frame_indices == [1, 4, 5, 7, 10]


def test_lm_flips_one_token_only_when_weighted():
    blank = 2
    # frame 1 is nearly a tie between labels 0 and 1; the LM strongly prefers 1 after the start
    log_probs = torch.tensor([[0.02, 0.01, 0.97], [0.50, 0.49, 0.01], [0.01, 0.01, 0.98]]).double().log()
    scores = torch.log(torch.tensor([[0.1, 0.9], [0.5, 0.5], [0.5, 0.5]], dtype=torch.double))
    lm = BigramLm(scores, torch.zeros(3, dtype=torch.double))
    lengths = torch.tensor([3])
    assert CtcGreedy(blank, lm, 0.0)(log_probs.unsqueeze(0), lengths).to_list()[0].tokens == [0]
    fused = CtcGreedy(blank, lm, 0.5)(log_probs.unsqueeze(0), lengths).to_list()[0]
    assert fused.tokens == [1]
    assert fused.score == pytest.approx(float(log_probs[1, 1]) + 0.5 * float(scores[0, 1]))


def test_greedy_invariants_on_random_input():
    log_probs = emissions("peaky", 6, 50, 17, 16, seed=5)
    lengths = torch.tensor([50, 0, 1, 49, 20, 33])
    hypotheses = CtcGreedy(16, BigramLm.random(16), 0.5)(log_probs, lengths)
    for hypothesis, length in zip(hypotheses.to_list(), lengths.tolist()):
        assert 16 not in hypothesis.tokens
        assert hypothesis.frame_indices == sorted(set(hypothesis.frame_indices))
        assert all(0 <= t < length for t in hypothesis.frame_indices)


def test_bad_inputs_are_named():
    decode = CtcGreedy(2)
    with pytest.raises(ValueError, match="log_probs must be"):
        decode(torch.zeros(2, 3), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="lengths must be"):
        decode(torch.zeros(2, 5, 3), torch.tensor([1]))
    with pytest.raises(ValueError, match="lengths must lie"):
        decode(torch.zeros(2, 5, 3), torch.tensor([1, 6]))
    with pytest.raises(ValueError, match="integers"):
        decode(torch.zeros(2, 5, 3), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="blank_id"):
        CtcGreedy(3)(torch.zeros(2, 5, 3), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=re.escape("lm.vocab_size must equal the model's 2 non-blank labels, got 3")):
        CtcGreedy(2, BigramLm.random(3), 1.0)(torch.zeros(2, 5, 3), torch.tensor([1, 2]))


def test_the_lm_moves_once_when_built_and_inputs_from_elsewhere_are_refused():
    """The meta device stands in for a GPU: the LM's tables really live there, and CPU inputs are refused."""
    lm = BigramLm.random(4)
    assert CtcGreedy(0, lm, 0.5, device="cpu").lm is lm  # already there: not copied
    decode = CtcGreedy(0, lm, 0.5, device="meta")
    assert decode.lm.device == torch.device("meta") and lm.device == torch.device("cpu")
    with pytest.raises(ValueError, match="the LM is on meta but log_probs is on cpu"):
        decode(emissions("peaky", 2, 5, 5, 0, seed=0), torch.tensor([5, 3]))


def test_an_lm_at_weight_zero_gives_exactly_greedy_without_one():
    log_probs = emissions("peaky", 6, 50, 17, 16, seed=5)
    lengths = torch.tensor([50, 0, 1, 49, 20, 33])
    zero = CtcGreedy(16, BigramLm.random(16), 0.0)
    assert zero.lm is None  # dropped when built: no fusion code runs for nothing
    assert zero(log_probs, lengths).to_list() == CtcGreedy(16)(log_probs, lengths).to_list()


def test_empty_batch_and_empty_frames():
    decode = CtcGreedy(0, BigramLm.random(4), 1.0)
    assert decode(torch.zeros(0, 5, 5), torch.zeros(0, dtype=torch.long)).to_list() == []
    hypotheses = decode(torch.zeros(2, 0, 5), torch.tensor([0, 0])).to_list()
    assert [h.tokens for h in hypotheses] == [[], []]
