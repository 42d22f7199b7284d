"""CtcBeamSearch against the per-utterance prefix beam search and exhaustive search in tests/reference/ctc.py.

Emissions are float64 random log-softmax outputs ("peaky" or "flat", see test_ctc.py); continuous values
make exact score ties, where the batched top-k and the reference's sort may order differently, improbable.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoders.ctc.beam import CtcBeamConfig, CtcBeamSearch
from decoders.ctc.greedy import CtcGreedy, collapse_blanks
from tests.decoders.ctc.test_greedy import emissions
from tests.reference.ctc import AdvanceOnly, BigramLm, exhaustive_best, prefix_beam_search_one


@st.composite
def beam_cases(draw, max_frames: int = 14, max_labels: int = 7):
    regime = draw(st.sampled_from(("peaky", "flat")))
    batch_size = draw(st.integers(1, 5))
    frames = draw(st.integers(0, max_frames))
    num_labels = draw(st.integers(1, max_labels))
    blank_id = draw(st.sampled_from(sorted({num_labels - 1, 0})))
    length = st.one_of(st.just(0), st.just(1), st.integers(0, frames))
    lengths = torch.tensor([min(draw(length), frames) for _ in range(batch_size)], dtype=torch.long)
    log_probs = emissions(regime, batch_size, frames, num_labels, blank_id, draw(st.integers(0, 2**31 - 1)))
    config = CtcBeamConfig(
        beam_size=draw(st.integers(1, 10)),
        lm_weight=draw(st.sampled_from([0.0, 0.5, 1.5])),
        insertion_bonus=draw(st.sampled_from([0.0, 0.7, -0.4])),
        beam_threshold=draw(st.sampled_from([math.inf, 8.0, 2.0])),
        lm_end_of_sentence=draw(st.booleans()),
        max_labels_per_frame=draw(st.sampled_from([None, None, 1, 2, 4])),
        token_min_log_prob=draw(st.sampled_from([-math.inf, -math.inf, -3.0])),
    )
    lm = BigramLm.random(num_labels - 1, seed=draw(st.integers(0, 1000)))
    return log_probs, lengths, blank_id, config, lm, draw(st.booleans())


def reference(log_probs, lengths, blank_id, config, lm, nbest=1):
    return [
        prefix_beam_search_one(
            log_probs[b, : int(lengths[b])],
            blank_id,
            config.beam_size,
            lm,
            config.lm_weight,
            config.insertion_bonus,
            config.beam_threshold,
            config.lm_end_of_sentence,
            nbest,
            config.max_labels_per_frame,
            config.token_min_log_prob,
        )
        for b in range(len(lengths))
    ]


def assert_same(got, expected, abs_tol=1e-5):
    assert got.tokens == expected.tokens
    assert got.frame_indices == expected.frame_indices
    assert got.durations is None
    assert got.token_scores == pytest.approx(expected.token_scores, abs=1e-9)
    assert got.score == pytest.approx(expected.score, abs=abs_tol)


SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(beam_cases())
def test_matches_reference_prefix_beam_search(case):
    log_probs, lengths, blank_id, config, lm, advance_only = case
    got = CtcBeamSearch(blank_id, config, AdvanceOnly(lm) if advance_only else lm)(log_probs, lengths).to_list()
    for hypothesis, expected in zip(got, reference(log_probs, lengths, blank_id, config, lm)):
        assert_same(hypothesis, expected[0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(beam_cases(), st.integers(1, 10))
def test_nbest_matches_reference(case, nbest):
    log_probs, lengths, blank_id, config, lm, _ = case
    nbest = min(nbest, config.beam_size)
    got = CtcBeamSearch(blank_id, config, lm)(log_probs, lengths, nbest=nbest).to_list()
    assert len(got) == len(lengths) * nbest
    for b, expected in enumerate(reference(log_probs, lengths, blank_id, config, lm, nbest)):
        rows = got[b * nbest : (b + 1) * nbest]
        for hypothesis, want in zip(rows, expected):
            assert_same(hypothesis, want)
        for hypothesis in rows[len(expected) :]:
            assert hypothesis.tokens == [] and hypothesis.score == -math.inf


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 5),
    st.integers(2, 3),
    st.sampled_from([0.0, 0.8]),
    st.sampled_from([0.0, 0.5]),
    st.integers(0, 2**31 - 1),
)
def test_wide_beam_finds_the_exhaustive_best(frames, num_labels, lm_weight, insertion_bonus, seed):
    blank_id = num_labels - 1
    log_probs = emissions("flat", 1, frames, num_labels, blank_id, seed)
    lm = BigramLm.random(num_labels - 1, seed=seed % 997)
    labels, score = exhaustive_best(log_probs[0], blank_id, lm, lm_weight, insertion_bonus)
    # every prefix of length <= T fits: 1 + 2 + ... + 2^5 = 63 distinct prefixes at most
    config = CtcBeamConfig(beam_size=64, lm_weight=lm_weight, insertion_bonus=insertion_bonus)
    got = CtcBeamSearch(blank_id, config, lm)(log_probs, torch.tensor([frames])).to_list()[0]
    assert got.tokens == labels
    assert got.score == pytest.approx(score, abs=1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(beam_cases(), st.sampled_from(["weak", 0.5, 0.9, 0.999]))
def test_collapse_maps_frames_back(case, threshold):
    """With collapse, the search equals the reference run on the collapsed emissions, frames mapped back."""
    log_probs, lengths, blank_id, config, lm, _ = case
    collapsed, collapsed_lengths, frame_map = collapse_blanks(
        log_probs, lengths, blank_id, None if threshold == "weak" else threshold
    )
    config = CtcBeamConfig(**{**config.__dict__, "collapse_threshold": threshold})
    got = CtcBeamSearch(blank_id, config, lm)(log_probs, lengths).to_list()
    for b, (hypothesis, expected) in enumerate(zip(got, reference(collapsed, collapsed_lengths, blank_id, config, lm))):
        expected = expected[0]
        frames = [int(frame_map[b, t]) for t in expected.frame_indices]
        assert hypothesis.tokens == expected.tokens
        assert hypothesis.frame_indices == frames
        assert all(0 <= t < int(lengths[b]) for t in frames)
        assert hypothesis.score == pytest.approx(expected.score, abs=1e-5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(beam_cases())
def test_one_batch_of_n_equals_n_batches_of_one(case):
    log_probs, lengths, blank_id, config, lm, _ = case
    decode = CtcBeamSearch(blank_id, config, lm)
    together = decode(log_probs, lengths).to_list()
    for b in range(len(lengths)):
        assert_same(together[b], decode(log_probs[b : b + 1], lengths[b : b + 1]).to_list()[0], abs_tol=1e-9)


def test_beam_of_one_without_lm_is_the_best_single_prefix_on_one_hot_emissions():
    blank = 3
    path = [blank, 0, 0, blank, 0, 1, 1, 2, blank, blank, 2]
    log_probs = torch.log(torch.nn.functional.one_hot(torch.tensor(path), 4).double() * 0.96 + 0.01).unsqueeze(0)
    lengths = torch.tensor([11])
    greedy = CtcGreedy(blank)(log_probs, lengths).to_list()[0]
    for beam_size in (1, 4):
        hypothesis = CtcBeamSearch(blank, CtcBeamConfig(beam_size=beam_size))(log_probs, lengths).to_list()[0]
        assert hypothesis.tokens == greedy.tokens == [0, 0, 1, 2, 2]
        assert hypothesis.frame_indices == greedy.frame_indices


def test_lm_flips_one_token_only_when_weighted():
    blank = 2
    log_probs = torch.tensor([[0.02, 0.01, 0.97], [0.50, 0.49, 0.01], [0.01, 0.01, 0.98]]).double().log()
    scores = torch.log(torch.tensor([[0.1, 0.9], [0.5, 0.5], [0.5, 0.5]], dtype=torch.double))
    lm = BigramLm(scores, torch.zeros(3, dtype=torch.double))
    lengths = torch.tensor([3])
    plain = CtcBeamSearch(blank, CtcBeamConfig(beam_size=4, lm_weight=0.0), lm)(log_probs.unsqueeze(0), lengths)
    fused = CtcBeamSearch(blank, CtcBeamConfig(beam_size=4, lm_weight=0.5), lm)(log_probs.unsqueeze(0), lengths)
    assert plain.to_list()[0].tokens == [0]
    assert fused.to_list()[0].tokens == [1]


def test_invariants_on_longer_peaky_input():
    log_probs = emissions("peaky", 6, 120, 33, 32, seed=11)
    lengths = torch.tensor([120, 0, 1, 119, 60, 77])
    config = CtcBeamConfig(beam_size=6, lm_weight=0.4, beam_threshold=12.0, collapse_threshold=0.99)
    hypotheses = CtcBeamSearch(32, config, BigramLm.random(32, seed=3))(log_probs, lengths, nbest=3).to_list()
    for index, hypothesis in enumerate(hypotheses):
        length = int(lengths[index // 3])
        assert 32 not in hypothesis.tokens
        assert hypothesis.frame_indices == sorted(hypothesis.frame_indices)
        assert all(0 <= t < length for t in hypothesis.frame_indices)
    scores = [h.score for h in hypotheses]
    for b in range(6):
        assert scores[3 * b : 3 * b + 3] == sorted(scores[3 * b : 3 * b + 3], reverse=True)


def test_float32_runs_and_agrees_with_float64():
    log_probs = emissions("peaky", 4, 60, 17, 16, seed=2)
    lengths = torch.tensor([60, 41, 1, 0])
    lm = BigramLm.random(16, seed=5)
    config = CtcBeamConfig(beam_size=4, lm_weight=0.5)
    wide = CtcBeamSearch(16, config, lm)(log_probs, lengths).to_list()
    narrow_lm = BigramLm(lm.scores.float(), lm.final.float())
    narrow = CtcBeamSearch(16, config, narrow_lm)(log_probs.float(), lengths).to_list()
    assert [h.tokens for h in narrow] == [h.tokens for h in wide]
    assert [h.score for h in narrow] == pytest.approx([h.score for h in wide], abs=1e-3)


def test_thread_setting_is_restored():
    before = torch.get_num_threads()
    config = CtcBeamConfig(beam_size=2, cpu_threads=2)
    CtcBeamSearch(4, config)(emissions("peaky", 2, 10, 5, 4, seed=0), torch.tensor([10, 5]))
    assert torch.get_num_threads() == before


def test_bad_inputs_and_config_are_named():
    decode = CtcBeamSearch(2, CtcBeamConfig(beam_size=3))
    with pytest.raises(ValueError, match="log_probs must be"):
        decode(torch.zeros(2, 3), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="lengths must lie"):
        decode(torch.zeros(2, 5, 3), torch.tensor([1, 6]))
    with pytest.raises(ValueError, match="nbest"):
        decode(torch.zeros(2, 5, 3), torch.tensor([1, 2]), nbest=4)
    with pytest.raises(ValueError, match=re.escape("lm.vocab_size must equal the model's 2 non-blank labels, got 5")):
        CtcBeamSearch(2, CtcBeamConfig(lm_weight=1.0), BigramLm.random(5))(torch.zeros(2, 5, 3), torch.tensor([1, 2]))
    for bad in (
        dict(beam_size=0),
        dict(beam_threshold=0.0),
        dict(collapse_threshold=1.5),
        dict(collapse_threshold="strong"),
        dict(cpu_threads=0),
        dict(max_labels_per_frame=0),
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CtcBeamConfig(**bad)


def test_the_lm_moves_once_when_built_and_inputs_from_elsewhere_are_refused():
    """The meta device stands in for a GPU: the LM's tables really live there, and CPU inputs are refused."""
    lm, config = BigramLm.random(4), CtcBeamConfig(beam_size=3, lm_weight=0.5)
    assert CtcBeamSearch(0, config, lm, device="cpu").lm is lm  # already there: not copied
    decode = CtcBeamSearch(0, config, lm, device="meta")
    assert decode.lm.device == torch.device("meta") and lm.device == torch.device("cpu")
    with pytest.raises(ValueError, match="the LM is on meta but log_probs is on cpu"):
        decode(emissions("peaky", 2, 5, 5, 0, seed=0), torch.tensor([5, 3]))


@pytest.mark.parametrize("collapse_threshold", [None, 0.99])
def test_an_lm_at_weight_zero_gives_exactly_the_search_without_one(collapse_threshold):
    log_probs = emissions("peaky", 6, 40, 17, 16, seed=2)
    lengths = torch.tensor([40, 0, 1, 39, 20, 33])
    config = CtcBeamConfig(beam_size=4, lm_weight=0.0, insertion_bonus=0.5, collapse_threshold=collapse_threshold)
    zero = CtcBeamSearch(16, config, BigramLm.random(16))
    assert zero.lm is None  # dropped when built: no fusion code runs for nothing
    plain = CtcBeamSearch(16, config)
    listed = lambda hypotheses: [h if h.score > -math.inf else None for h in hypotheses.to_list()]  # noqa: E731
    for nbest in (1, 4):
        assert listed(zero(log_probs, lengths, nbest=nbest)) == listed(plain(log_probs, lengths, nbest=nbest))


def test_empty_batch_and_empty_frames():
    decode = CtcBeamSearch(0, CtcBeamConfig(beam_size=3, lm_weight=1.0), BigramLm.random(4))
    assert decode(torch.zeros(0, 5, 5), torch.zeros(0, dtype=torch.long)).to_list() == []
    hypotheses = decode(torch.zeros(2, 0, 5).log_softmax(-1), torch.tensor([0, 0]), nbest=2).to_list()
    assert [h.tokens for h in hypotheses] == [[], [], [], []]
    assert hypotheses[1].score == -math.inf


@pytest.mark.gpu
def test_gpu_equals_cpu():
    log_probs = emissions("peaky", 8, 200, 129, 128, seed=4).float()
    lengths = torch.tensor([200, 180, 1, 0, 150, 199, 64, 3])
    config = CtcBeamConfig(beam_size=8, lm_weight=0.5, beam_threshold=15.0, collapse_threshold=0.99)
    lm = BigramLm.random(128, seed=1, dtype=torch.float32)
    cpu = CtcBeamSearch(128, config, lm)(log_probs, lengths).to_list()
    gpu = CtcBeamSearch(128, config, lm, device="cuda")(log_probs.cuda(), lengths.cuda()).to_list()
    assert [h.tokens for h in gpu] == [h.tokens for h in cpu]
    assert [h.frame_indices for h in gpu] == [h.frame_indices for h in cpu]
    assert [h.score for h in gpu] == pytest.approx([h.score for h in cpu], abs=1e-3)
