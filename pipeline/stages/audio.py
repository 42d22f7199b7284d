"""The audio stage (`LoadAudio`, stage 2 of `pipeline/stages/__init__.py`): rows -> rows with their audio decoded at
the model's sample rate. It imports neither torch nor NeMo."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from pipeline import schema
from pipeline.config import InputConfig, LongAudioConfig
from pipeline.io import AudioError, load_audio_batch
from pipeline.schema import AUDIO_BUSY_S, AUDIO_S, CHUNKED_READ, ENERGIES, READ_BUSY_S, SAMPLES
from pipeline.stages.chunks import frame_energies_db
from pipeline.stages.rows import ENERGY_FRAMES_PER_S, lower_priority, mark_failed, ok_rows, set_column, share_busy_s


class LoadAudio:
    """CPU stage: rows -> rows with `samples` (float32 at `sample_rate`), `audio_s`, the measured
    `audio_duration` (what was decoded: the segment the manifest's offset and duration select) and `file_duration`
    (the whole file's length, where its header or the decode tells it); a row whose audio cannot be used, or is
    past a bound of `limits`, becomes an error row.

    A row longer than `long_audio.chunk_s` leaves without its samples: it is read here once, whole (which checks
    it and measures it), to find its pauses (`energies`, the energy of each 10 ms), and the ASR stage reads it
    again chunk by chunk as its buckets need them (`chunked_read`), so an hour of audio never crosses Ray's
    object store and the ASR actor's memory does not grow with the recording's length. The audio actor holds
    one whole recording while it measures it (230 MB an hour at 16 kHz).
    """

    CPUS = 0.25  # fetch + decode + resample: mostly I/O and libsndfile/soxr
    BATCH_ROWS = 16  # rows per call, and per table `ReadManifests` yields (`graph.read_rows`)

    def __init__(self, sample_rate: int, limits: InputConfig | None = None,
                 long_audio: LongAudioConfig | None = None, nice_steps: int = 0) -> None:
        lower_priority(nice_steps)
        self.sample_rate, self.limits = sample_rate, limits or InputConfig()
        self.long_audio = long_audio or LongAudioConfig()

    def __call__(self, table: pa.Table) -> pa.Table:
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
        chunk_s = self.long_audio.chunk_s
        ok = ok_rows(table)
        loaded = load_audio_batch([uris[i] for i in ok], self.sample_rate, [offsets[i] for i in ok],
                                  [durations[i] for i in ok], [channels[i] for i in ok], self.limits)
        for index, audio in zip(ok, loaded):
            if isinstance(audio, AudioError):
                failed[index] = str(audio)
                continue
            measured[index], file_durations[index] = audio.duration_s, audio.file_duration_s
            if chunk_s and audio.duration_s > chunk_s:  # the ASR stage reads it again, a chunk at a time
                chunked[index] = True
                energies[index] = frame_energies_db(audio.samples, self.sample_rate // ENERGY_FRAMES_PER_S)
            else:
                samples[index] = audio.samples
        table = mark_failed(table, failed)
        for index in failed:
            samples[index], measured[index], chunked[index] = np.zeros(0, np.float32), None, False
        table = set_column(table, schema.AUDIO_DURATION, pa.array(measured, pa.float64()))
        table = set_column(table, schema.FILE_DURATION, pa.array(file_durations, pa.float64()))
        table = set_column(table, AUDIO_S, pa.array([measured[i] if chunked[i] else len(s) / self.sample_rate
                                               for i, s in enumerate(samples)], pa.float64()))
        table = set_column(table, CHUNKED_READ, pa.array(chunked, pa.bool_()))
        table = set_column(table, ENERGIES, pa.array([e if chunked[i] else None for i, e in enumerate(energies)],
                                               type=pa.list_(pa.float32())))
        table = set_column(table, SAMPLES, pa.array(samples, type=pa.large_list(pa.float32())))
        return share_busy_s(table, AUDIO_BUSY_S, time.perf_counter() - started)
