"""The boosting tree against NeMo 3.0's GPU-PB (`ContextGraph` + `GPUBoostingTreeModel`, `context_score` 1.0,
`depth_scaling` 2.0) on the same token sequences: every step's scores over the whole vocabulary agree along
walks through matches, partial matches and failures. NeMo's tree has no end-of-utterance take-back and its own
state numbering, so only the per-step scores are compared.

Cases: the bundled model's tokenizer spelling contact names of the bundled domain set (with their word-start
variants), and random token trees; per-phrase scores where NeMo has them (`ContextGraph.build(scores=...)`),
on phrases that share no prefix (NeMo's shared-node rule for unequal scores depends on phrase order, see
`decoders/boosting/tree.py`).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from decoders.boosting.tree import CONTEXT_SCORE, DEPTH_SCALING, PhraseBoosting

pytestmark = pytest.mark.nemo

ROOT = Path(__file__).resolve().parents[3]
NAMES = ["rachel perkins", "katherine robinson", "shawn martinez", "rebecca schaefer", "anna boyle", "jeff fox",
         "jerome fox", "sara holden", "shawn simpson", "alexander cooper", "desiree diaz", "desiree peterson"]


def nemo_tree(sequences, vocab_size, scores=None):
    context_biasing = pytest.importorskip("nemo.collections.asr.parts.context_biasing.boosting_graph_batched")
    from nemo.collections.asr.parts.context_biasing.context_graph_universal import ContextGraph

    graph = ContextGraph(context_score=CONTEXT_SCORE, depth_scaling=DEPTH_SCALING)
    graph.build(token_ids=[list(s) for s in sequences], phrases=[str(s) for s in sequences], scores=scores,
                uniform_weights=False)
    return context_biasing.GPUBoostingTreeModel.from_context_graph(
        graph, vocab_size=vocab_size, unk_score=0.0, final_eos_score=0.0, use_triton=False, uniform_weights=False)


def assert_walks_agree(ours: PhraseBoosting, nemo, walks):
    for tokens in walks:
        state = ours.initial_states(1)
        nemo_state = nemo.get_init_states(1, bos=True)
        for token in tokens:
            scores, next_states = ours.advance(state)
            with torch.no_grad():
                nemo_scores, nemo_next = nemo.advance(nemo_state)
            assert scores == pytest.approx(nemo_scores.float(), abs=1e-5), f"walk {tokens}, before {token}"
            state, nemo_state = next_states[:, token], nemo_next[:, token]


def walks_near(sequences, vocab_size, rng, count=30):
    walks = []
    for _ in range(count):
        tokens = [t for _ in range(rng.randint(1, 4)) for t in rng.choice(sequences)[: rng.randint(1, 12)]]
        walks.append([t if rng.random() > 0.15 else rng.randrange(vocab_size) for t in tokens])
    return walks


def test_contact_names_with_the_bundled_tokenizer_score_as_in_nemo():
    from pipeline.decoding.fusion import phrase_spellings
    from pipeline.model.nemo_file import read_model_layout

    layout = read_model_layout(ROOT / "models" / "demo_hybrid_rnnt_ctc.nemo")
    vocab_size = layout.tokenizer.vocab_size
    sequences = [s for name in NAMES for s in phrase_spellings(layout.tokenizer.processor, name)]
    assert len(sequences) > len(NAMES)  # the word-start variants are there
    ours = PhraseBoosting.from_token_sequences(sequences, vocab_size)
    nemo = nemo_tree(sequences, vocab_size)
    assert_walks_agree(ours, nemo, walks_near(sequences, vocab_size, random.Random(0)))


@pytest.mark.parametrize("seed", range(6))
def test_random_trees_score_as_in_nemo(seed):
    rng = random.Random(seed)
    vocab_size = rng.randint(2, 8)
    sequences = [[rng.randrange(vocab_size) for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 12))]
    sequences = [list(s) for s in dict.fromkeys(map(tuple, sequences))]
    assert_walks_agree(PhraseBoosting.from_token_sequences(sequences, vocab_size), nemo_tree(sequences, vocab_size),
                       walks_near(sequences, vocab_size, rng))


def test_per_phrase_scores_as_in_nemo():
    sequences = [[1, 2, 3], [4, 5], [6, 2, 2, 7]]
    scores = [2.5, 0.0, 0.4]  # NeMo: 0 means the default context score
    ours = PhraseBoosting.from_token_sequences(sequences, 9, weights=[2.5, None, 0.4])
    assert_walks_agree(ours, nemo_tree(sequences, 9, scores), walks_near(sequences, 9, random.Random(1)))
    assert ours.score_sequence([1, 2, 3]) == pytest.approx(2.5 + (5.0 + torch.log(torch.tensor(2.0)).item())
                                                           + (5.0 + torch.log(torch.tensor(3.0)).item()), abs=1e-5)
