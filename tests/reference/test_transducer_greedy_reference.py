"""The per-utterance reference decoder on hand-made joint tables whose answers can be read off by hand.

The batched decoders are run on the same tables too: a table model makes every rule visible.
"""

from __future__ import annotations

import pytest
import torch

from decoders.transducer.frame_looping import FrameLoopingGreedy
from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy
from tests.reference.table_transducer import TableTransducer, frame_inputs, one_hot_table
from tests.reference.transducer_greedy import greedy_decode_one

V = 3  # labels 0, 1, 2; blank is 3


def decode_all(model: TableTransducer, frames: int, max_symbols: int = 10):
    """The reference's answer, after checking the batched decoders give the same one."""
    encoder_output = frame_inputs(1, frames)
    reference = greedy_decode_one(model, encoder_output[0], max_symbols)
    lengths = torch.tensor([frames])
    for window in (1, 2, 5):
        config = GreedyConfig(max_symbols=max_symbols, window_size=window)
        batched = LabelLoopingGreedy(model, config)(encoder_output, lengths).to_list()[0]
        assert (batched.tokens, batched.frame_indices, batched.durations) == (
            reference.tokens, reference.frame_indices, reference.durations), f"window {window}"
    frame_looping = FrameLoopingGreedy(model, GreedyConfig(max_symbols=max_symbols))(encoder_output, lengths)
    looped = frame_looping.to_list()[0]
    assert (looped.tokens, looped.frame_indices, looped.durations) == (
        reference.tokens, reference.frame_indices, reference.durations)
    return reference


def test_rnnt_emits_labels_on_their_frames_and_skips_blank_frames():
    # frame 0: label 0 then blank; frame 1: blank; frame 2: labels 1, 2 then blank
    table = one_hot_table(3, 4, V, {(0, 0): 0, (2, 1): 1, (2, 2): 2})
    hypothesis = decode_all(TableTransducer(table, V), 3)
    assert hypothesis.tokens == [0, 1, 2]
    assert hypothesis.frame_indices == [0, 2, 2]
    assert hypothesis.durations is None


def test_rnnt_all_blank_gives_nothing():
    hypothesis = decode_all(TableTransducer(one_hot_table(4, 1, V, {}), V), 4)
    assert hypothesis.tokens == [] and hypothesis.score == 0.0


def test_rnnt_max_symbols_moves_the_frame_on():
    # the joint never says blank: exactly max_symbols labels per frame
    table = one_hot_table(2, 8, V, {}, default_label=1)
    hypothesis = decode_all(TableTransducer(table, V), 2, max_symbols=3)
    assert hypothesis.tokens == [1] * 6
    assert hypothesis.frame_indices == [0, 0, 0, 1, 1, 1]


def test_empty_utterance_gives_nothing():
    table = one_hot_table(1, 1, V, {}, default_label=0)
    assert decode_all(TableTransducer(table, V), 0).tokens == []


def test_scores_are_label_log_probabilities():
    table = one_hot_table(1, 2, V, {(0, 0): 2})
    hypothesis = decode_all(TableTransducer(table, V), 1)
    expected = float(torch.log_softmax(torch.tensor([0.0, 0.0, 10.0, 0.0], dtype=torch.double), 0)[2])
    assert hypothesis.token_scores == pytest.approx([expected])
    assert hypothesis.score == pytest.approx(expected)


DURATIONS = (0, 1, 2, 4)  # duration indices 0..3


def test_tdt_label_moves_by_its_duration():
    # frame 0: label 1 lasting 2 frames -> frame 2: label 0 lasting 1 -> frame 3: blank lasting 1 -> end
    table = one_hot_table(4, 3, V, {(0, 0): (1, 2), (2, 1): (0, 1)}, durations=DURATIONS, default_duration=1)
    hypothesis = decode_all(TableTransducer(table, V, DURATIONS), 4)
    assert hypothesis.tokens == [1, 0]
    assert hypothesis.frame_indices == [0, 2]
    assert hypothesis.durations == [2, 1]


def test_tdt_blank_with_duration_zero_moves_one_frame():
    # blank with duration 0 everywhere; a label at frame 2 only
    table = one_hot_table(3, 2, V, {(2, 0): (2, 1)}, durations=DURATIONS, default_duration=0)
    hypothesis = decode_all(TableTransducer(table, V, DURATIONS), 3)
    assert hypothesis.tokens == [2] and hypothesis.frame_indices == [2]


def test_tdt_blank_duration_skips_frames_with_labels():
    # frame 0: blank lasting 4 frames jumps over the label that frame 1 would give
    table = one_hot_table(6, 2, V, {(0, 0): (V, 3), (1, 0): (0, 1), (4, 0): (1, 1)}, durations=DURATIONS,
                          default_duration=1)
    hypothesis = decode_all(TableTransducer(table, V, DURATIONS), 6)
    assert hypothesis.tokens == [1] and hypothesis.frame_indices == [4]


def test_tdt_label_jumping_past_the_end_is_kept():
    table = one_hot_table(2, 2, V, {(1, 0): (0, 3)}, durations=DURATIONS, default_duration=1)
    hypothesis = decode_all(TableTransducer(table, V, DURATIONS), 2)
    assert hypothesis.tokens == [0] and hypothesis.frame_indices == [1] and hypothesis.durations == [4]


def test_tdt_duration_zero_labels_obey_max_symbols():
    # labels with duration 0 forever: max_symbols per frame, then one frame on
    table = one_hot_table(2, 8, V, {}, durations=DURATIONS, default_label=2, default_duration=0)
    hypothesis = decode_all(TableTransducer(table, V, DURATIONS), 2, max_symbols=2)
    assert hypothesis.tokens == [2, 2, 2, 2]
    assert hypothesis.frame_indices == [0, 0, 1, 1]
    assert hypothesis.durations == [0, 0, 0, 0]


def test_tdt_any_duration_set():
    durations = (0, 3, 5)
    # frame 0: label 0 lasting 5 frames -> frame 5: label 1 lasting 3 -> frame 8 >= T: end
    table = one_hot_table(8, 3, V, {(0, 0): (0, 2), (5, 1): (1, 1)}, durations=durations, default_duration=1)
    hypothesis = decode_all(TableTransducer(table, V, durations), 8)
    assert hypothesis.tokens == [0, 1]
    assert hypothesis.frame_indices == [0, 5]
    assert hypothesis.durations == [5, 3]
