from __future__ import annotations

import torch

from decoders.hypotheses import BatchedHypotheses


def test_append_writes_only_masked_rows_and_tracks_frames():
    hypotheses = BatchedHypotheses(3, capacity=2, with_durations=True)
    hypotheses.append_(torch.tensor([True, False, True]), torch.tensor([5, 6, 7]), torch.tensor([0, 0, 2]),
                       torch.tensor([-1.0, -2.0, -3.0]), torch.tensor([1, 1, 0]))
    hypotheses.append_(torch.tensor([True, True, False]), torch.tensor([8, 9, 4]), torch.tensor([0, 1, 3]),
                       torch.tensor([-0.5, -0.25, -9.0]), torch.tensor([2, 0, 0]))
    rows = hypotheses.to_list()
    assert [r.tokens for r in rows] == [[5, 8], [9], [7]]
    assert [r.frame_indices for r in rows] == [[0, 0], [1], [2]]
    assert [r.durations for r in rows] == [[1, 2], [0], [0]]
    assert [r.score for r in rows] == [-1.5, -0.25, -3.0]
    assert hypotheses.last_frame.tolist() == [0, 1, 2]
    assert hypotheses.last_frame_count.tolist() == [2, 1, 1]


def test_growth_keeps_contents():
    hypotheses = BatchedHypotheses(2, capacity=1)
    for step in range(5):
        hypotheses.ensure_capacity_(step + 1)
        hypotheses.append_(torch.tensor([True, step % 2 == 0]), torch.tensor([step, 10 + step]),
                           torch.tensor([step, step]), torch.zeros(2))
    assert hypotheses.capacity >= 5
    rows = hypotheses.to_list()
    assert rows[0].tokens == [0, 1, 2, 3, 4]
    assert rows[1].tokens == [10, 12, 14]
    assert rows[0].durations is None


def test_select_trims_and_copies():
    hypotheses = BatchedHypotheses(3, capacity=8)
    hypotheses.append_(torch.tensor([True, True, True]), torch.tensor([1, 2, 3]), torch.zeros(3, dtype=torch.long),
                       torch.zeros(3))
    first_two = hypotheses.select(2)
    hypotheses.reset_()
    assert first_two.tokens.shape == (2, 1)
    assert [r.tokens for r in first_two.to_list()] == [[1], [2]]
    assert [r.tokens for r in hypotheses.to_list()] == [[], [], []]


def test_from_lists_equals_appending_the_same_labels():
    appended = BatchedHypotheses(3, capacity=4, with_durations=True)
    appended.append_(torch.tensor([True, False, True]), torch.tensor([5, 6, 7]), torch.tensor([0, 0, 2]),
                     torch.tensor([-1.0, -2.0, -3.0]), torch.tensor([1, 1, 0]))
    appended.append_(torch.tensor([True, False, False]), torch.tensor([8, 9, 4]), torch.tensor([0, 1, 3]),
                     torch.tensor([-0.5, -0.25, -9.0]), torch.tensor([2, 0, 0]))
    built = BatchedHypotheses.from_lists([[5, 8], [], [7]], [[0, 0], [], [2]], [[-1.0, -0.5], [], [-3.0]],
                                         [-1.5, 0.0, -3.0], [[1, 2], [], [0]], [0, -1, 2], [2, 0, 1])
    assert built.to_list() == appended.to_list()
    assert built.last_frame.tolist() == appended.last_frame.tolist()
    assert built.last_frame_count.tolist() == appended.last_frame_count.tolist()
    empty = BatchedHypotheses.from_lists([], [], [], [], None, [], [])
    assert empty.to_list() == [] and empty.tokens.shape == (0, 1)
