"""Greedy transducer decoding with LM shallow fusion against the per-utterance fused reference.

Random tiny RNN-T and TDT models (float64, so batched and per-utterance arithmetic cannot part on near-ties),
with either a table-driven bigram LM or an `NgramLm` read from a random ARPA file. Fused greedy must match the
reference exactly in tokens, frames and durations, for any WIND window.
"""

from __future__ import annotations

import copy
import functools
import math
import random
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoders.ngram.arpa import write_arpa
from decoders.ngram.lm import NgramLm
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from decoders.transducer.tiny import TinyTransducer, calibrate_blank_bias
from tests.decoders.ngram.arpa_factory import random_ngrams
from tests.reference.compare import assert_same_hypotheses
from tests.reference.table_transducer import TableTransducer, frame_inputs, one_hot_table
from tests.reference.transducer_greedy import greedy_decode

DURATION_SETS = {"rnnt": (), "tdt01234": (0, 1, 2, 3, 4), "tdt0246": (0, 2, 4, 6)}
VOCAB_SIZE = 12
ENCODER_DIM = 16


class BigramTableLm:
    """A label-level LM from a table: state 0 is the start, state 1 + l follows label l."""

    def __init__(self, vocab_size: int, seed: int, sharpness: float = 2.0) -> None:
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn(vocab_size + 1, vocab_size, generator=generator, dtype=torch.double) * sharpness
        self.table = torch.log_softmax(logits, dim=-1).float()
        self.vocab_size = vocab_size

    @property
    def device(self) -> torch.device:
        return self.table.device

    def to(self, device: torch.device | str) -> BigramTableLm:
        if torch.device(device) == self.device:
            return self
        moved = copy.copy(self)
        moved.table = self.table.to(device)
        return moved

    def initial_states(self, batch_size: int) -> torch.Tensor:
        return torch.zeros(batch_size, dtype=torch.long, device=self.device)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        next_states = torch.arange(1, self.vocab_size + 1, device=self.device).expand(states.shape[0], self.vocab_size)
        return self.table[states], next_states

    def final_scores(self, states: torch.Tensor) -> torch.Tensor:
        return torch.zeros(states.shape[0], device=self.device)


@functools.cache
def tiny_model(kind: str, regime: str) -> TinyTransducer:
    model = TinyTransducer(vocab_size=VOCAB_SIZE, encoder_dim=ENCODER_DIM, prediction_dim=16, joint_dim=16,
                           durations=DURATION_SETS[kind], seed=len(kind) + 11)
    if regime == "realistic":
        calibrate_blank_bias(model, frames_per_label=3.0)
    return model.double()


@functools.cache
def ngram_lm(order: int, seed: int, tmp_dir: str) -> NgramLm:
    rng = random.Random(seed)
    path = f"{tmp_dir}/fusion_{order}_{seed}.arpa"
    write_arpa(path, random_ngrams(rng, order, VOCAB_SIZE, ngrams_per_order=60, drop_prefixes=0.2))
    return NgramLm.from_arpa(path, VOCAB_SIZE)


@pytest.fixture(scope="module")
def arpa_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("fusion_arpa"))


@st.composite
def fusion_cases(draw):
    kind = draw(st.sampled_from(sorted(DURATION_SETS)))
    regime = draw(st.sampled_from(("realistic", "chatty")))
    batch_size = draw(st.integers(1, 9))
    max_frames = draw(st.integers(0, 10 if regime == "chatty" else 30))
    length = st.one_of(st.just(0), st.just(1), st.integers(0, max_frames))
    lengths = [min(draw(length), max_frames) for _ in range(batch_size)]
    max_symbols = draw(st.integers(1, 6))
    window = draw(st.integers(1, 8))
    lm_weight = draw(st.sampled_from((0.0, 0.3, 1.0, 4.0)))
    lm_kind = draw(st.sampled_from(("table", "ngram3", "ngram6")))
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    encoder_output = torch.randn(batch_size, max_frames, ENCODER_DIM, generator=generator, dtype=torch.double)
    return (kind, regime, encoder_output, torch.tensor(lengths, dtype=torch.long), max_symbols, window, lm_weight,
            lm_kind, seed % 5)


def make_lm(lm_kind: str, lm_seed: int, arpa_dir: str):
    if lm_kind == "table":
        return BigramTableLm(VOCAB_SIZE, lm_seed)
    return ngram_lm(int(lm_kind[len("ngram"):]), lm_seed, arpa_dir)


def assert_same(batched, reference):
    assert_same_hypotheses(batched, reference, score_tolerance=1e-6)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("host_loop", [True, False], ids=["host-loop", "tensor-loop"])
@SETTINGS
@given(case=fusion_cases())
def test_fused_label_looping_matches_reference(case, arpa_dir, host_loop):
    kind, regime, encoder_output, lengths, max_symbols, window, lm_weight, lm_kind, lm_seed = case
    model = tiny_model(kind, regime)
    lm = make_lm(lm_kind, lm_seed, arpa_dir)
    reference = greedy_decode(model, encoder_output, lengths, max_symbols, lm=lm, lm_weight=lm_weight)
    decoder = LabelLoopingGreedy(model, GreedyConfig(max_symbols=max_symbols, window_size=window,
                                                     lm_weight=lm_weight, host_loop=host_loop), lm=lm)
    assert_same(decoder(encoder_output, lengths).to_list(), reference)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(case=fusion_cases())
def test_fused_one_batch_of_n_equals_n_batches_of_one(case, arpa_dir):
    kind, regime, encoder_output, lengths, max_symbols, window, lm_weight, lm_kind, lm_seed = case
    decoder = LabelLoopingGreedy(tiny_model(kind, regime), GreedyConfig(max_symbols=max_symbols, window_size=window,
                                                                       lm_weight=lm_weight),
                                 lm=make_lm(lm_kind, lm_seed, arpa_dir))
    together = decoder(encoder_output, lengths).to_list()
    apart = [decoder(encoder_output[b : b + 1], lengths[b : b + 1]).to_list()[0] for b in range(len(lengths))]
    assert_same(together, apart)


@pytest.mark.parametrize("kind", sorted(DURATION_SETS))
def test_zero_weight_gives_plain_greedy_tokens(kind):
    model = tiny_model(kind, "realistic")
    encoder_output = torch.randn(5, 40, ENCODER_DIM, generator=torch.Generator().manual_seed(1), dtype=torch.double)
    lengths = torch.tensor([40, 0, 1, 33, 17])
    plain = greedy_decode(model, encoder_output, lengths)
    fused = LabelLoopingGreedy(model, GreedyConfig(lm_weight=0.0), lm=BigramTableLm(VOCAB_SIZE, 3))
    assert fused.lm is None  # dropped when built: no fusion code runs for nothing
    for got, expected in zip(fused(encoder_output, lengths).to_list(), plain):
        assert (got.tokens, got.frame_indices, got.durations) == (expected.tokens, expected.frame_indices,
                                                                  expected.durations)
    # scores included, exactly
    assert_same_hypotheses(fused(encoder_output, lengths).to_list(),
                           LabelLoopingGreedy(model)(encoder_output, lengths).to_list(), score_tolerance=0.0)


def test_a_strong_lm_changes_tokens_of_a_random_model():
    model = tiny_model("rnnt", "realistic")
    encoder_output = torch.randn(4, 60, ENCODER_DIM, generator=torch.Generator().manual_seed(2), dtype=torch.double)
    lengths = torch.tensor([60, 60, 45, 30])
    plain = LabelLoopingGreedy(model)(encoder_output, lengths).to_list()
    fused = LabelLoopingGreedy(model, GreedyConfig(lm_weight=5.0), lm=BigramTableLm(VOCAB_SIZE, 3, sharpness=4.0))
    fused_hypotheses = fused(encoder_output, lengths).to_list()
    assert [h.tokens for h in fused_hypotheses] != [h.tokens for h in plain]
    # blank decisions are kept: the same number of labels on the same frames
    assert [h.frame_indices for h in fused_hypotheses] == [h.frame_indices for h in plain]


def two_word_case(durations: tuple[int, ...]):
    """Frame 0 of a table model prefers label 1 a little over label 2; an LM that prefers 2 after label 0."""
    vocab_size = 3
    entries = {(0, 0): 0, (2, 1): (1, 0)} if not durations else {(0, 0): (0, 1), (2, 1): (1, 1)}
    table = one_hot_table(5, 4, vocab_size, entries, durations=durations,
                          default_duration=1 if durations else 0)
    # at (frame 2, after one label) label 1 scores 10 and label 2 scores 9.5: plain greedy says 1
    table[2, 1, 2] = 9.5
    model = TableTransducer(table, vocab_size, durations)
    lm = BigramTableLm(vocab_size, 0)
    lm.table = torch.full((vocab_size + 1, vocab_size), -5.0)
    lm.table[1 + 0, 2] = -0.1  # after label 0, label 2 is likely
    lm.table[1 + 0, 1] = -4.0
    return model, lm


@pytest.mark.parametrize("durations", [(), (0, 1, 2)])
@pytest.mark.parametrize("window", [1, 4])
def test_lm_flips_one_word_only_when_weighted(durations, window):
    model, lm = two_word_case(durations)
    inputs, lengths = frame_inputs(1, 5), torch.tensor([5])
    plain = LabelLoopingGreedy(model, GreedyConfig(window_size=window, lm_weight=0.0), lm=lm)(inputs, lengths)
    fused = LabelLoopingGreedy(model, GreedyConfig(window_size=window, lm_weight=0.5), lm=lm)(inputs, lengths)
    assert plain.to_list()[0].tokens == [0, 1]
    assert fused.to_list()[0].tokens == [0, 2]
    assert fused.to_list()[0].frame_indices == plain.to_list()[0].frame_indices == [0, 2]
    lm_bonus = 0.5 * (lm.table[0, 0] + lm.table[1, 2])
    assert fused.to_list()[0].score == pytest.approx(sum(fused.to_list()[0].token_scores) + float(lm_bonus))


@pytest.mark.parametrize("durations", [(), (0, 1, 2)])
def test_a_two_word_arpa_lm_flips_the_second_word(tmp_path, durations):
    """The same case with an NgramLm from a hand-written ARPA file: after label 0, label 2 is far likelier."""
    model, _ = two_word_case(durations)
    path = tmp_path / "two_words.arpa"
    write_arpa(path, {(0,): (-0.5, -0.3), (1,): (-0.5, 0.0), (2,): (-2.0, 0.0), (-1,): (-99.0, 0.0),
                      (-2,): (-1.0, 0.0), (0, 2): (-0.05, 0.0)})
    lm = NgramLm.from_arpa(path, 3)
    inputs, lengths = frame_inputs(1, 5), torch.tensor([5])
    plain = LabelLoopingGreedy(model, GreedyConfig(lm_weight=0.0), lm=lm)(inputs, lengths).to_list()[0]
    fused = LabelLoopingGreedy(model, GreedyConfig(lm_weight=0.5), lm=lm)(inputs, lengths).to_list()[0]
    assert (plain.tokens, fused.tokens) == ([0, 1], [0, 2])
    # p(1 | 0) backs off: log10 -0.3 - 0.5; p(2 | 0) is listed: log10 -0.05
    assert 10.0 + 0.5 * (-0.8 * math.log(10)) < 9.5 + 0.5 * (-0.05 * math.log(10))


def test_fusion_rejects_a_mismatched_lm():
    message = f"lm.vocab_size must equal the model's {VOCAB_SIZE} non-blank labels, got {VOCAB_SIZE + 1}"
    for lm_weight in (0.0, 0.5):  # an LM that does not fit is refused even where it would not be used
        with pytest.raises(ValueError, match=re.escape(message)):
            LabelLoopingGreedy(tiny_model("rnnt", "realistic"), GreedyConfig(lm_weight=lm_weight),
                               lm=BigramTableLm(VOCAB_SIZE + 1, 0))


def test_the_lm_moves_once_when_built_and_inputs_from_elsewhere_are_refused():
    """The meta device stands in for a GPU: the LM's tables really live there, and CPU inputs are refused."""
    model, lm = tiny_model("rnnt", "realistic"), BigramTableLm(VOCAB_SIZE, 0)
    config = GreedyConfig(lm_weight=0.5)
    assert LabelLoopingGreedy(model, config, lm=lm, device="cpu").lm is lm  # already there: not copied
    decoder = LabelLoopingGreedy(model, config, lm=lm, device="meta")
    assert decoder.lm.device == torch.device("meta") and lm.device == torch.device("cpu")
    with pytest.raises(ValueError, match="the LM is on meta but encoder_output is on cpu"):
        decoder(torch.zeros(1, 3, ENCODER_DIM, dtype=torch.double), torch.tensor([3]))
    with pytest.raises(ValueError, match="the LM is on meta but encoder_output is on cpu"):
        LabelLoopingGreedy(model, config, lm=lm.to("meta"))(torch.zeros(1, 3, ENCODER_DIM), torch.tensor([3]))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", sorted(DURATION_SETS))
@pytest.mark.parametrize("window", [1, 4])
def test_fused_cuda_graphs_equal_eager_on_gpu(kind, window, arpa_dir):
    model = TinyTransducer(vocab_size=VOCAB_SIZE, encoder_dim=ENCODER_DIM, prediction_dim=16, joint_dim=16,
                           durations=DURATION_SETS[kind], seed=3)
    calibrate_blank_bias(model)
    model = model.cuda()
    lm = ngram_lm(4, 1, arpa_dir)
    generator = torch.Generator().manual_seed(0)
    config = dict(window_size=window, lm_weight=0.7)
    graphs = LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=True, **config), lm=lm, device="cuda")
    eager = LabelLoopingGreedy(model, GreedyConfig(use_cuda_graphs=False, **config), lm=lm, device="cuda")
    for batch_size, frames in [(5, 40), (3, 100), (8, 30)]:
        encoder_output = torch.randn(batch_size, frames, ENCODER_DIM, generator=generator).cuda()
        lengths = torch.randint(0, frames + 1, (batch_size,), generator=generator).cuda()
        got, expected = graphs(encoder_output, lengths).to_list(), eager(encoder_output, lengths).to_list()
        for a, b in zip(got, expected):
            assert (a.tokens, a.frame_indices, a.durations) == (b.tokens, b.frame_indices, b.durations)
