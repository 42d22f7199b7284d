"""Chunks of long recordings (`pipeline/stages/chunks.py`): the plan covers every frame, cuts in pauses, and the merge
keeps each word once, at the recording's frames."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.stages.chunks import (
    Chunk,
    ChunkTokens,
    frame_energies_db,
    merge_compact_ctc,
    merge_tokens,
    plan_chunks,
)

SPF = 1280  # samples per encoder frame: 10 ms hop x 8 subsampling at 16 kHz


def covered(chunks: list[Chunk], total_frames: int) -> None:
    assert chunks[0].start_frame == 0 and chunks[-1].end_frame == total_frames
    for before, after in zip(chunks, chunks[1:]):
        assert after.start_frame <= before.end_frame  # no gap: no audio is dropped
        assert after.start_frame > before.start_frame
    for chunk in chunks:
        assert chunk.start_sample == chunk.start_frame * SPF  # whole frames of the recording: no rounding drift


@settings(max_examples=200, deadline=None)
@given(frames=st.integers(1, 3000), chunk=st.integers(2, 400), overlap=st.integers(0, 199), pauses=st.booleans(),
       seed=st.integers(0, 1000))
def test_chunks_cover_the_recording_within_their_length(frames, chunk, overlap, pauses, seed):
    overlap = min(overlap, chunk // 2 - 1) if chunk >= 4 else 0
    num_samples = frames * SPF - (seed % SPF)
    energies = np.random.default_rng(seed).uniform(-60, 0, frames) if pauses else None
    chunks = plan_chunks(num_samples, SPF, chunk, overlap, energies, min_frames=seed % 30)
    covered(chunks, -(-num_samples // SPF))
    assert all(c.end_frame - c.start_frame <= chunk for c in chunks)
    assert chunks[-1].end_sample == num_samples


def test_a_pause_is_cut_in_its_middle_without_overlap():
    energies = np.full(300, -20.0)  # speech, with pauses at frames 40-49 and 150-169
    energies[40:50] = -70.0
    energies[150:170] = -70.0
    chunks = plan_chunks(300 * SPF, SPF, 125, 25, energies, min_frames=25)
    # the middles of the pauses (41-48 and 151-168 once smoothed), then 140 frames of speech: two overlapping
    # chunks, cut at the quietest frame of the second half
    assert [(c.start_frame, c.end_frame) for c in chunks] == [(0, 45), (45, 160), (160, 234), (210, 300)]


def test_without_a_pause_chunks_overlap():
    chunks = plan_chunks(1000 * SPF, SPF, 125, 25, np.full(1000, -20.0) + np.sin(np.arange(1000)), min_frames=25)
    assert len(chunks) > 1
    assert all(after.start_frame < before.end_frame for before, after in zip(chunks, chunks[1:]))


def test_frame_energies():
    samples = np.concatenate([np.zeros(SPF, np.float32), np.ones(SPF // 2, np.float32)])
    energies = frame_energies_db(samples, SPF)
    assert energies.shape == (2,) and energies[0] < -90 and abs(energies[1] - 10 * np.log10(0.5)) < 1e-6


# tokens: 1 and 3 start words ("▁a", "▁c"), 2 and 4 continue them
WORD_START = np.array([False, True, False, True, False])


def test_a_word_cut_by_a_chunk_edge_appears_once_at_its_frames():
    # the recording's frames 0-19 and 10-29; a word (3 4) starts at frame 18 and is cut by the first chunk's end
    chunks = [Chunk(0, 20 * SPF, 0, 20), Chunk(10 * SPF, 30 * SPF, 10, 30)]
    left = ChunkTokens(tokens=[1, 2, 1, 3], frame_indices=[2, 4, 12, 18], confidence=[0.9, 0.8, 0.7, 0.2], score=-1)
    right = ChunkTokens(tokens=[1, 3, 4, 1], frame_indices=[2, 8, 10, 15], confidence=[0.7, 0.9, 0.9, 0.6], score=-2)
    merged = merge_tokens(chunks, [left, right], WORD_START)
    assert merged.tokens == [1, 2, 1, 3, 4, 1]
    assert merged.frame_indices == [2, 4, 12, 18, 20, 25]
    assert merged.confidence == [0.9, 0.8, 0.7, 0.9, 0.9, 0.6]  # the cut word's from the chunk that heard it whole
    assert merged.score == -3


def test_words_placed_on_either_side_of_the_middle_are_not_doubled_or_dropped():
    chunks = [Chunk(0, 20 * SPF, 0, 20), Chunk(10 * SPF, 30 * SPF, 10, 30)]  # overlap 10-19, middle 15
    left = ChunkTokens(tokens=[1, 3], frame_indices=[5, 14])  # "▁c" at 14: before the middle
    right = ChunkTokens(tokens=[3, 1], frame_indices=[6, 12])  # the same word at 16: after it
    assert merge_tokens(chunks, [left, right], WORD_START).tokens == [1, 3, 1]


def test_chunks_that_agree_on_no_word_are_cut_in_the_middle():
    chunks = [Chunk(0, 20 * SPF, 0, 20), Chunk(10 * SPF, 30 * SPF, 10, 30)]
    left = ChunkTokens(tokens=[1, 1, 3], frame_indices=[2, 12, 17], durations=[1, 1, 2])
    right = ChunkTokens(tokens=[3, 1, 1], frame_indices=[1, 8, 12], durations=[1, 1, 3])
    merged = merge_tokens(chunks, [left, right], WORD_START)
    assert merged.frame_indices == [2, 12, 18, 22] and merged.tokens == [1, 1, 1, 1]
    assert merged.durations == [1, 1, 1, 3]


def test_one_chunk_is_its_own_hypothesis():
    merged = merge_tokens([Chunk(0, 10 * SPF, 0, 10)], [ChunkTokens([1, 2], [0, 3])], WORD_START)
    assert merged.tokens == [1, 2] and merged.frame_indices == [0, 3] and merged.durations is None


def test_compact_ctc_frames_are_joined_in_the_middle_of_each_overlap():
    chunks = [Chunk(0, 20 * SPF, 0, 20), Chunk(10 * SPF, 30 * SPF, 10, 30), Chunk(20 * SPF, 35 * SPF, 20, 35)]
    compact = []
    for chunk in chunks:
        frames = np.arange(0, chunk.end_frame - chunk.start_frame, 2, dtype=np.int32)  # collapse kept every other
        compact.append((np.full((len(frames), 3), chunk.start_frame, np.float16), frames))
    values, frames = merge_compact_ctc(chunks, compact)
    assert list(frames) == sorted(set(frames.tolist()))  # increasing, none twice
    assert frames[0] == 0 and frames[-1] == 34
    assert set(values[frames < 15, 0]) == {0} and set(values[(frames >= 15) & (frames < 25), 0]) == {10}
    assert set(values[frames >= 25, 0]) == {20}


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="one hypothesis per chunk"):
        merge_tokens([Chunk(0, 1, 0, 1)], [], WORD_START)
    with pytest.raises(ValueError, match="overlap_frames"):
        plan_chunks(100, SPF, 10, 5)


def test_local_attention_is_refused_for_an_encoder_without_relative_positions():
    from pipeline.stages.chunks import check_attention

    check_attention("local", "rel_pos", "m.nemo")
    check_attention("full", None, "m.nemo")
    with pytest.raises(ValueError, match="m.nemo has abs_pos"):
        check_attention("local", "abs_pos", "m.nemo")
