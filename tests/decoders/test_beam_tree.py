"""BeamTree on hand-made steps: parent pointers, hashes, recombination, ranking."""

from __future__ import annotations

import math

import pytest
import torch

from decoders.hypotheses import HASH_MULTIPLIER, NO_LABEL, BeamTree, extend_hashes

BLANK = 9


def step(tree: BeamTree, parents, labels, scores, frames, next_frames, durations=None):
    as_tensor = lambda values: torch.tensor([values])  # noqa: E731  one utterance
    tree.ensure_capacity_(int(tree.length) + 1)  # the search loops count columns on the host instead
    tree.append_(
        as_tensor(parents),
        as_tensor(labels),
        torch.tensor([scores], dtype=torch.double),
        as_tensor(frames),
        as_tensor(next_frames),
        as_tensor(durations) if durations else None,
    )


def test_hash_is_the_rolling_int64_hash_with_wraparound():
    expected = 0
    hashes = torch.zeros(1, dtype=torch.long)
    for label in (3, 0, 7, 7, 1):
        expected = (expected * HASH_MULTIPLIER + 1 + label) % 2**64
        hashes = extend_hashes(hashes, torch.tensor([label]))
    assert int(hashes[0]) % 2**64 == expected


def test_paths_are_read_back_through_parent_pointers():
    tree = BeamTree(1, 3, BLANK, capacity=1, float_dtype=torch.double, with_durations=True)
    step(tree, [0, 0, 0], [4, 5, BLANK], [-1.0, -2.0, -3.0], [0, 0, 0], [0, 0, 1], [0, 0, 1])
    step(tree, [1, 0, 2], [6, BLANK, 2], [-2.5, -1.5, -3.5], [0, 0, 1], [0, 1, 1], [0, 1, 0])  # grows capacity
    step(tree, [2, 1, 0], [NO_LABEL, 8, 3], [-3.5, -2.0, -4.0], [1, 1, 0], [1, 1, 2], [0, 0, 2])
    hypotheses = tree.to_hypotheses(torch.tensor([[0, 1, 2]])).to_list()
    assert [h.tokens for h in hypotheses] == [[2], [4, 8], [5, 6, 3]]
    assert [h.frame_indices for h in hypotheses] == [[1], [0, 1], [0, 0, 0]]
    assert [h.durations for h in hypotheses] == [[0], [0, 0], [0, 0, 2]]
    assert [h.score for h in hypotheses] == [-3.5, -2.0, -4.0]
    assert hypotheses[2].token_scores == pytest.approx([-2.0, -0.5, -1.5])
    assert tree.non_blank_lengths.tolist() == [[1, 2, 3]]
    assert tree.last_labels.tolist() == [[2, 8, 3]]
    assert tree.next_frames.tolist() == [[1, 1, 2]]
    # labels in a row on one frame: [5, 6] on frame 0, then 3 moves on; 8 is the first label on frame 1
    assert tree.frame_counts.tolist() == [[1, 1, 0]]


def test_recombination_merges_identical_hypotheses_by_logsumexp():
    tree = BeamTree(1, 4, BLANK, float_dtype=torch.double)
    # two paths to [4]: label then blank, and blank then label (RNN-T), plus [5] and [4] on another frame
    step(tree, [0, 0, 0, 0], [4, BLANK, 5, 4], [-1.0, -2.0, -3.0, -4.0], [0, 0, 0, 0], [0, 1, 0, 0])
    step(tree, [0, 1, 2, 3], [BLANK, 4, NO_LABEL, BLANK], [-1.5, -2.5, -3.0, -4.2], [0, 1, 0, 0], [1, 1, 0, 2])
    before = tree.scores.clone()
    tree.recombine_(match_frames=True)
    assert tree.scores[0, 0].item() == pytest.approx(math.log(math.exp(-1.5) + math.exp(-2.5)))
    assert tree.scores[0, 1].item() == -math.inf
    assert tree.scores[0, 2].item() == before[0, 2].item()
    assert tree.scores[0, 3].item() == before[0, 3].item()  # same tokens, another next frame
    tree.recombine_(match_frames=False)
    assert tree.scores[0, 3].item() == -math.inf


def test_ranking_normalizes_by_length_plus_one_on_request():
    tree = BeamTree(1, 2, BLANK, float_dtype=torch.double)
    step(tree, [0, 0], [BLANK, 4], [-1.0, -1.6], [0, 0], [1, 0])  # lengths 0 and 1
    assert tree.ranking(length_normalization=False).tolist() == [[0, 1]]
    assert tree.ranking(length_normalization=True).tolist() == [[1, 0]]  # -0.8 > -1.0
    best = tree.best(length_normalization=True, with_nbest=True)
    assert best.to_list()[0].tokens == [4]
    assert [h.tokens for h in best.nbest.to_list()] == [[4], []]
