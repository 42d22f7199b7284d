"""Batched beam search (ALSD++, AES++, AES++ with skipping) against the per-utterance references on random tiny models.

Models run in float64, so that batched and per-utterance arithmetic cannot order near-ties differently:
the best tokens (with their frames and durations) must then be the same, and the whole n-best list the same
tokens with scores within 1e-5. Every comparison runs twice: eagerly, and through the CUDA-graph path on the
CPU (`CheckedGraphPath`: the pieces a GPU would capture, uncaptured, each checked to read nothing on the host
and to write every state tensor in place); tests/decoders/transducer/test_beam_graphs.py has the rest.
"""

from __future__ import annotations

import copy
import functools
import math
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from decoders.hypotheses import BatchedHypotheses, Hypothesis
from decoders.transducer.aes import AesSkipBlankSearch
from decoders.transducer.beam import AesBeamSearch, AlsdBeamSearch, BeamSearchConfig
from decoders.transducer.beam_base import CudaGraphsRunner
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from decoders.transducer.tiny import TinyTransducer, calibrate_blank_bias
from decoders.transducer.wind_beam import WindBeamSearch
from tests.reference.fake_lm import BigramLm
from tests.reference.transducer_beam import alsd_decode, maes_decode

DURATION_SETS = {"rnnt": (), "tdt01234": (0, 1, 2, 3, 4), "tdt0246": (0, 2, 4, 6)}
ENCODER_DIM = 8
VOCAB_SIZE = 7
FUSION_MODES = [(pruning, scoring) for pruning in ("early", "late") for scoring in ("none", "weighted")]


@functools.cache
def tiny_model(kind: str, regime: str = "realistic") -> TinyTransducer:
    model = TinyTransducer(
        vocab_size=VOCAB_SIZE,
        encoder_dim=ENCODER_DIM,
        prediction_dim=8,
        joint_dim=8,
        durations=DURATION_SETS[kind],
        seed=len(kind) + 11,
    )
    if regime == "realistic":
        calibrate_blank_bias(model, frames_per_label=2.5)
    elif regime == "quiet":  # confident about blank on most frames, as a trained model is
        model.set_blank_bias(3.0)
    return model.double()


@functools.cache
def bigram_lm(seed: int = 0) -> BigramLm:
    return BigramLm.random(VOCAB_SIZE, seed=seed)


def random_inputs(batch_size: int, max_frames: int, seed: int, lengths: list[int] | None = None):
    generator = torch.Generator().manual_seed(seed)
    encoder_output = torch.randn(batch_size, max_frames, ENCODER_DIM, generator=generator, dtype=torch.double)
    if lengths is None:
        lengths = torch.randint(0, max_frames + 1, (batch_size,), generator=generator).tolist()
    return encoder_output, torch.tensor(lengths, dtype=torch.long)


aten = torch.ops.aten
HOST_READS = {
    aten._local_scalar_dense.default,
    aten.is_nonzero.default,
    aten.equal.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_consecutive.default,
    aten.unique_dim.default,
    aten.repeat_interleave.Tensor,
}


class NoHostReads(TorchDispatchMode):
    """Fails on an op that reads a tensor's value on the host (`.item()`, `bool()`, Python branching on a
    tensor) or whose output shape depends on values (`nonzero`, boolean-mask indexing): what a CUDA graph
    cannot hold."""

    def __init__(self, piece: str) -> None:
        super().__init__()
        self.piece = piece

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        boolean_index = func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default) and any(
            index is not None and index.dtype == torch.bool for index in args[1]
        )
        if func in HOST_READS or boolean_index:
            raise AssertionError(f"piece {self.piece!r} reads the host: {func}")
        return func(*args, **(kwargs or {}))


def state_addresses(state) -> dict[str, int]:
    """Where every tensor of a search state (and of its tree) lives."""
    addresses = {}
    for owner, values in (("state", vars(state)), ("tree", vars(state.tree))):
        for name, value in values.items():
            for index, tensor in enumerate(value if isinstance(value, tuple) else (value,)):
                if isinstance(tensor, torch.Tensor):
                    addresses[f"{owner}.{name}[{index}]"] = tensor.data_ptr()
    return addresses


class CheckedGraphPath(CudaGraphsRunner):
    """A decoder's CUDA-graph path on the CPU: the pieces a GPU would capture, called directly over the same
    preallocated state, each checked to read nothing on the host and to write every state tensor in place (a
    graph replays over the addresses it captured, so a rebound attribute would silently go stale)."""

    def __init__(self, decoder) -> None:
        super().__init__(decoder, capture=False)

    def _compile(self, pieces):
        return {name: self._checked(name, piece) for name, piece in pieces.items()}

    def _checked(self, name, piece):
        def run():
            before = state_addresses(self.state)
            with NoHostReads(name):
                piece()
            assert state_addresses(self.state) == before, f"piece {name!r} moved a state tensor"

        return run


def decode_both(decoder, encoder_output, lengths) -> list[BatchedHypotheses]:
    """The decoder's eager result and that of its CUDA-graph path (on the CPU, uncaptured and checked)."""
    return [decoder(encoder_output, lengths), CheckedGraphPath(decoder)(encoder_output, lengths)]


def assert_agree(batched: BatchedHypotheses, reference, beam_size: int) -> None:
    best = batched.to_list()
    nbest = batched.nbest.to_list()
    assert len(best) == len(reference)
    for index, expected in enumerate(reference):
        got = best[index]
        assert got.tokens == expected[0].tokens, f"utterance {index}: best tokens"
        assert got.frame_indices == expected[0].frame_indices, f"utterance {index}: best frames"
        assert got.durations == expected[0].durations, f"utterance {index}: best durations"
        assert got.score == pytest.approx(expected[0].score, abs=1e-5)
        listed = [h for h in nbest[index * beam_size : (index + 1) * beam_size] if h.score > -math.inf]
        assert [h.score for h in listed] == pytest.approx([h.score for h in expected], abs=1e-5)
        assert_same_nbest_tokens(listed, expected, beam_size, f"utterance {index}: n-best tokens")


TIE = 1e-9  # scores are float64: hypotheses this close are exact ties, not a decoder's rounding


def assert_same_nbest_tokens(listed, expected, beam_size: int, message: str) -> None:
    """The n-best lists hold the same hypotheses in the same order, up to exact ties.

    Hypotheses with equal scores may come in either order (top-k leaves their order open), and a tie that
    straddles the end of a full beam may keep different members in each list; the tiny models make such
    ties (hypothesis found [[6, 6], [1, 6], [6, 1], [4, 6]] against the reference's [[6, 6], [6, 1], [1, 6],
    [6, 4]], [1, 6] and [6, 1] with bit-equal scores, as were [4, 6] and [6, 4]). Such a member must still be
    one the reference could have kept: its score ties, and it is the reference member's tokens reordered on
    the same frames and durations."""
    assert len(listed) == len(expected), message
    start = 0
    while start < len(expected):
        end = start + 1
        while end < len(expected) and abs(expected[end].score - expected[start].score) <= TIE:
            end += 1
        group = slice(start, end)
        if end == beam_size:  # the last group of a full beam: its ties may extend past the beam
            assert all(abs(h.score - expected[start].score) <= TIE for h in listed[group]), message
            assert len({tuple(h.tokens) for h in listed[group]}) == end - start, message
            for got in listed[group]:
                assert any(
                    got.tokens == want.tokens
                    or (
                        sorted(got.tokens) == sorted(want.tokens)
                        and got.frame_indices == want.frame_indices
                        and got.durations == want.durations
                    )
                    for want in expected[group]
                ), message
        else:
            assert sorted(h.tokens for h in listed[group]) == sorted(h.tokens for h in expected[group]), message
        start = end


def test_nbest_comparison_forgives_exact_ties_and_nothing_else():
    def hyps(*entries):
        return [Hypothesis(tokens, [0, 2], [2, 2], [], score) for tokens, score in entries]

    # the case CI's hypothesis run found (AES, TDT 0-2-4-6, beam 4), scores as the decoders gave them
    reference = hyps(
        ([6, 6], -5.664749359586011),
        ([6, 1], -5.73499793360449),
        ([1, 6], -5.73499793360449),
        ([6, 4], -5.741268878676664),
    )
    found = hyps(
        ([6, 6], -5.664749359586011),
        ([1, 6], -5.73499793360449),
        ([6, 1], -5.73499793360449),
        ([4, 6], -5.741268878676664),
    )
    assert_same_nbest_tokens(found, reference, 4, "tie")
    wrong_last = hyps(*[(h.tokens, h.score) for h in found[:3]], ([4, 5], -5.741268878676664))
    wrong_inner = hyps(
        ([6, 6], -5.664749359586011),
        ([1, 6], -5.73499793360449),
        ([4, 6], -5.73499793360449),
        ([6, 4], -5.741268878676664),
    )
    wrong_order = hyps(
        *[(h.tokens, h.score) for h in reversed(reference[:2])], *[(h.tokens, h.score) for h in reference[2:]]
    )
    for listed in (wrong_last, wrong_inner, wrong_order):
        with pytest.raises(AssertionError):
            assert_same_nbest_tokens(listed, reference, 4, "not a tie")
    with pytest.raises(AssertionError):  # a beam that is not full has no tie beyond its end
        assert_same_nbest_tokens(found, reference, 5, "not full")


@st.composite
def cases(draw, kinds=tuple(DURATION_SETS), max_frames=10):
    kind = draw(st.sampled_from(kinds))
    batch_size = draw(st.integers(1, 9))
    frames = draw(st.integers(0, max_frames))
    length = st.one_of(st.just(0), st.just(1), st.integers(0, frames))
    lengths = [min(draw(length), frames) for _ in range(batch_size)]
    beam_size = draw(st.integers(1, 8))
    max_symbols = draw(st.integers(1, 4))
    normalize = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    encoder_output, lengths = random_inputs(batch_size, frames, seed, lengths)
    return kind, encoder_output, lengths, beam_size, max_symbols, normalize


SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_alsd_matches_reference(case):
    kind, encoder_output, lengths, beam_size, max_symbols, normalize = case
    config = BeamSearchConfig(
        beam_size=beam_size, max_symbols_per_frame=max_symbols, length_normalization=normalize, return_nbest=True
    )
    model = tiny_model(kind)
    expected = alsd_decode(model, encoder_output, lengths, config)
    for batched in decode_both(AlsdBeamSearch(model, config), encoder_output, lengths):
        assert_agree(batched, expected, beam_size)


@SETTINGS
@given(cases(), st.sampled_from(FUSION_MODES), st.floats(0.1, 1.0))
def test_alsd_with_lm_fusion_matches_reference(case, mode, lm_weight):
    kind, encoder_output, lengths, beam_size, max_symbols, normalize = case
    pruning, scoring = mode
    config = BeamSearchConfig(
        beam_size=beam_size,
        max_symbols_per_frame=max_symbols,
        lm_weight=lm_weight,
        pruning=pruning,
        blank_lm_scoring=scoring,
        length_normalization=normalize,
        return_nbest=True,
    )
    model, lm = tiny_model(kind), bigram_lm()
    expected = alsd_decode(model, encoder_output, lengths, config, lm)
    for batched in decode_both(AlsdBeamSearch(model, config, lm), encoder_output, lengths):
        assert_agree(batched, expected, beam_size)


@SETTINGS
@given(cases(), st.integers(1, 3), st.integers(0, 3), st.floats(0.5, 5.0))
def test_aes_matches_reference(case, steps, beta, gamma):
    kind, encoder_output, lengths, beam_size, _, normalize = case
    config = BeamSearchConfig(
        beam_size=beam_size,
        expansion_steps=steps,
        expansion_beta=beta,
        expansion_gamma=gamma,
        length_normalization=normalize,
        return_nbest=True,
    )
    model = tiny_model(kind)
    expected = maes_decode(model, encoder_output, lengths, config)
    for batched in decode_both(AesBeamSearch(model, config), encoder_output, lengths):
        assert_agree(batched, expected, beam_size)


@SETTINGS
@given(cases(), st.sampled_from(FUSION_MODES), st.floats(0.1, 1.0))
def test_aes_with_lm_fusion_matches_reference(case, mode, lm_weight):
    kind, encoder_output, lengths, beam_size, _, normalize = case
    pruning, scoring = mode
    config = BeamSearchConfig(
        beam_size=beam_size,
        lm_weight=lm_weight,
        pruning=pruning,
        blank_lm_scoring=scoring,
        length_normalization=normalize,
        return_nbest=True,
    )
    model, lm = tiny_model(kind), bigram_lm(1)
    expected = maes_decode(model, encoder_output, lengths, config, lm)
    for batched in decode_both(AesBeamSearch(model, config, lm), encoder_output, lengths):
        assert_agree(batched, expected, beam_size)


def assert_same_hypotheses(got: BatchedHypotheses, expected: BatchedHypotheses) -> None:
    """The same n-best lists (slots without a hypothesis, score -inf, hold anything)."""
    pairs = list(zip(got.nbest.to_list(), expected.nbest.to_list()))
    assert [a.score == -math.inf for a, _ in pairs] == [b.score == -math.inf for _, b in pairs]
    for a, b in pairs:
        if b.score > -math.inf:
            assert (a.tokens, a.frame_indices) == (b.tokens, b.frame_indices)
            assert a.score == pytest.approx(b.score, abs=1e-9)


@SETTINGS
@given(
    cases(kinds=("rnnt",), max_frames=30),
    st.sampled_from(["realistic", "quiet"]),
    st.sampled_from([None] + FUSION_MODES),
    st.integers(1, 12),
)
def test_aes_skip_equals_aes(case, regime, mode, window):
    _, encoder_output, lengths, beam_size, _, normalize = case
    pruning, scoring = mode or ("late", "weighted")
    config = BeamSearchConfig(
        beam_size=beam_size,
        lm_weight=0.5,
        pruning=pruning,
        blank_lm_scoring=scoring,
        length_normalization=normalize,
        window_size=window,
        return_nbest=True,
    )
    model, lm = tiny_model("rnnt", regime), (bigram_lm(2) if mode else None)
    expected = AesBeamSearch(model, config, lm)(encoder_output, lengths)
    for got in decode_both(AesSkipBlankSearch(model, config, lm), encoder_output, lengths):
        assert_same_hypotheses(got, expected)


class CountingModel:
    """A model wrapper that counts prediction-network rows and joint calls."""

    def __init__(self, model):
        self.model, self.predicted_rows, self.joint_calls = model, 0, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def predict(self, labels, state):
        self.predicted_rows += labels.numel()
        return self.model.predict(labels, state)

    def joint_after_projection(self, encoder_projected, prediction_projected):
        self.joint_calls += 1
        return self.model.joint_after_projection(encoder_projected, prediction_projected)


def test_aes_skip_skips_blank_frames_of_a_blank_confident_model():
    encoder_output, lengths = random_inputs(4, 60, seed=12, lengths=[60, 41, 60, 7])
    config = BeamSearchConfig(beam_size=4, window_size=8, return_nbest=True)
    aes_model, skip_model = CountingModel(tiny_model("rnnt", "quiet")), CountingModel(tiny_model("rnnt", "quiet"))
    expected = AesBeamSearch(aes_model, config)(encoder_output, lengths)
    got = AesSkipBlankSearch(skip_model, config)(encoder_output, lengths)
    assert_same_hypotheses(got, expected)
    assert sum(len(h.tokens) for h in got.to_list()) > 0
    assert skip_model.joint_calls < aes_model.joint_calls / 3


@pytest.mark.parametrize("kind", sorted(DURATION_SETS))
@pytest.mark.parametrize("regime", ["realistic", "chatty"])
def test_alsd_beam_one_is_greedy(kind, regime):
    model = tiny_model(kind, regime)
    encoder_output, lengths = random_inputs(7, 30, seed=5, lengths=[30, 0, 1, 29, 12, 30, 7])
    for max_symbols in (1, 3, 10):
        greedy = LabelLoopingGreedy(model, GreedyConfig(max_symbols=max_symbols))(encoder_output, lengths)
        decoder = AlsdBeamSearch(model, BeamSearchConfig(beam_size=1, max_symbols_per_frame=max_symbols))
        for beam in decode_both(decoder, encoder_output, lengths):
            for got, expected in zip(beam.to_list(), greedy.to_list()):
                assert (got.tokens, got.frame_indices, got.durations) == (
                    expected.tokens,
                    expected.frame_indices,
                    expected.durations,
                )


@pytest.mark.parametrize("regime", ["realistic", "chatty", "quiet"])
@pytest.mark.parametrize("decoder_class", [AesBeamSearch, AesSkipBlankSearch])
def test_aes_beam_one_is_greedy_with_max_symbols_equal_to_expansion_steps(decoder_class, regime):
    model = tiny_model("rnnt", regime)
    encoder_output, lengths = random_inputs(5, 30, seed=6, lengths=[30, 0, 1, 17, 30])
    for steps in (1, 2, 4):
        greedy = LabelLoopingGreedy(model, GreedyConfig(max_symbols=steps))(encoder_output, lengths)
        config = BeamSearchConfig(beam_size=1, expansion_steps=steps, window_size=4)
        for beam in decode_both(decoder_class(model, config), encoder_output, lengths):
            for got, expected in zip(beam.to_list(), greedy.to_list()):
                assert (got.tokens, got.frame_indices) == (expected.tokens, expected.frame_indices)


@pytest.mark.parametrize("decoder_class", [AlsdBeamSearch, AesBeamSearch, AesSkipBlankSearch, WindBeamSearch])
def test_one_batch_of_n_equals_n_batches_of_one(decoder_class):
    model = tiny_model("rnnt")
    encoder_output, lengths = random_inputs(6, 25, seed=7, lengths=[25, 3, 0, 18, 25, 9])
    decoder = decoder_class(model, BeamSearchConfig(beam_size=4, lm_weight=0.3), bigram_lm())
    graph_path = CheckedGraphPath(decoder)  # one state for all calls: the batch of 6, then each alone
    for decode in (decoder, graph_path):
        together = decode(encoder_output, lengths).to_list()
        for b in range(6):
            alone = decode(encoder_output[b : b + 1, : int(lengths[b])], lengths[b : b + 1]).to_list()[0]
            assert alone.tokens == together[b].tokens
            assert alone.score == pytest.approx(together[b].score, abs=1e-9)


def test_lm_flips_a_word_only_when_weighted():
    # two labels about equally likely to the model at every emission; the LM strongly prefers label 3
    model = tiny_model("rnnt")
    encoder_output, lengths = random_inputs(4, 20, seed=9, lengths=[20] * 4)
    table = torch.full((VOCAB_SIZE + 1, VOCAB_SIZE + 1), math.log(0.01), dtype=torch.double)
    table[:, 3] = math.log(0.9)
    lm = BigramLm(table)
    plain = AlsdBeamSearch(model, BeamSearchConfig(beam_size=4))(encoder_output, lengths).to_list()
    zero = AlsdBeamSearch(model, BeamSearchConfig(beam_size=4, lm_weight=0.0), lm)(encoder_output, lengths)
    fused = AlsdBeamSearch(model, BeamSearchConfig(beam_size=4, lm_weight=2.0), lm)(encoder_output, lengths)
    assert [h.tokens for h in zero.to_list()] == [h.tokens for h in plain]
    count = lambda hypotheses: sum(h.tokens.count(3) for h in hypotheses)  # noqa: E731
    assert count(fused.to_list()) > count(plain)


def test_invariants_and_nbest_shape():
    for kind in DURATION_SETS:
        model = tiny_model(kind)
        encoder_output, lengths = random_inputs(5, 30, seed=10, lengths=[30, 0, 1, 29, 12])
        config = BeamSearchConfig(beam_size=3, return_nbest=True)
        decoders = [AlsdBeamSearch(model, config), AesBeamSearch(model, config)]
        decoders += [AesSkipBlankSearch(model, config)] if kind == "rnnt" else []
        for decoder in decoders:
            hypotheses = decoder(encoder_output, lengths)
            assert hypotheses.nbest.batch_size == 5 * 3
            for hypothesis, length in zip(hypotheses.to_list(), lengths.tolist()):
                assert model.blank_id not in hypothesis.tokens
                assert hypothesis.frame_indices == sorted(hypothesis.frame_indices)
                assert all(0 <= t < length for t in hypothesis.frame_indices)
                if kind != "rnnt":
                    assert all(d in model.durations for d in hypothesis.durations)
            assert hypotheses.to_list()[1].tokens == [] and hypotheses.to_list()[1].score == 0.0


def test_bad_inputs_and_configs_are_named():
    decoder = AlsdBeamSearch(tiny_model("rnnt"), BeamSearchConfig())
    with pytest.raises(ValueError, match="encoder_output must be"):
        decoder(torch.zeros(2, ENCODER_DIM, dtype=torch.double), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="encoder_lengths must lie"):
        decoder(torch.zeros(2, 5, ENCODER_DIM, dtype=torch.double), torch.tensor([1, 6]))
    with pytest.raises(ValueError, match="beam_size"):
        BeamSearchConfig(beam_size=0)
    with pytest.raises(ValueError, match="pruning"):
        BeamSearchConfig(pruning="sometimes")
    with pytest.raises(ValueError, match="blank_lm_scoring"):
        BeamSearchConfig(blank_lm_scoring="full")
    with pytest.raises(ValueError, match="RNN-T only"):
        AesSkipBlankSearch(tiny_model("tdt01234"), BeamSearchConfig())
    with pytest.raises(ValueError, match="window_size"):
        BeamSearchConfig(window_size=0)


@pytest.mark.parametrize("decoder_class", [AlsdBeamSearch, AesBeamSearch, AesSkipBlankSearch])
def test_the_lm_is_checked_and_moved_once_when_built(decoder_class):
    """The meta device stands in for a GPU: the LM's tables really live there, and CPU inputs are refused."""
    model, config = tiny_model("rnnt"), BeamSearchConfig(lm_weight=0.5)
    message = f"lm.vocab_size must equal the model's {VOCAB_SIZE} non-blank labels, got {VOCAB_SIZE + 1}"
    for lm_weight in (0.0, 0.5):  # an LM that does not fit is refused even where it would not be used
        with pytest.raises(ValueError, match=re.escape(message)):
            decoder_class(model, BeamSearchConfig(lm_weight=lm_weight), BigramLm.random(VOCAB_SIZE + 1))
    lm = bigram_lm()
    assert decoder_class(model, config, lm, device="cpu").lm is lm  # already there: not copied
    decoder = decoder_class(model, config, lm, device="meta")
    assert decoder.lm.device == torch.device("meta") and lm.device == torch.device("cpu")
    encoder_output, lengths = random_inputs(2, 5, seed=0)
    with pytest.raises(ValueError, match="the LM is on meta but encoder_output is on cpu"):
        decoder(encoder_output, lengths)


@pytest.mark.parametrize("decoder_class", [AlsdBeamSearch, AesBeamSearch, AesSkipBlankSearch])
@pytest.mark.parametrize("mode", FUSION_MODES)
def test_an_lm_at_weight_zero_gives_exactly_the_search_without_one(decoder_class, mode):
    pruning, scoring = mode
    model = tiny_model("rnnt")
    encoder_output, lengths = random_inputs(5, 20, seed=4, lengths=[20, 0, 1, 13, 20])
    config = BeamSearchConfig(beam_size=4, pruning=pruning, blank_lm_scoring=scoring, return_nbest=True)
    zero = decoder_class(model, config, bigram_lm())
    assert zero.lm is None  # dropped when built: no fusion code runs for nothing
    got, expected = zero(encoder_output, lengths), decoder_class(model, config)(encoder_output, lengths)
    assert got.to_list() == expected.to_list()  # exactly: tokens, frames, token scores and totals
    listed = lambda hypotheses: [h if h.score > -math.inf else None for h in hypotheses.nbest.to_list()]  # noqa: E731
    assert listed(got) == listed(expected)  # empty slots (score -inf) hold anything


def test_empty_batch():
    decoder = AlsdBeamSearch(tiny_model("tdt01234"), BeamSearchConfig(return_nbest=True))
    hypotheses = decoder(torch.zeros(0, 5, ENCODER_DIM, dtype=torch.double), torch.zeros(0, dtype=torch.long))
    assert hypotheses.to_list() == []


@pytest.mark.gpu
@pytest.mark.parametrize("kind", sorted(DURATION_SETS))
@pytest.mark.parametrize("use_cuda_graphs", [False, True])
def test_gpu_equals_cpu(kind, use_cuda_graphs):
    model = tiny_model(kind)
    encoder_output, lengths = random_inputs(5, 30, seed=13, lengths=[30, 0, 1, 22, 30])
    config = BeamSearchConfig(beam_size=4, lm_weight=0.5, return_nbest=True, use_cuda_graphs=use_cuda_graphs)
    gpu_model = copy.deepcopy(model).cuda()
    decoders = [AlsdBeamSearch, AesBeamSearch] + ([AesSkipBlankSearch] if kind == "rnnt" else [])
    for decoder_class in decoders:
        on_cpu = decoder_class(model, config, bigram_lm())(encoder_output, lengths)
        on_gpu = decoder_class(gpu_model, config, bigram_lm(), device="cuda")(encoder_output.cuda(), lengths.cuda())
        assert_same_hypotheses(on_gpu, on_cpu)
