"""WIND beam search (`decoders/transducer/wind_beam.py`) against the per-utterance reference
(tests/reference/wind_beam.py) on random tiny RNN-T models, in float64 as tests/decoders/transducer/test_beam.py
does and with its comparisons: the best tokens, frames and score, and the n-best scores and tokens (up to exact
ties). Each comparison runs eagerly and through the CUDA-graph path on the CPU (`CheckedGraphPath`).
"""

from __future__ import annotations

import copy
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decoders.ngram.arpa import write_arpa
from decoders.ngram.lm import NgramLm
from decoders.transducer.beam_base import BeamSearchConfig
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from decoders.transducer.wind_beam import WindBeamSearch
from tests.decoders.ngram.arpa_factory import random_ngrams
from tests.decoders.transducer.test_beam import (
    FUSION_MODES,
    SETTINGS,
    VOCAB_SIZE,
    CheckedGraphPath,
    CountingModel,
    assert_agree,
    assert_same_hypotheses,
    bigram_lm,
    decode_both,
    random_inputs,
    tiny_model,
)
from tests.reference.wind_beam import wind_beam_decode

REGIMES = ["realistic", "quiet", "chatty"]


@st.composite
def cases(draw, max_frames=10):
    batch_size = draw(st.integers(1, 6))
    frames = draw(st.integers(0, max_frames))
    length = st.one_of(st.just(0), st.just(1), st.integers(0, frames))
    lengths = [min(draw(length), frames) for _ in range(batch_size)]
    encoder_output, lengths = random_inputs(batch_size, frames, draw(st.integers(0, 2**31 - 1)), lengths)
    settings = dict(
        beam_size=draw(st.integers(1, 5)),
        window_size=draw(st.integers(1, 5)),
        max_symbols_per_frame=draw(st.integers(1, 3)),
        length_normalization=draw(st.booleans()),
        expansion_gamma=draw(st.sampled_from([math.inf, 2.3, 0.7])),
        return_nbest=True,
    )
    extra = draw(st.sampled_from([None, 0, 3]))  # frame_list_size: the default (K), or K + extra
    if extra is not None:
        settings["frame_list_size"] = settings["beam_size"] + extra
    return draw(st.sampled_from(REGIMES)), encoder_output, lengths, settings


def check(model, encoder_output, lengths, config, lm=None) -> None:
    """The batched search (eager and graph path) equals the reference with the same bound on frame lists."""
    list_size = config.frame_list_size or config.beam_size
    expected, _ = wind_beam_decode(model, encoder_output, lengths, config, lm, list_size=list_size)
    for batched in decode_both(WindBeamSearch(model, config, lm), encoder_output, lengths):
        assert_agree(batched, expected, config.beam_size)


@SETTINGS
@given(cases())
def test_matches_reference(case):
    regime, encoder_output, lengths, settings = case
    check(tiny_model("rnnt", regime), encoder_output, lengths, BeamSearchConfig(**settings))


@SETTINGS
@given(cases(), st.sampled_from(FUSION_MODES), st.floats(0.1, 1.0))
def test_with_lm_fusion_matches_reference(case, mode, lm_weight):
    regime, encoder_output, lengths, settings = case
    pruning, scoring = mode
    config = BeamSearchConfig(lm_weight=lm_weight, pruning=pruning, blank_lm_scoring=scoring, **settings)
    check(tiny_model("rnnt", regime), encoder_output, lengths, config, bigram_lm(5))


@pytest.mark.parametrize("mode", FUSION_MODES)
def test_with_an_ngram_lm_matches_reference(tmp_path, mode):
    # the n-gram LM advances only the rows that got a label in eager decoding, every row in the graph path
    path = str(tmp_path / "lm.arpa")
    write_arpa(path, random_ngrams(random.Random(1), 3, VOCAB_SIZE, ngrams_per_order=50, drop_prefixes=0.2))
    lm = NgramLm.from_arpa(path, VOCAB_SIZE)
    pruning, scoring = mode
    config = BeamSearchConfig(beam_size=3, window_size=3, lm_weight=0.8, pruning=pruning, blank_lm_scoring=scoring,
                              return_nbest=True)
    encoder_output, lengths = random_inputs(4, 12, seed=8, lengths=[12, 0, 1, 9])
    check(tiny_model("rnnt", "realistic"), encoder_output, lengths, config, lm)


@pytest.mark.parametrize("regime, seed", [("realistic", 6), ("quiet", 0)])
def test_lists_as_large_as_the_unbounded_search_held_give_the_papers_search(regime, seed):
    """With frame lists as large as the largest the reference held without a bound, the batched search is the
    paper's (lists unbounded until their turn); a bound of K is not, here, so the comparison can tell."""
    model = tiny_model("rnnt", regime)
    encoder_output, lengths = random_inputs(3, 10, seed=seed, lengths=[10, 9, 4])
    settings = dict(beam_size=4, window_size=4, max_symbols_per_frame=3, expansion_gamma=math.inf, return_nbest=True)
    expected, counts = wind_beam_decode(model, encoder_output, lengths, BeamSearchConfig(**settings), list_size=None)
    assert counts["largest_list"] > 4 and counts["prefix_merges"] > 0  # both the bound and the merge are exercised
    config = BeamSearchConfig(frame_list_size=counts["largest_list"], **settings)
    for batched in decode_both(WindBeamSearch(model, config), encoder_output, lengths):
        assert_agree(batched, expected, 4)
    bounded = WindBeamSearch(model, BeamSearchConfig(**settings))(encoder_output, lengths).nbest.to_list()
    listed = [round(h.score, 6) for h in bounded if h.score > -math.inf]
    assert listed != [round(h.score, 6) for hypotheses in expected for h in hypotheses]


@pytest.mark.parametrize("regime", REGIMES)
def test_beam_one_with_window_one_is_greedy(regime):
    # one hypothesis; each step compares the labels on its frame with blank there, as greedy does, and the
    # guard after max_symbols labels on a frame is greedy's forced move
    model = tiny_model("rnnt", regime)
    encoder_output, lengths = random_inputs(6, 30, seed=5, lengths=[30, 0, 1, 29, 12, 30])
    for max_symbols in (1, 3, 10):
        greedy = LabelLoopingGreedy(model, GreedyConfig(max_symbols=max_symbols))(encoder_output, lengths)
        config = BeamSearchConfig(beam_size=1, window_size=1, max_symbols_per_frame=max_symbols)
        for beam in decode_both(WindBeamSearch(model, config), encoder_output, lengths):
            for got, expected in zip(beam.to_list(), greedy.to_list()):
                assert (got.tokens, got.frame_indices) == (expected.tokens, expected.frame_indices)


def test_a_blank_only_model_jumps_a_window_at_a_time():
    model = copy.deepcopy(tiny_model("rnnt", "quiet"))
    model.set_blank_bias(40.0)  # blank everywhere, with probability 1 to float64 precision
    encoder_output, lengths = random_inputs(3, 30, seed=3, lengths=[30, 17, 0])
    for window in (1, 4, 8):
        counting = CountingModel(model)
        decoder = WindBeamSearch(counting, BeamSearchConfig(beam_size=3, window_size=window))
        hypotheses = decoder(encoder_output, lengths)
        assert [h.tokens for h in hypotheses.to_list()] == [[], [], []]
        assert hypotheses.scores.tolist() == pytest.approx([0.0] * 3, abs=1e-9)
        # one joint call per step, one step per window of the longest utterance
        assert counting.joint_calls == math.ceil(30 / window)


def test_invariants_and_nbest_shape():
    model = tiny_model("rnnt")
    encoder_output, lengths = random_inputs(5, 30, seed=10, lengths=[30, 0, 1, 29, 12])
    hypotheses = WindBeamSearch(model, BeamSearchConfig(beam_size=3, return_nbest=True))(encoder_output, lengths)
    assert hypotheses.nbest.batch_size == 5 * 3
    for hypothesis, length in zip(hypotheses.to_list(), lengths.tolist()):
        assert model.blank_id not in hypothesis.tokens
        assert hypothesis.frame_indices == sorted(hypothesis.frame_indices)
        assert all(0 <= t < length for t in hypothesis.frame_indices)
    assert hypotheses.to_list()[1].tokens == [] and hypotheses.to_list()[1].score == 0.0
    assert sum(len(h.tokens) for h in hypotheses.to_list()) > 0


@pytest.mark.parametrize("mode", FUSION_MODES)
def test_an_lm_at_weight_zero_gives_exactly_the_search_without_one(mode):
    pruning, scoring = mode
    model = tiny_model("rnnt")
    encoder_output, lengths = random_inputs(5, 20, seed=4, lengths=[20, 0, 1, 13, 20])
    config = BeamSearchConfig(beam_size=4, pruning=pruning, blank_lm_scoring=scoring, return_nbest=True)
    zero = WindBeamSearch(model, config, bigram_lm())
    assert zero.lm is None
    assert zero(encoder_output, lengths).to_list() == WindBeamSearch(model, config)(encoder_output, lengths).to_list()


def test_graph_state_holds_the_longest_search():
    # blank never wins: frame 0's list (the empty hypothesis, no label yet) comes round max_symbols + 1 times and
    # every later frame's (hypotheses that arrived with a label on it) max_symbols times; a frame reached by
    # blank could take max_symbols + 1, which the bound allows for
    model = copy.deepcopy(tiny_model("rnnt", "chatty"))
    model.set_blank_bias(-30.0)
    config = BeamSearchConfig(beam_size=2, window_size=3, max_symbols_per_frame=3, return_nbest=True)
    decoder = WindBeamSearch(model, config)
    path = CheckedGraphPath(decoder)
    encoder_output, lengths = random_inputs(2, 64, seed=5, lengths=[64, 17])
    assert_same_hypotheses(path(encoder_output, lengths), decoder(encoder_output, lengths))
    assert int(path.state.tree.length) == 4 + 63 * 3
    assert path.state.tree.capacity == decoder._max_columns(64) == 64 * 4 + 1


def test_one_graph_state_serves_batches_of_any_size_up_to_its_own():
    config = BeamSearchConfig(beam_size=3, lm_weight=0.4, max_symbols_per_frame=3, window_size=4, return_nbest=True)
    decoder = WindBeamSearch(tiny_model("rnnt"), config, bigram_lm(3))
    path = CheckedGraphPath(decoder)
    states = []
    for batch_size, frames, seed in [(6, 25, 0), (2, 9, 1), (7, 70, 2), (3, 0, 3)]:  # the third outgrows the first
        encoder_output, lengths = random_inputs(batch_size, frames, seed)
        lengths[0] = frames
        assert_same_hypotheses(path(encoder_output, lengths), decoder(encoder_output, lengths))
        states.append(path.state)
    assert states[0] is states[1] and states[2] is states[3] and states[1] is not states[2]


def test_tdt_and_small_lists_are_refused():
    with pytest.raises(ValueError, match="WindBeamSearch supports RNN-T only"):
        WindBeamSearch(tiny_model("tdt01234"), BeamSearchConfig())
    with pytest.raises(ValueError, match="frame_list_size must be >= beam_size"):
        BeamSearchConfig(beam_size=4, frame_list_size=3)


@pytest.mark.gpu
@pytest.mark.parametrize("use_cuda_graphs", [False, True])
def test_gpu_equals_cpu(use_cuda_graphs):
    model = tiny_model("rnnt")
    encoder_output, lengths = random_inputs(5, 30, seed=13, lengths=[30, 0, 1, 22, 30])
    config = BeamSearchConfig(beam_size=4, lm_weight=0.5, return_nbest=True, use_cuda_graphs=use_cuda_graphs)
    on_cpu = WindBeamSearch(model, config, bigram_lm())(encoder_output, lengths)
    gpu_model = copy.deepcopy(model).cuda()
    on_gpu = WindBeamSearch(gpu_model, config, bigram_lm(), device="cuda")(encoder_output.cuda(), lengths.cuda())
    assert_same_hypotheses(on_gpu, on_cpu)


@pytest.mark.gpu
@pytest.mark.parametrize("lm_weight", [0.0, 0.5])
def test_cuda_graphs_equal_eager_on_gpu(lm_weight):
    model = copy.deepcopy(tiny_model("rnnt")).cuda()
    for pruning, scoring in FUSION_MODES if lm_weight else FUSION_MODES[-1:]:
        settings = dict(beam_size=4, lm_weight=lm_weight, pruning=pruning, blank_lm_scoring=scoring, window_size=4,
                        return_nbest=True)
        graphs = WindBeamSearch(model, BeamSearchConfig(use_cuda_graphs=True, **settings), bigram_lm(4), device="cuda")
        eager = WindBeamSearch(model, BeamSearchConfig(use_cuda_graphs=False, **settings), bigram_lm(4), device="cuda")
        for batch_size, frames, seed in [(5, 30, 0), (3, 12, 1), (9, 80, 2), (2, 40, 3)]:
            encoder_output, lengths = random_inputs(batch_size, frames, seed)
            encoder_output, lengths = encoder_output.cuda(), lengths.cuda()
            assert_same_hypotheses(graphs(encoder_output, lengths), eager(encoder_output, lengths))
        assert graphs._graphs is not None and graphs._graphs.graphs  # the graphs ran, not the eager path
