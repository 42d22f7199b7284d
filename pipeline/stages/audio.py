"""The audio stage (`LoadAudio`, stage 2 of `pipeline/stages/__init__.py`): rows -> rows with their audio decoded at
the model's sample rate. It imports neither torch nor NeMo."""

from __future__ import annotations

import logging
import time

import numpy as np
import pyarrow as pa

from pipeline import schema
from pipeline.config import InputConfig, LongAudioConfig
from pipeline.io import AudioError, load_audio_batch
from pipeline.io.audio import AudioBytes
from pipeline.io.vad import SileroVad, VadUnavailable
from pipeline.schema import (
    AUDIO_BUSY_S,
    AUDIO_S,
    CHUNKED_READ,
    ENERGIES,
    INLINE_RANGES,
    READ_BUSY_S,
    SAMPLES,
    SEGMENT_TYPE,
    SPEECH_RANGES,
    SPEECH_SEGMENTS,
    SPEECH_SHARE,
)
from pipeline.stages.chunks import frame_energies_db
from pipeline.stages.rows import ENERGY_FRAMES_PER_S, lower_priority, mark_failed, ok_rows, set_column, share_busy_s
from pipeline.stages.segments import SegmentRules, plan_segments

# A row cut by voice activity passes on its speech's samples (concatenated) up to this many seconds of speech, so
# that it is fetched once (the ASR stage reads rows past it again by range): 30 minutes is 115 MB of float32 at
# 16 kHz, within one Ray object of a 16-row block, and past what one ASR call's window of short rows usually holds.
INLINE_SPEECH_S = 1800.0
# The samples passed on around each segment: the ASR stage starts a segment's chunk on a whole encoder frame at or
# before it and ends it on one at or after it, so it needs up to a frame (80 ms for 8x subsampling) beyond it.
INLINE_MARGIN_S = 0.16

log = logging.getLogger(__name__)


def segment_rules(long_audio: LongAudioConfig) -> SegmentRules:
    """The VAD segmentation rules of `long_audio` (a segment is at most `chunk_s` where that is shorter)."""
    max_segment_s = min(long_audio.max_speech_s, long_audio.chunk_s or long_audio.max_speech_s)
    return SegmentRules(threshold=long_audio.vad_threshold, min_speech_s=long_audio.min_speech_s,
                        min_silence_s=long_audio.min_silence_s, pad_s=long_audio.speech_pad_s,
                        max_segment_s=max_segment_s)


def inline_ranges(segments: list[tuple[int, int]], margin: int, num_samples: int) -> list[tuple[int, int]]:
    """The sample ranges a row passes on for its `segments`: each widened by `margin`, overlapping ones joined."""
    ranges: list[tuple[int, int]] = []
    for start, end in segments:
        start, end = max(0, start - margin), min(num_samples, end + margin)
        if ranges and start <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
        else:
            ranges.append((start, end))
    return ranges


class LoadAudio:
    """CPU stage: rows -> rows with `samples` (float32 at `sample_rate`), `audio_s`, the measured
    `audio_duration` (what was decoded: the segment the manifest's offset and duration select) and `file_duration`
    (the whole file's length, where its header or the decode tells it); a row whose audio cannot be used, or is
    past a bound of `limits`, becomes an error row.

    A row longer than `long_audio.chunk_s` is read here once, whole (which checks it and measures it), and cut as
    `long_audio.segment` says. By voice activity (`vad`, the default): the long rows of a call go through Silero VAD
    in one batch (`pipeline/io/vad.py`, `vad_threads` onnxruntime threads, no torch), their probabilities become
    speech segments (`pipeline/stages/segments.py`: `speech_ranges`, and the output's `speech_segments` and
    `speech_share`), and only the speech's samples go on (`samples` with `inline_ranges`: each segment and
    `INLINE_MARGIN_S` around it), so the row is fetched once; past `INLINE_SPEECH_S` of speech the ASR stage reads
    the segments again by range (`chunked_read`). At pauses (`pauses`) or blindly (`none`) the row leaves without its
    samples, with its pauses (`energies`, the energy of each 10 ms) for `pauses`, and the ASR stage reads it again
    chunk by chunk as its buckets need them (`chunked_read`), so an hour of audio never crosses Ray's object store.
    The audio actor holds one whole recording while it measures it (230 MB an hour at 16 kHz).
    """

    CPUS = 0.25  # fetch + decode + resample: mostly I/O and libsndfile/soxr
    BATCH_ROWS = 16  # rows per call, and per table `ReadManifests` yields (`graph.read_rows`)

    def __init__(self, sample_rate: int, limits: InputConfig | None = None,
                 long_audio: LongAudioConfig | None = None, nice_steps: int = 0, vad_threads: int = 1) -> None:
        lower_priority(nice_steps)
        self.sample_rate, self.limits = sample_rate, limits or InputConfig()
        self.long_audio = long_audio or LongAudioConfig()
        self.segment = self.long_audio.segment  # "auto" becomes "vad" or "pauses" once the VAD is tried
        self.rules = segment_rules(self.long_audio) if self.segment in ("vad", "auto") else None
        self.vad_threads = vad_threads
        self._vad: SileroVad | None = None
        self._vad_error: str | None = None

    def _load_vad(self) -> SileroVad | None:
        """The VAD, loaded on the first long row; None where it cannot load (`auto`: said once, pauses instead)."""
        if self._vad is None and self._vad_error is None and self.segment in ("vad", "auto"):
            try:
                self._vad = SileroVad(threads=self.vad_threads)
            except VadUnavailable as error:
                self._vad_error = str(error)
                if self.segment == "auto":  # the driver's preflight said it (pipeline/io/vad.py::vad_problem)
                    log.info("loopscribe: --segment auto: the VAD cannot load (%s); long rows are cut at pauses",
                             error)
                    self.segment = "pauses"
        return self._vad

    def __call__(self, table: pa.Table, in_memory: list[AudioBytes | None] | None = None) -> pa.Table:
        """`in_memory` (the shard stage, `pipeline/stages/shards.py`): per row, its audio's bytes already read, or
        None to fetch it; such a row keeps its samples inline whatever its length (nothing can read it again)."""
        started = time.perf_counter()
        read_busy_s = table.column(READ_BUSY_S) if READ_BUSY_S in table.column_names else None
        table = table.select(list(schema.INPUT_COLUMNS))
        table = table.cast(schema.INPUT_SCHEMA) if table.schema != schema.INPUT_SCHEMA else table
        if read_busy_s is not None:
            table = table.append_column(READ_BUSY_S, read_busy_s)
        samples: list[np.ndarray] = [np.zeros(0, np.float32)] * table.num_rows
        measured: list[float | None] = [None] * table.num_rows
        file_durations: list[float | None] = [None] * table.num_rows
        chunked = [False] * table.num_rows
        energies: list[np.ndarray | None] = [None] * table.num_rows
        failed: dict[int, str] = {}
        uris = table.column(schema.AUDIO_FILEPATH).to_pylist()
        offsets, durations = table.column(schema.OFFSET).to_pylist(), table.column(schema.DURATION).to_pylist()
        channels = table.column(schema.CHANNEL).to_pylist()
        speech: list[list[tuple[int, int]] | None] = [None] * table.num_rows
        inline: list[list[tuple[int, int]] | None] = [None] * table.num_rows
        chunk_s = self.long_audio.chunk_s
        ok = ok_rows(table)
        loaded = load_audio_batch([uris[i] if in_memory is None or in_memory[i] is None else in_memory[i] for i in ok],
                                  self.sample_rate, [offsets[i] for i in ok],
                                  [durations[i] for i in ok], [channels[i] for i in ok], self.limits)
        long_rows: dict[int, np.ndarray] = {}
        for index, audio in zip(ok, loaded):
            if isinstance(audio, AudioError):
                failed[index] = str(audio)
                continue
            measured[index], file_durations[index] = audio.duration_s, audio.file_duration_s
            # a row already in memory is cut by voice activity too (its speech goes on inline), never read again
            if chunk_s and audio.duration_s > chunk_s and (
                    in_memory is None or in_memory[index] is None or self.segment in ("vad", "auto")):
                long_rows[index] = audio.samples
            else:
                samples[index] = audio.samples
        vad = self._load_vad() if long_rows else None
        if long_rows and vad is None and self.segment == "vad":
            failed.update((index, f"{uris[index]}: --segment vad: {self._vad_error}") for index in long_rows)
            long_rows = {}
        probabilities: list[np.ndarray] = []
        if vad is not None:  # every long row of the call in one batch of VAD streams
            try:
                probabilities = vad(list(long_rows.values()), self.sample_rate)
            except Exception as error:  # onnxruntime's own failures: the rows fail, not the actor
                failed.update((index, f"{uris[index]}: the VAD failed ({type(error).__name__}: {error})")
                              for index in long_rows)
                long_rows = {}
            margin = round(INLINE_MARGIN_S * self.sample_rate)
            for (index, audio_samples), row_probabilities in zip(long_rows.items(), probabilities):
                speech[index] = plan_segments(row_probabilities, self.rules, len(audio_samples), self.sample_rate)
                if in_memory is not None and in_memory[index] is not None and sum(
                        end - start for start, end in speech[index]) > INLINE_SPEECH_S * self.sample_rate:
                    samples[index], speech[index] = audio_samples, None  # cannot be read again: whole, at pauses
                elif sum(end - start for start, end in speech[index]) <= INLINE_SPEECH_S * self.sample_rate:
                    inline[index] = inline_ranges(speech[index], margin, len(audio_samples))
                    samples[index] = np.concatenate([audio_samples[start: end] for start, end in inline[index]]
                                                    or [np.zeros(0, np.float32)])
                else:  # the ASR stage reads its segments again by range
                    chunked[index] = True
        else:
            for index, audio_samples in long_rows.items():  # the ASR stage reads it again, a chunk at a time
                if in_memory is not None and in_memory[index] is not None:  # nothing to read again: inline
                    samples[index] = audio_samples
                    continue
                chunked[index] = True
                if self.segment != "none":
                    energies[index] = frame_energies_db(audio_samples, self.sample_rate // ENERGY_FRAMES_PER_S)
        table = mark_failed(table, failed)
        for index in failed:
            samples[index], measured[index], chunked[index] = np.zeros(0, np.float32), None, False
            speech[index] = inline[index] = None
        table = set_column(table, schema.AUDIO_DURATION, pa.array(measured, pa.float64()))
        table = set_column(table, schema.FILE_DURATION, pa.array(file_durations, pa.float64()))
        table = set_column(table, AUDIO_S, pa.array([measured[i] if chunked[i] or speech[i] is not None
                                                     else len(s) / self.sample_rate
                                                     for i, s in enumerate(samples)], pa.float64()))
        rate = self.sample_rate
        table = set_column(table, SPEECH_RANGES, pa.array([None if r is None else [v for pair in r for v in pair]
                                                           for r in speech], pa.list_(pa.int64())))
        table = set_column(table, INLINE_RANGES, pa.array([None if r is None else [v for pair in r for v in pair]
                                                           for r in inline], pa.list_(pa.int64())))
        table = set_column(table, SPEECH_SEGMENTS, pa.array(
            [None if r is None else [{"start": start / rate, "end": end / rate} for start, end in r] for r in speech],
            pa.list_(SEGMENT_TYPE)))
        table = set_column(table, SPEECH_SHARE, pa.array(
            [None if r is None else min(1.0, sum(end - start for start, end in r) / rate / measured[i])
             if measured[i] else 0.0 for i, r in enumerate(speech)], pa.float64()))
        table = set_column(table, CHUNKED_READ, pa.array(chunked, pa.bool_()))
        table = set_column(table, ENERGIES, pa.array([e if chunked[i] else None for i, e in enumerate(energies)],
                                               type=pa.list_(pa.float32())))
        table = set_column(table, SAMPLES, pa.array(samples, type=pa.large_list(pa.float32())))
        return share_busy_s(table, AUDIO_BUSY_S, time.perf_counter() - started)
