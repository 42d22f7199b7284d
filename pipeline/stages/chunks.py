"""Long recordings: cut into overlapping chunks that decode like short utterances, and merged back into one row.

A recording longer than `LongAudioConfig.chunk_s` is cut into chunks of at most `chunk_s` seconds
(`plan_chunks`): at pauses where it has them, so that each chunk holds about one utterance or phrase (small models
trained on single utterances decode several joined ones much worse: docs/long_audio.md), and with `overlap_s` of
overlap where no pause comes. Every chunk starts on a whole encoder frame of the recording (a multiple of
`samples_per_frame`, the preprocessor's hop times the encoder's subsampling), so a chunk's frame t is the
recording's frame `chunk.start_frame + t` exactly: word times are whole frames from the recording's start, and no
rounding is ever summed across chunks (the drift NeMo's chunked inference has, NeMo #16072). Cut at pauses, nothing
is dropped: chunks cover every frame, pauses included. Cut by voice activity (`long_audio.segment = "vad"`, the
default), each speech segment (`pipeline/stages/segments.py`) is a chunk on whole frames (`segment_chunks`), and the
frames between them are never decoded (a mistuned VAD loses speech, WhisperX #828, #931: its threshold, padding and
minimum silence are settings).

The chunks join the ASR stage's length buckets beside short utterances; afterwards the chunks of a recording are
merged into one hypothesis:

- Tokens (every strategy decoded in the ASR stage; `merge_tokens`): chunks that meet in a pause, or that a gap of
  non-speech separates, are simply joined. Overlapping neighbours are joined at a word both decoded in their
  overlap, at the same frames within `ALIGN_FRAMES`, the one nearest the middle of the overlap: the left chunk keeps
  its words before it and the right chunk gives it and the words after. Where the two agree on no word there, the
  cut is the middle of the overlap, at word starts on both sides. So a word cut in two by a chunk's edge comes from
  the chunk that heard it whole, once, at its own frames; a plain middle cut would double or drop a word whose start
  the two chunks place on either side of the middle (tests/pipeline/stages/test_chunks.py).
- CTC log-probs for the writer's search (`ctc_beam`; `merge_compact_ctc`): per frame, so the chunks' frames are
  joined at the middle of each overlap and the beam search runs once over the whole recording, with its LM
  context unbroken; between speech segments the frames that were not decoded are simply not there.

Dims: U tokens, T' frames after blank collapse, V labels with blank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALIGN_FRAMES = 2  # a word both chunks decoded is the same word where its starts differ by at most this many frames


LOCAL_ATTENTION_FROM = ("rel_pos", "rel_pos_local_attn")  # encoders NeMo can switch to local attention


def check_attention(attention: str, encoder_attention: str | None, model_name: str) -> None:
    """Refuse (`ValueError`) local attention for a model whose encoder cannot have it, before any actor loads it."""
    if attention == "local" and encoder_attention not in LOCAL_ATTENTION_FROM:
        raise ValueError(f"--attention local needs a Conformer encoder with relative positions "
                         f"(self_attention_model rel_pos); {model_name} has {encoder_attention or 'another encoder'}: "
                         "use --attention full (long recordings are cut into chunks all the same)")


@dataclass(frozen=True)
class Chunk:
    """One chunk of a recording, in samples and in the recording's encoder frames."""

    start_sample: int
    end_sample: int
    start_frame: int  # the recording's encoder frame of the chunk's frame 0
    end_frame: int  # exclusive; the frame after the chunk's last (where the next chunk's audio continues)


QUIET_DB = 10.0  # a pause: this close to the noise floor (5th percentile of frame energy), this far below speech (95th)
SMOOTH_FRAMES = 3  # frame energies are averaged over this many frames before looking for pauses


def frame_energies_db(samples: np.ndarray, samples_per_frame: int) -> np.ndarray:
    """Mean square of each encoder frame's samples, in dB: [ceil(S / samples_per_frame)]."""
    frames = -(-len(samples) // samples_per_frame)
    padded = np.zeros(frames * samples_per_frame, np.float32)
    padded[: len(samples)] = samples
    power = np.mean(np.square(padded.reshape(frames, samples_per_frame), dtype=np.float64), axis=1)
    return 10 * np.log10(power + 1e-10)


def plan_chunks(num_samples: int, samples_per_frame: int, chunk_frames: int, overlap_frames: int,
                energies_db: np.ndarray | None = None, min_frames: int = 1) -> list[Chunk]:
    """Chunks of at most `chunk_frames` frames covering the recording, none dropped.

    With the frames' energies, a chunk ends in the first pause at least `min_frames` after its start (the
    middle of a run of frames whose energy, averaged over `SMOOTH_FRAMES`, is within `QUIET_DB` of the
    recording's noise floor and at least that far below its speech), and the next chunk starts exactly there,
    with no overlap: no word crosses a pause. So chunks are about one utterance or phrase each, as the models
    were trained on. Where no pause comes
    within `chunk_frames`, the chunk ends at the quietest frame of the second half of its length and the two
    chunks overlap by `overlap_frames` around it. Without energies, chunks of `chunk_frames` start every
    `chunk_frames - overlap_frames` frames, the last ending with the recording.
    """
    if samples_per_frame < 1 or chunk_frames < 2 or not 0 <= overlap_frames < chunk_frames // 2:
        raise ValueError(f"chunks need samples_per_frame >= 1 and 0 <= overlap_frames < chunk_frames / 2, got "
                         f"{samples_per_frame}, {overlap_frames}, {chunk_frames}")
    total = -(-num_samples // samples_per_frame)
    min_frames = max(1, min(min_frames, chunk_frames // 2))
    spans: list[tuple[int, int]] = []
    start = 0
    if energies_db is None:
        while start + chunk_frames < total:
            spans.append((start, start + chunk_frames))
            start = min(start + chunk_frames - overlap_frames, total - chunk_frames)
    else:
        energies = np.asarray(energies_db, dtype=np.float64)[:total]
        smooth = np.convolve(energies, np.ones(SMOOTH_FRAMES) / SMOOTH_FRAMES, mode="same")
        # a pause is near the noise floor and well below speech: a recording of one level has none
        floor, loud = np.percentile(energies, [5, 95])
        quiet = smooth <= min(floor + QUIET_DB, loud - QUIET_DB)
        while total - start > 2 * min_frames:
            high = min(start + chunk_frames - overlap_frames // 2, total - min_frames)
            pauses = np.flatnonzero(quiet[start + min_frames: high]) + start + min_frames
            if len(pauses):
                end = pauses[0]
                while end + 1 < total and quiet[end + 1]:
                    end += 1
                cut = min((int(pauses[0]) + int(end) + 1) // 2, start + chunk_frames)
                spans.append((start, cut))
                start = cut
                continue
            if total - start <= chunk_frames:
                break
            low = start + chunk_frames // 2
            cut = low + int(np.argmin(smooth[low:high]))
            spans.append((start, cut + overlap_frames // 2))
            start = cut - overlap_frames // 2
    spans.append((start, total))
    return [Chunk(first * samples_per_frame, min(end * samples_per_frame, num_samples), first, end)
            for first, end in spans]


def segment_chunks(segments: Sequence[tuple[int, int]], num_samples: int, samples_per_frame: int) -> list[Chunk]:
    """Speech segments ([start, end) samples of the recording, in order) -> their chunks on whole encoder frames: the
    start rounded down and the end up to a frame (clipped to `num_samples`), so that a chunk's frame t is the
    recording's frame `start_frame + t`; a chunk that would overlap the one before starts where it ends. The audio
    between chunks is never decoded: merged, the chunks' frames simply skip it (`merge_tokens`)."""
    if samples_per_frame < 1:
        raise ValueError(f"samples_per_frame must be >= 1, got {samples_per_frame}")
    chunks: list[Chunk] = []
    for start, end in segments:
        first, last = start // samples_per_frame, -(-min(end, num_samples) // samples_per_frame)
        if chunks and first < chunks[-1].end_frame:
            first = chunks[-1].end_frame
        if last > first:
            chunks.append(Chunk(first * samples_per_frame, min(last * samples_per_frame, num_samples), first, last))
    return chunks


@dataclass(frozen=True)
class ChunkTokens:
    """One chunk's hypothesis, at the chunk's own frames."""

    tokens: Sequence[int]
    frame_indices: Sequence[int]
    durations: Sequence[int] | None = None  # TDT
    confidence: Sequence[float] | None = None
    score: float = 0.0


@dataclass(frozen=True)
class MergedTokens:
    """A recording's hypothesis, at the recording's frames."""

    tokens: list[int]
    frame_indices: list[int]
    durations: list[int] | None
    confidence: list[float] | None
    score: float


def merge_tokens(chunks: Sequence[Chunk], hypotheses: Sequence[ChunkTokens], word_start: np.ndarray) -> MergedTokens:
    """The chunks' hypotheses (in order) -> the recording's, joined as the module docstring says; `word_start[v]`
    says whether token v begins a word (a SentencePiece piece starting with "▁")."""
    if len(chunks) != len(hypotheses) or not chunks:
        raise ValueError(f"need one hypothesis per chunk, got {len(hypotheses)} for {len(chunks)} chunks")
    frames = [np.asarray(h.frame_indices, dtype=np.int64) + c.start_frame for c, h in zip(chunks, hypotheses)]
    tokens = [np.asarray(h.tokens, dtype=np.int64) for h in hypotheses]
    begin = [0] * len(chunks)
    end = [len(t) for t in tokens]
    for k in range(len(chunks) - 1):
        end[k], begin[k + 1] = _join(tokens[k], frames[k], tokens[k + 1], frames[k + 1],
                                     chunks[k + 1].start_frame, chunks[k].end_frame, word_start)
    kept = [slice(begin[k], max(begin[k], end[k])) for k in range(len(chunks))]
    has_durations = all(h.durations is not None for h in hypotheses)
    has_confidence = all(h.confidence is not None for h in hypotheses)
    return MergedTokens(
        tokens=[int(v) for k, s in enumerate(kept) for v in tokens[k][s]],
        frame_indices=[int(f) for k, s in enumerate(kept) for f in frames[k][s]],
        durations=[int(d) for h, s in zip(hypotheses, kept) for d in list(h.durations)[s]] if has_durations else None,
        confidence=[float(c) for h, s in zip(hypotheses, kept) for c in list(h.confidence)[s]]
        if has_confidence else None,
        score=float(sum(h.score for h in hypotheses)))


def _words(tokens: np.ndarray, frames: np.ndarray, word_start: np.ndarray, low: int, high: int
           ) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """Words starting at frames in [low, high): (index of the first token, its frame, index after the word,
    token ids)."""
    starts = [i for i in range(len(tokens)) if i == 0 or word_start[tokens[i]]]
    words = []
    for n, i in enumerate(starts):
        after = starts[n + 1] if n + 1 < len(starts) else len(tokens)
        if low <= frames[i] < high and word_start[tokens[i]]:
            words.append((i, int(frames[i]), after, tuple(int(v) for v in tokens[i:after])))
    return words


def _join(left_tokens: np.ndarray, left_frames: np.ndarray, right_tokens: np.ndarray, right_frames: np.ndarray,
          overlap_start: int, overlap_end: int, word_start: np.ndarray) -> tuple[int, int]:
    """Where the left chunk's tokens end and the right chunk's begin: at the word both decoded in the overlap
    nearest its middle, else at the middle (module docstring)."""
    middle = (overlap_start + overlap_end) / 2
    left_words = _words(left_tokens, left_frames, word_start, overlap_start, overlap_end)
    right_words = _words(right_tokens, right_frames, word_start, overlap_start, overlap_end)
    best: tuple[float, int, int] | None = None
    for left_index, left_frame, _, left_ids in left_words:
        for right_index, right_frame, _, right_ids in right_words:
            if left_ids == right_ids and abs(left_frame - right_frame) <= ALIGN_FRAMES:
                distance = abs((left_frame + right_frame) / 2 - middle)
                if best is None or distance < best[0]:
                    best = (distance, left_index, right_index)
    if best is not None:
        return best[1], best[2]
    cut = int(np.ceil(middle))
    return _first_word_at_or_after(left_tokens, left_frames, word_start, cut), \
        _first_word_at_or_after(right_tokens, right_frames, word_start, cut)


def _first_word_at_or_after(tokens: np.ndarray, frames: np.ndarray, word_start: np.ndarray, frame: int) -> int:
    for i in range(len(tokens)):
        if frames[i] >= frame and (i == 0 or word_start[tokens[i]]):
            return i
    return len(tokens)


def merge_compact_ctc(chunks: Sequence[Chunk], compact: Sequence[tuple[np.ndarray, np.ndarray]]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' compact CTC log-probs ([T', V], [T'] chunk frames) -> the recording's, each chunk giving the
    frames from the middle of its overlap with the one before to the middle of its overlap with the next."""
    if len(chunks) != len(compact) or not chunks:
        raise ValueError(f"need one set of log-probs per chunk, got {len(compact)} for {len(chunks)} chunks")
    values, frames = [], []
    for k, (chunk, (log_probs, chunk_frames)) in enumerate(zip(chunks, compact)):
        recording_frames = np.asarray(chunk_frames, dtype=np.int64) + chunk.start_frame
        low = (chunks[k - 1].end_frame + chunk.start_frame + 1) // 2 if k > 0 else 0
        high = (chunk.end_frame + chunks[k + 1].start_frame + 1) // 2 if k + 1 < len(chunks) else chunk.end_frame
        keep = (recording_frames >= low) & (recording_frames < high)
        values.append(np.asarray(log_probs)[keep])
        frames.append(recording_frames[keep])
    return np.concatenate(values), np.concatenate(frames).astype(np.int32)
