"""Beam search fused with the real n-gram LM (`NgramLm`, read from random ARPA files) against the references.

Same checks as tests/decoders/transducer/test_beam.py with the bigram table LM: best tokens, frames and
durations equal, n-best scores within 1e-5, in all four fusion modes; AES++ with skipping equal to AES++.
"""

from __future__ import annotations

import functools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoders.ngram.arpa import write_arpa
from decoders.ngram.lm import NgramLm
from decoders.transducer.aes import AesSkipBlankSearch
from decoders.transducer.beam import AesBeamSearch, AlsdBeamSearch, BeamSearchConfig
from tests.decoders.ngram.arpa_factory import random_ngrams
from tests.decoders.transducer.test_beam import (
    FUSION_MODES,
    VOCAB_SIZE,
    assert_agree,
    assert_same_hypotheses,
    cases,
    tiny_model,
)
from tests.reference.transducer_beam import alsd_decode, maes_decode


@functools.cache
def ngram_lm(order: int, seed: int, directory: str) -> NgramLm:
    path = f"{directory}/beam_{order}_{seed}.arpa"
    write_arpa(path, random_ngrams(random.Random(seed), order, VOCAB_SIZE, ngrams_per_order=50, drop_prefixes=0.2))
    return NgramLm.from_arpa(path, VOCAB_SIZE)


@pytest.fixture(scope="module")
def arpa_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("beam_arpa"))


SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(
    cases(), st.sampled_from(FUSION_MODES), st.sampled_from((0.3, 1.0)), st.sampled_from((2, 3, 5)), st.integers(0, 3)
)
def test_alsd_with_ngram_lm_matches_reference(arpa_dir, case, mode, lm_weight, order, lm_seed):
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
    model, lm = tiny_model(kind), ngram_lm(order, lm_seed, arpa_dir)
    batched = AlsdBeamSearch(model, config, lm)(encoder_output, lengths)
    assert_agree(batched, alsd_decode(model, encoder_output, lengths, config, lm), beam_size)


@SETTINGS
@given(
    cases(kinds=("rnnt",)),
    st.sampled_from(FUSION_MODES),
    st.sampled_from((0.3, 1.0)),
    st.sampled_from((2, 4)),
    st.integers(1, 8),
)
def test_aes_and_aes_skip_with_ngram_lm_match_reference(arpa_dir, case, mode, lm_weight, order, window):
    _, encoder_output, lengths, beam_size, _, normalize = case
    pruning, scoring = mode
    config = BeamSearchConfig(
        beam_size=beam_size,
        lm_weight=lm_weight,
        pruning=pruning,
        blank_lm_scoring=scoring,
        length_normalization=normalize,
        window_size=window,
        return_nbest=True,
    )
    model, lm = tiny_model("rnnt"), ngram_lm(order, 7, arpa_dir)
    batched = AesBeamSearch(model, config, lm)(encoder_output, lengths)
    assert_agree(batched, maes_decode(model, encoder_output, lengths, config, lm), beam_size)
    assert_same_hypotheses(AesSkipBlankSearch(model, config, lm)(encoder_output, lengths), batched)
