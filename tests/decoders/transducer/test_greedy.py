"""Batched greedy decoders against the per-utterance reference on random tiny models.

Models run in float64 so that near-ties between labels cannot differ between batched and per-utterance
arithmetic; greedy must then match exactly: tokens, frames and durations.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoders.transducer.frame_looping import FrameLoopingGreedy
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from decoders.transducer.tiny import TinyTransducer, calibrate_blank_bias
from tests.reference.compare import assert_same_hypotheses
from tests.reference.transducer_greedy import greedy_decode

DURATION_SETS = {"rnnt": (), "tdt01234": (0, 1, 2, 3, 4), "tdt0246": (0, 2, 4, 6)}
# "realistic": about one label per 3 frames; "chatty": the random model as drawn (max_symbols labels on most
# frames, which exercises max_symbols); "quiet": mostly blank.
REGIMES = ("realistic", "chatty", "quiet")
ENCODER_DIM = 16


@functools.cache
def tiny_model(kind: str, regime: str) -> TinyTransducer:
    model = TinyTransducer(vocab_size=12, encoder_dim=ENCODER_DIM, prediction_dim=16, joint_dim=16,
                           durations=DURATION_SETS[kind], seed=len(kind) + 7)
    if regime == "realistic":
        calibrate_blank_bias(model, frames_per_label=3.0)
    elif regime == "quiet":
        model.set_blank_bias(6.0)
    return model.double()


@st.composite
def decoding_cases(draw):
    kind = draw(st.sampled_from(sorted(DURATION_SETS)))
    regime = draw(st.sampled_from(REGIMES))
    batch_size = draw(st.integers(1, 17))
    max_frames = draw(st.integers(0, 12 if regime == "chatty" else 40))
    length = st.one_of(st.just(0), st.just(1), st.integers(0, max_frames))
    lengths = [min(draw(length), max_frames) for _ in range(batch_size)]
    max_symbols = draw(st.integers(1, 10))
    window = draw(st.integers(1, 16))
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    encoder_output = torch.randn(batch_size, max_frames, ENCODER_DIM, generator=generator, dtype=torch.double)
    return kind, regime, encoder_output, torch.tensor(lengths, dtype=torch.long), max_symbols, window


def assert_same(batched, reference):
    assert_same_hypotheses(batched, reference)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("host_loop", [True, False], ids=["host-loop", "tensor-loop"])
@SETTINGS
@given(case=decoding_cases())
def test_label_looping_matches_reference(case, host_loop):
    """Both loops on the CPU: the host loop CPUs run, and the tensor loop GPUs run (CUDA graphs or not)."""
    kind, regime, encoder_output, lengths, max_symbols, window = case
    model = tiny_model(kind, regime)
    reference = greedy_decode(model, encoder_output, lengths, max_symbols)
    decoder = LabelLoopingGreedy(model, GreedyConfig(max_symbols=max_symbols, window_size=window,
                                                     host_loop=host_loop))
    assert_same(decoder(encoder_output, lengths).to_list(), reference)


@SETTINGS
@given(decoding_cases())
def test_frame_looping_matches_reference(case):
    kind, regime, encoder_output, lengths, max_symbols, _ = case
    model = tiny_model(kind, regime)
    reference = greedy_decode(model, encoder_output, lengths, max_symbols)
    decoder = FrameLoopingGreedy(model, GreedyConfig(max_symbols=max_symbols))
    assert_same(decoder(encoder_output, lengths).to_list(), reference)


@pytest.mark.parametrize("host_loop", [True, False], ids=["host-loop", "tensor-loop"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=decoding_cases())
def test_one_batch_of_n_equals_n_batches_of_one(case, host_loop):
    kind, regime, encoder_output, lengths, max_symbols, window = case
    decoder = LabelLoopingGreedy(tiny_model(kind, regime), GreedyConfig(max_symbols=max_symbols, window_size=window,
                                                                       host_loop=host_loop))
    together = decoder(encoder_output, lengths).to_list()
    apart = [decoder(encoder_output[b : b + 1], lengths[b : b + 1]).to_list()[0] for b in range(len(lengths))]
    assert_same(together, apart)


def test_windows_give_plain_greedy_labels_on_long_input():
    model = tiny_model("rnnt", "realistic")
    generator = torch.Generator().manual_seed(3)
    encoder_output = torch.randn(4, 300, ENCODER_DIM, generator=generator, dtype=torch.double)
    lengths = torch.tensor([300, 251, 7, 128])
    plain = LabelLoopingGreedy(model)(encoder_output, lengths).to_list()
    assert sum(len(h.tokens) for h in plain) > 100  # a realistic model emits; the comparison is not vacuous
    for window in (2, 4, 8, 16):
        assert_same(LabelLoopingGreedy(model, GreedyConfig(window_size=window))(encoder_output, lengths).to_list(),
                    plain)


def test_invariants_on_random_input():
    for kind in DURATION_SETS:
        model = tiny_model(kind, "realistic")
        encoder_output = torch.randn(6, 50, ENCODER_DIM, dtype=torch.double)
        lengths = torch.tensor([50, 0, 1, 49, 20, 33])
        hypotheses = LabelLoopingGreedy(model, GreedyConfig(window_size=3))(encoder_output, lengths)
        for hypothesis, length in zip(hypotheses.to_list(), lengths.tolist()):
            assert model.blank_id not in hypothesis.tokens
            assert hypothesis.frame_indices == sorted(hypothesis.frame_indices)
            assert all(0 <= t < length for t in hypothesis.frame_indices)
            if kind != "rnnt":
                assert all(d in model.durations for d in hypothesis.durations)


@pytest.mark.parametrize("decoder_class", [LabelLoopingGreedy, FrameLoopingGreedy])
def test_bad_inputs_are_named(decoder_class):
    decoder = decoder_class(tiny_model("rnnt", "quiet"))
    with pytest.raises(ValueError, match="encoder_output must be"):
        decoder(torch.zeros(2, ENCODER_DIM, dtype=torch.double), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="encoder_lengths must be"):
        decoder(torch.zeros(2, 5, ENCODER_DIM, dtype=torch.double), torch.tensor([1]))
    with pytest.raises(ValueError, match="encoder_lengths must lie"):
        decoder(torch.zeros(2, 5, ENCODER_DIM, dtype=torch.double), torch.tensor([1, 6]))
    with pytest.raises(ValueError, match="integers"):
        decoder(torch.zeros(2, 5, ENCODER_DIM, dtype=torch.double), torch.tensor([1.0, 2.0]))


def test_config_rejects_nonsense():
    with pytest.raises(ValueError, match="max_symbols"):
        GreedyConfig(max_symbols=0)
    with pytest.raises(ValueError, match="window_size"):
        GreedyConfig(window_size=0)
    with pytest.raises(ValueError, match="window"):
        FrameLoopingGreedy(tiny_model("rnnt", "quiet"), GreedyConfig(window_size=4))


def test_empty_batch():
    decoder = LabelLoopingGreedy(tiny_model("tdt01234", "realistic"))
    hypotheses = decoder(torch.zeros(0, 5, ENCODER_DIM, dtype=torch.double), torch.zeros(0, dtype=torch.long))
    assert hypotheses.to_list() == []


@pytest.mark.gpu
@pytest.mark.parametrize("kind", sorted(DURATION_SETS))
@pytest.mark.parametrize("window", [1, 4])
def test_cuda_graphs_equal_eager_on_gpu(kind, window):
    model = TinyTransducer(vocab_size=12, encoder_dim=ENCODER_DIM, prediction_dim=16, joint_dim=16,
                           durations=DURATION_SETS[kind], seed=3)
    calibrate_blank_bias(model)
    model = model.cuda()
    generator = torch.Generator().manual_seed(0)
    graphs = LabelLoopingGreedy(model, GreedyConfig(window_size=window, use_cuda_graphs=True))
    eager = LabelLoopingGreedy(model, GreedyConfig(window_size=window, use_cuda_graphs=False))
    for batch_size, frames in [(5, 40), (3, 100), (8, 30)]:  # a larger batch forces a recapture
        encoder_output = torch.randn(batch_size, frames, ENCODER_DIM, generator=generator).cuda()
        lengths = torch.randint(0, frames + 1, (batch_size,), generator=generator).cuda()
        got, expected = graphs(encoder_output, lengths).to_list(), eager(encoder_output, lengths).to_list()
        for a, b in zip(got, expected):
            assert (a.tokens, a.frame_indices, a.durations) == (b.tokens, b.frame_indices, b.durations)
