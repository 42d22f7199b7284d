"""CpuCtcBeamSearch (numba) against the torch CtcBeamSearch: the same n-best labels, frames and scores.

The torch search is itself checked against the per-utterance reference in tests/reference/ctc.py
(tests/decoders/ctc/test_beam.py); here both run on the same inputs with the same real `NgramLm`s, built
from random ARPA files of orders 2-4 (tests/decoders/ngram/arpa_factory.py: back-off weights of either sign,
pruned contexts, unknown labels). The compiled search reads float32 emissions and sums in float64, so the
emissions are float32 values and the torch search gets them as float64: both then do the same float64
arithmetic, and scores agree to rounding. Continuous random emissions make exact score ties, which the two
may order differently, improbable.
"""

from __future__ import annotations

import functools
import math
import random
import re
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoders.ctc.beam import CtcBeamConfig, CtcBeamSearch
from decoders.ctc.beam_cpu import CpuCtcBeamSearch
from decoders.ngram.arpa import write_arpa
from decoders.ngram.lm import NgramLm
from tests.decoders.ctc.test_greedy import emissions
from tests.decoders.ngram.arpa_factory import random_ngrams
from tests.reference.ctc import BigramLm

_LM_FOLDER = tempfile.TemporaryDirectory(prefix="ctc_beam_cpu_")


@functools.cache
def random_lm(vocab_size: int, seed: int, order: int = 3, drop_prefixes: float = 0.0) -> NgramLm:
    """A random back-off NgramLm over labels 0 .. vocab_size - 1 (cached: hypothesis draws the same few)."""
    rng = random.Random(seed * 131 + vocab_size * 7 + order)
    ngrams = random_ngrams(rng, order, vocab_size, ngrams_per_order=6 * vocab_size, drop_prefixes=drop_prefixes)
    path = Path(_LM_FOLDER.name) / f"lm_{vocab_size}_{seed}_{order}_{drop_prefixes}.arpa"
    write_arpa(path, ngrams)
    return NgramLm.from_arpa(path, vocab_size=vocab_size)


def float32_emissions(regime: str, batch_size: int, frames: int, num_labels: int, blank_id: int, seed: int):
    """log_probs [B, T, V]: float32 values, returned as float64 (what the torch search gets)."""
    return emissions(regime, batch_size, frames, num_labels, blank_id, seed).float().double()


@st.composite
def cases(draw, max_frames: int = 16, max_labels: int = 9):
    regime = draw(st.sampled_from(("peaky", "flat")))
    batch_size = draw(st.integers(1, 5))
    frames = draw(st.integers(0, max_frames))
    num_labels = draw(st.integers(1, max_labels))
    blank_id = draw(st.sampled_from(sorted({num_labels - 1, 0})))
    length = st.one_of(st.just(0), st.just(1), st.integers(0, frames))
    lengths = torch.tensor([min(draw(length), frames) for _ in range(batch_size)], dtype=torch.long)
    log_probs = float32_emissions(regime, batch_size, frames, num_labels, blank_id, draw(st.integers(0, 2**31 - 1)))
    config = CtcBeamConfig(
        beam_size=draw(st.integers(1, 10)),
        lm_weight=draw(st.sampled_from([0.0, 0.5, 1.5])),
        insertion_bonus=draw(st.sampled_from([0.0, 0.7, -0.4])),
        beam_threshold=draw(st.sampled_from([math.inf, 8.0, 2.0])),
        lm_end_of_sentence=draw(st.booleans()),
        max_labels_per_frame=draw(st.sampled_from([None, None, 1, 2, 4])),
        token_min_log_prob=draw(st.sampled_from([-math.inf, -math.inf, -3.0])),
        collapse_threshold=draw(st.sampled_from([None, None, "weak", 0.5, 0.9])),
    )
    lm = None
    if num_labels > 1 and draw(st.integers(0, 5)) > 0:
        lm = random_lm(num_labels - 1, draw(st.integers(0, 3)), draw(st.integers(2, 4)),
                       draw(st.sampled_from([0.0, 0.3])))
    nbest = min(draw(st.integers(1, 4)), config.beam_size)
    return log_probs, lengths, blank_id, config, lm, nbest


# The torch search without an LM adds the insertion bonus to a prefix's score as a float32 number
# (`is_extension * bonus` is a float32 tensor), about 1e-8 per label off the float64 sum: hence the
# tolerance per label.
def assert_same_hypotheses(got, expected, tolerance_per_label: float = 1e-7) -> None:
    assert len(got) == len(expected)
    for row, (g, e) in enumerate(zip(got, expected)):
        assert g.tokens == e.tokens, f"row {row}"
        assert g.frame_indices == e.frame_indices, f"row {row}"
        assert g.token_scores == pytest.approx(e.token_scores, abs=1e-12), f"row {row}"
        if e.score == -math.inf:
            assert g.score == -math.inf, f"row {row}"
        else:
            assert g.score == pytest.approx(e.score, abs=tolerance_per_label * (1 + len(e.tokens))), f"row {row}"


def both(log_probs, lengths, blank_id, config, lm, nbest=1):
    expected = CtcBeamSearch(blank_id, config, lm)(log_probs, lengths, nbest=nbest).to_list()
    got = CpuCtcBeamSearch(blank_id, config, lm)(log_probs, lengths, nbest=nbest).to_list()  # float32 inside
    return got, expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_same_nbest_as_the_torch_search(case):
    log_probs, lengths, blank_id, config, lm, nbest = case
    assert_same_hypotheses(*both(log_probs, lengths, blank_id, config, lm, nbest))


@pytest.mark.parametrize("collapse_threshold", [None, 0.99])
@pytest.mark.parametrize(("lm_weight", "beam_threshold", "max_labels"), [(0.0, math.inf, None), (0.6, 15.0, None),
                                                                         (1.2, 10.0, 16), (-0.3, 15.0, None)])
def test_same_as_torch_on_longer_peaky_input_with_a_large_vocabulary(collapse_threshold, lm_weight, beam_threshold,
                                                                      max_labels):
    """V = 129 and 60 frames: the label bound prunes most candidates here, and must not change the result (a
    negative LM weight turns the LM's part of the bound off)."""
    log_probs = float32_emissions("peaky", 4, 60, 129, 128, seed=4)
    lengths = torch.tensor([60, 41, 1, 0])
    config = CtcBeamConfig(beam_size=8, lm_weight=lm_weight, insertion_bonus=0.3, beam_threshold=beam_threshold,
                           collapse_threshold=collapse_threshold, max_labels_per_frame=max_labels)
    lm = random_lm(128, seed=1, order=4, drop_prefixes=0.3)
    assert_same_hypotheses(*both(log_probs, lengths, 128, config, lm, nbest=4))


def test_edge_cases_t0_t1_beam_one_no_lm_and_all_blank():
    lm = random_lm(4, seed=2)
    logits = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    logits[..., 4] += 12.0  # blank is every frame's argmax, with p(blank) > 0.99
    all_blank = logits.log_softmax(-1).float().double()
    inputs = [
        (torch.zeros(2, 0, 5).log_softmax(-1), torch.tensor([0, 0])),  # T = 0
        (float32_emissions("flat", 3, 1, 5, 4, seed=1), torch.tensor([1, 0, 1])),  # T = 1
        (all_blank, torch.tensor([7, 3, 0])),  # every frame blank
        (float32_emissions("peaky", 4, 30, 5, 4, seed=3), torch.tensor([30, 29, 1, 0])),
    ]
    for log_probs, lengths in inputs:
        for beam_size in (1, 2, 5):
            for lm_weight in (0.0, 0.8):
                for collapse in (None, "weak", 0.9):
                    config = CtcBeamConfig(beam_size=beam_size, lm_weight=lm_weight, collapse_threshold=collapse)
                    for nbest in sorted({1, beam_size}):
                        assert_same_hypotheses(*both(log_probs, lengths, 4, config, lm, nbest))
    # every frame blank decodes to the empty hypothesis
    got = CpuCtcBeamSearch(4, CtcBeamConfig(beam_size=3))(all_blank, torch.tensor([7, 3, 0])).to_list()
    assert [h.tokens for h in got] == [[], [], []]


def test_blank_only_vocabulary():
    log_probs = torch.zeros(3, 4, 1)
    for collapse in (None, "weak"):
        config = CtcBeamConfig(beam_size=2, collapse_threshold=collapse)
        assert_same_hypotheses(*both(log_probs.double(), torch.tensor([4, 0, 2]), 0, config, None, nbest=2))


def test_empty_batch():
    decode = CpuCtcBeamSearch(0, CtcBeamConfig(beam_size=3, lm_weight=1.0), random_lm(4, seed=0))
    assert decode(torch.zeros(0, 5, 5), torch.zeros(0, dtype=torch.long)).to_list() == []


def test_threads_give_the_same_result():
    log_probs = float32_emissions("peaky", 9, 80, 33, 32, seed=5).float()
    lengths = torch.tensor([80, 0, 1, 79, 40, 55, 80, 12, 3])
    lm = random_lm(32, seed=3, order=3)
    results = []
    for threads in (1, 2, 3):
        config = CtcBeamConfig(beam_size=6, lm_weight=0.7, beam_threshold=12.0, collapse_threshold=0.9,
                               cpu_threads=threads)
        decode = CpuCtcBeamSearch(32, config, lm)
        results.append(decode(log_probs, lengths, nbest=3).to_list())
        assert decode(log_probs, lengths, nbest=3).to_list() == results[-1]  # the pool is reused
    assert results[0] == results[1] == results[2]


def test_a_memory_mapped_lm_gives_the_same_result(tmp_path):
    lm = random_lm(16, seed=1, order=3)
    lm.save(tmp_path / "lm.bin")
    mapped = NgramLm.load(tmp_path / "lm.bin")
    log_probs = float32_emissions("peaky", 3, 40, 17, 16, seed=8).float()
    lengths = torch.tensor([40, 33, 2])
    config = CtcBeamConfig(beam_size=4, lm_weight=0.9)
    assert CpuCtcBeamSearch(16, config, mapped)(log_probs, lengths).to_list() == \
        CpuCtcBeamSearch(16, config, lm)(log_probs, lengths).to_list()


def test_float64_and_float16_inputs_are_searched_as_float32():
    log_probs = float32_emissions("peaky", 3, 40, 17, 16, seed=9)
    lengths = torch.tensor([40, 20, 1])
    decode = CpuCtcBeamSearch(16, CtcBeamConfig(beam_size=4, lm_weight=0.5), random_lm(16, seed=2))
    narrow = decode(log_probs.float(), lengths)
    wide = decode(log_probs, lengths)
    assert wide.scores.dtype == torch.float64 and narrow.scores.dtype == torch.float32
    assert [h.tokens for h in wide.to_list()] == [h.tokens for h in narrow.to_list()]
    half = decode(log_probs.half(), lengths)
    assert half.scores.dtype == torch.float16 and all(len(h.tokens) > 0 for h in half.to_list()[:2])


def test_an_lm_at_weight_zero_is_dropped():
    decode = CpuCtcBeamSearch(4, CtcBeamConfig(beam_size=2, lm_weight=0.0), BigramLm.random(4))
    assert decode.lm is None


def test_bad_inputs_and_lms_are_named():
    decode = CpuCtcBeamSearch(2, CtcBeamConfig(beam_size=3))
    with pytest.raises(ValueError, match="log_probs must be"):
        decode(torch.zeros(2, 3), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="lengths must lie"):
        decode(torch.zeros(2, 5, 3), torch.tensor([1, 6]))
    with pytest.raises(ValueError, match="nbest"):
        decode(torch.zeros(2, 5, 3), torch.tensor([1, 2]), nbest=4)
    with pytest.raises(ValueError, match=re.escape("lm.vocab_size must equal the model's 2 non-blank labels, got 4")):
        CpuCtcBeamSearch(2, CtcBeamConfig(lm_weight=1.0), random_lm(4, seed=0))(torch.zeros(2, 5, 3),
                                                                                 torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="reads an NgramLm's arrays; got BigramLm"):
        CpuCtcBeamSearch(4, CtcBeamConfig(lm_weight=0.5), BigramLm.random(4))
    with pytest.raises(ValueError, match="runs on the CPU"):
        CpuCtcBeamSearch(4, CtcBeamConfig(), device="cuda")
    with pytest.raises(ValueError, match="blank_id"):
        CpuCtcBeamSearch(-1)


def test_the_writer_stage_searches_with_the_compiled_search_where_it_can_read_the_lm():
    """The plan's writer search (pipeline/decoding/plan.py) is the compiled one without an LM and with an NgramLm, the
    torch one for any other fused model; on the same compact log-probs both give the same hypotheses."""
    from types import SimpleNamespace

    from pipeline.decoding.plan import DecodingConfig, plan_decoding
    from pipeline.model.nemo_file import ModelFacts

    facts = ModelFacts(kind="hybrid_rnnt_ctc", durations=(), sample_rate=16000, max_symbols=10)
    layout = SimpleNamespace(ctc=SimpleNamespace(vocab_size=32, blank_id=32))
    log_probs = float32_emissions("peaky", 4, 50, 33, 32, seed=6).float()
    compact = [(log_probs[b, : 50 - 7 * b].half().numpy(), (3 * torch.arange(50 - 7 * b)).int().numpy())
               for b in range(4)]
    lm, table = random_lm(32, seed=4), BigramLm.random(32, seed=4)
    expected = {}
    for name, fused, kind in [("none", None, CpuCtcBeamSearch), ("ngram", lm, CpuCtcBeamSearch),
                              ("table", table, CtcBeamSearch)]:
        config = DecodingConfig(strategy="ctc_beam", beam_size=4, lm_uri=None if fused is None else "x.lm",
                                lm_weight=0.0 if fused is None else 0.8, ctc_insertion_bonus=0.5)
        search = plan_decoding(facts, config).build_writer_search(layout, fused)
        assert type(search.search) is kind, name
        expected[name] = search(compact)
        if kind is CpuCtcBeamSearch:  # the torch search on the same input gives the same
            search.search = CtcBeamSearch(32, search.search.config, fused)
            torch_result = search(compact)
            assert [h.tokens for h in torch_result] == [h.tokens for h in expected[name]]
            assert [h.frame_indices for h in torch_result] == [h.frame_indices for h in expected[name]]
            assert [h.score for h in torch_result] == pytest.approx([h.score for h in expected[name]], abs=1e-4)
    assert all(h.frame_indices == sorted(h.frame_indices) and all(f % 3 == 0 for f in h.frame_indices)
               for h in expected["ngram"])  # original frames
