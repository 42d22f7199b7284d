"""The CUDA-graph path of the beam searches (`CudaGraphsRunner`).

On the CPU its pieces run uncaptured over the runner's preallocated state (`CheckedGraphPath`), checked to read
nothing on the host and to write every state tensor in place; tests/decoders/transducer/test_beam.py compares
that path with the references in every case it draws, and this file checks what is particular to it: the
checks themselves, reusing one state across batches, and the bound on tree columns it preallocates. On a GPU
(`gpu` marker) captured graphs must give what eager decoding gives.
"""

from __future__ import annotations

import copy
import random

import pytest

from decoders.ngram.arpa import write_arpa
from decoders.ngram.lm import NgramLm
from decoders.transducer.aes import AesSkipBlankSearch
from decoders.transducer.beam import AesBeamSearch, AlsdBeamSearch, BeamSearchConfig
from tests.decoders.ngram.arpa_factory import random_ngrams
from tests.decoders.transducer.test_beam import (
    DURATION_SETS,
    FUSION_MODES,
    VOCAB_SIZE,
    CheckedGraphPath,
    assert_same_hypotheses,
    bigram_lm,
    random_inputs,
    tiny_model,
)

SEARCHES = {"alsd": AlsdBeamSearch, "aes": AesBeamSearch, "aes_skip": AesSkipBlankSearch}
CASES = [(kind, name) for kind in sorted(DURATION_SETS) for name in SEARCHES if kind == "rnnt" or name != "aes_skip"]


def test_the_checks_catch_host_reads_and_moved_tensors():
    model = tiny_model("rnnt")
    encoder_output, lengths = random_inputs(3, 12, seed=1, lengths=[12, 5, 0])
    for decoder_class, piece in ((AlsdBeamSearch, "step"), (AesSkipBlankSearch, "skip_first")):
        decoder = decoder_class(model, BeamSearchConfig(beam_size=3))
        pieces = decoder._pieces
        decoder._pieces = lambda state, eager, pieces=pieces: pieces(state, eager=True)  # eager shortcuts read
        with pytest.raises(AssertionError, match=f"piece '{piece}' reads the host"):
            CheckedGraphPath(decoder)(encoder_output, lengths)

    decoder = AlsdBeamSearch(model, BeamSearchConfig(beam_size=3))
    step = decoder._step

    def rebinding_step(state, eager):
        step(state, eager)
        state.tree.scores = state.tree.scores.clone()

    decoder._step = rebinding_step
    with pytest.raises(AssertionError, match="piece 'step' moved a state tensor"):
        CheckedGraphPath(decoder)(encoder_output, lengths)


@pytest.mark.parametrize("kind, search", CASES)
def test_one_graph_state_serves_batches_of_any_size_up_to_its_own(kind, search):
    model = tiny_model(kind)
    config = BeamSearchConfig(beam_size=3, lm_weight=0.4, max_symbols_per_frame=3, window_size=4, return_nbest=True)
    decoder = SEARCHES[search](model, config, bigram_lm(3))
    path = CheckedGraphPath(decoder)
    batches = [(6, 25, 0), (2, 9, 1), (7, 70, 2), (3, 0, 3), (1, 64, 4)]  # the third outgrows the first state
    states = []
    for batch_size, frames, seed in batches:
        encoder_output, lengths = random_inputs(batch_size, frames, seed)
        lengths[0] = frames
        assert_same_hypotheses(path(encoder_output, lengths), decoder(encoder_output, lengths))
        states.append(path.state)
    assert states[0] is states[1] and states[2] is states[3] is states[4] and states[1] is not states[2]


@pytest.mark.parametrize("kind, search", [case for case in CASES if case[1] != "aes_skip"])
def test_graph_state_holds_the_longest_search(kind, search):
    # blank never wins: every hypothesis takes max_symbols labels (ALSD) or one per expansion round (AES) on
    # every frame, then the forced blank, which is the most columns a search can append (TDT: fewer, as labels
    # with durations above 0 move on by themselves)
    model = copy.deepcopy(tiny_model(kind, "chatty"))
    model.set_blank_bias(-30.0)
    config = BeamSearchConfig(beam_size=2, max_symbols_per_frame=3, expansion_steps=2, return_nbest=True)
    decoder = SEARCHES[search](model, config)
    path = CheckedGraphPath(decoder)
    encoder_output, lengths = random_inputs(2, 64, seed=5, lengths=[64, 17])
    assert_same_hypotheses(path(encoder_output, lengths), decoder(encoder_output, lengths))
    per_frame = config.max_symbols_per_frame + 1 if search == "alsd" else config.expansion_steps + 1
    columns = int(path.state.tree.length)
    assert columns == 64 * per_frame if kind == "rnnt" else columns <= 64 * per_frame
    assert path.state.tree.capacity == decoder._max_columns(64) == 64 * per_frame + 1


# --- on a GPU: captured graphs against eager decoding ------------------------------------------------------
@pytest.fixture(scope="module")
def ngram(tmp_path_factory) -> NgramLm:
    path = tmp_path_factory.mktemp("beam_graphs") / "lm.arpa"
    write_arpa(str(path), random_ngrams(random.Random(3), 3, VOCAB_SIZE, ngrams_per_order=50, drop_prefixes=0.2))
    return NgramLm.from_arpa(str(path), VOCAB_SIZE)


@pytest.mark.gpu
@pytest.mark.parametrize("kind, search", CASES)
@pytest.mark.parametrize("lm_kind", [None, "bigram", "ngram"])
def test_cuda_graphs_equal_eager_on_gpu(kind, search, lm_kind, ngram):
    model = copy.deepcopy(tiny_model(kind)).cuda()
    lm = {None: None, "bigram": bigram_lm(4), "ngram": ngram}[lm_kind]
    for pruning, scoring in FUSION_MODES if lm_kind else FUSION_MODES[-1:]:
        settings = dict(
            beam_size=4, lm_weight=0.5, pruning=pruning, blank_lm_scoring=scoring, window_size=4, return_nbest=True
        )
        graphs = SEARCHES[search](model, BeamSearchConfig(use_cuda_graphs=True, **settings), lm, device="cuda")
        eager = SEARCHES[search](model, BeamSearchConfig(use_cuda_graphs=False, **settings), lm, device="cuda")
        for batch_size, frames, seed in [(5, 30, 0), (3, 12, 1), (9, 80, 2), (2, 40, 3)]:
            encoder_output, lengths = random_inputs(batch_size, frames, seed)
            encoder_output, lengths = encoder_output.cuda(), lengths.cuda()
            assert_same_hypotheses(graphs(encoder_output, lengths), eager(encoder_output, lengths))
        assert graphs._graphs is not None and graphs._graphs.graphs  # the graphs ran, not the eager path
