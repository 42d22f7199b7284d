"""The transcription job's stages: small callable classes that know nothing about Ray.

`pipeline/graph.py` wires them with Ray Data; a test builds one with a model and calls it with a
`pyarrow.Table`, no cluster needed. Rows flow through every stage whatever happens to them: a row that fails
(unreadable manifest line, missing or corrupt audio, a decoding error) gets `status = error` and an `error`
naming the manifest, line and cause, and is written like any other row. Nothing raises per row.

1. `ReadManifests` (CPU, here): manifest URIs -> one row per line, minus the rows an earlier run already committed.
2. `LoadAudio` (CPU, here): fetch, decode, mix down, slice and resample each row's audio -> `samples`.
3. `TranscribeBatch` (GPU, or CPU with fractional CPUs; `pipeline/stages/asr.py`): a window of rows -> length
   buckets -> encoder and decoding -> token ids with frames (or, where the plan has the writer search, compact
   blank-collapsed CTC log-probs).
4. `FinishAndWrite` (CPU; `pipeline/stages/write.py`): the writer's search where the plan has one (CTC beam
   search), detokenization and word timestamps, then one atomic Parquet part per batch (`pipeline/io/sink.py`) ->
   one summary row per part, which the driver counts.

Each stage is a module of its own so that a Ray worker imports only what its stage needs: the reading stages
here import neither torch nor NeMo (a CPU actor starts in a fraction of the time, beside an ASR actor that is
importing NeMo, and holds a few hundred MB less), the writer imports torch but not NeMo, and only the ASR stage
loads the model. This module also holds what they share: marking rows failed, setting columns, and the
run's summary from the parts' summary rows, and `lower_priority`, which the audio and writer actors call so that
the ASR actor gets the CPU first where they share a node's busy cores.

Both decoding stages get the job's `DecodingPlan` (`pipeline/decoding/plan.py`), made once by the driver, and read
every decoding decision from it. Column names come from `pipeline/schema.py`.

The mel preprocessor runs in stage 3 with the encoder, as NeMo runs it: on a GPU it costs a few percent of the
encoder, and it belongs to the checkpoint (its config and window), which only stage 3 loads. Audio fetching,
decoding and resampling, detokenization and CTC beam search run in CPU stages, so GPU actors never wait on them.

Dims: B batch, S samples, T encoder frames, T' frames after blank collapse, V labels with blank.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import schema
from pipeline.io.audio import AudioError, load_audio_batch
from pipeline.stages.chunks import frame_energies_db
from pipeline.config import InputConfig, LongAudioConfig
from pipeline.io.manifest import read_manifest
from pipeline.schema import (
    AUDIO_S,
    CHUNKED_READ,
    COMMITTED_AT,
    ENERGIES,
    PADDED_S,
    PART,
    ROWS,
    ROWS_ERROR,
    ROWS_OK,
    SAMPLES,
)
from pipeline.io.sink import IdSet

ENERGY_FRAMES_PER_S = 100  # LoadAudio measures the energy of long recordings per 10 ms


def mark_failed(table: pa.Table, failed: dict[int, str]) -> pa.Table:
    """Mark rows (index -> message naming the manifest and line) as errors."""
    if not failed:
        return table
    status = table.column(schema.STATUS).to_pylist()
    error = table.column(schema.ERROR).to_pylist()
    manifests, lines = table.column(schema.MANIFEST).to_pylist(), table.column(schema.LINE).to_pylist()
    for index, message in failed.items():
        status[index] = schema.STATUS_ERROR
        error[index] = f"{manifests[index]}, line {lines[index]}: {message}"
    table = table.set_column(table.schema.get_field_index(schema.STATUS), schema.STATUS, pa.array(status, pa.string()))
    return table.set_column(table.schema.get_field_index(schema.ERROR), schema.ERROR, pa.array(error, pa.string()))


def set_column(table: pa.Table, name: str, values: pa.Array | list) -> pa.Table:
    values = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    index = table.schema.get_field_index(name)
    return table.set_column(index, name, values) if index >= 0 else table.append_column(name, values)


def ok_rows(table: pa.Table) -> list[int]:
    return [i for i, s in enumerate(table.column(schema.STATUS).to_pylist()) if s == schema.STATUS_OK]


def lower_priority(steps: int) -> None:
    """Run this actor `steps` steps of niceness lower than now, at most 19 (`resources.side_stage_nice`).

    For the audio and writer actors: on a node whose cores are all busy (at start-up, when every actor is
    importing at once, and on a CPU-only node for the whole job) the ASR actor then runs first, and it is the
    stage that sets the job's pace; with cores to spare it changes nothing. Steps, not a level: Ray starts its
    workers at a niceness of its own (15 by default, `RAY_worker_niceness`), which the ASR actor keeps and which
    no actor may undo without privileges. Linux keeps a niceness per thread: this sets the calling thread's, which
    the threads it starts later inherit, among them the one Ray runs the actor's calls on
    (tests/pipeline/test_graph_ray.py checks that thread). A Ray actor's process ends with the actor, so no later
    task inherits it.
    """
    if steps > 0:
        os.nice(steps)


class ReadManifests:
    """CPU stage: manifest URIs -> their rows (error rows included) not yet committed, as tables of `chunk_rows`.

    Called as a function (Ray tasks), with the committed ids read once by the driver (`sink.committed_ids`),
    looked up `LOOKUP_ROWS` lines at a time. The rows leave in small tables, but Ray Data merges what a task
    yields into large blocks; `graph.read_rows` splits them again.
    """

    LOOKUP_ROWS = 1024  # manifest lines whose ids are looked up among the committed ones at once

    def __init__(self, committed: IdSet, chunk_rows: int = 16) -> None:
        self.committed = committed
        self.chunk_rows = chunk_rows

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        for uri in batch.column(schema.MANIFEST).to_pylist():
            rows: list[dict[str, Any]] = []
            lines = read_manifest(uri)
            while entries := list(itertools.islice(lines, self.LOOKUP_ROWS)):
                done = self.committed.contains([entry[schema.UTTERANCE_ID] for entry in entries])
                for entry, committed in zip(entries, done):
                    if committed:
                        continue
                    rows.append(entry)
                    if len(rows) == self.chunk_rows:
                        yield pa.Table.from_pylist(rows, schema=schema.INPUT_SCHEMA)
                        rows = []
            if rows:
                yield pa.Table.from_pylist(rows, schema=schema.INPUT_SCHEMA)


class LoadAudio:
    """CPU stage: rows -> rows with `samples` (float32 at `sample_rate`), `audio_s` and the measured
    `audio_duration`; a row whose audio cannot be used, or is past a bound of `limits`, becomes an error row.

    A row longer than `long_audio.chunk_s` leaves without its samples: it is read here once, whole (which checks
    it and measures it), to find its pauses (`energies`, the energy of each 10 ms), and the ASR stage reads it
    again chunk by chunk as its buckets need them (`chunked_read`), so an hour of audio never crosses Ray's
    object store and the ASR actor's memory does not grow with the recording's length. The audio actor holds
    one whole recording while it measures it (230 MB an hour at 16 kHz).
    """

    def __init__(self, sample_rate: int, limits: InputConfig | None = None,
                 long_audio: LongAudioConfig | None = None, nice_steps: int = 0) -> None:
        lower_priority(nice_steps)
        self.sample_rate, self.limits = sample_rate, limits or InputConfig()
        self.long_audio = long_audio or LongAudioConfig()

    def __call__(self, table: pa.Table) -> pa.Table:
        table = table.cast(schema.INPUT_SCHEMA) if table.schema != schema.INPUT_SCHEMA else table
        samples: list[np.ndarray] = [np.zeros(0, np.float32)] * table.num_rows
        measured: list[float | None] = [None] * table.num_rows
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
            measured[index] = audio.duration_s
            if chunk_s and audio.duration_s > chunk_s:  # the ASR stage reads it again, a chunk at a time
                chunked[index] = True
                energies[index] = frame_energies_db(audio.samples, self.sample_rate // ENERGY_FRAMES_PER_S)
            else:
                samples[index] = audio.samples
        table = mark_failed(table, failed)
        for index in failed:
            samples[index], measured[index], chunked[index] = np.zeros(0, np.float32), None, False
        table = set_column(table, schema.AUDIO_DURATION, pa.array(measured, pa.float64()))
        table = set_column(table, AUDIO_S, pa.array([measured[i] if chunked[i] else len(s) / self.sample_rate
                                               for i, s in enumerate(samples)], pa.float64()))
        table = set_column(table, CHUNKED_READ, pa.array(chunked, pa.bool_()))
        table = set_column(table, ENERGIES, pa.array([e if chunked[i] else None for i, e in enumerate(energies)],
                                               type=pa.list_(pa.float32())))
        return set_column(table, SAMPLES, pa.array(samples, type=pa.large_list(pa.float32())))


def summarize(parts: list[dict[str, Any]], started_at: float) -> dict[str, Any]:
    """Summary rows of this run's parts, and the Unix time the run started -> the run's figures."""
    wall_s = time.time() - started_at
    audio_s = sum(p[AUDIO_S] for p in parts)
    padded_s = sum(p[PADDED_S] for p in parts)
    first_commit = min((p[COMMITTED_AT] for p in parts), default=None)
    return {
        "rows": sum(p[ROWS] for p in parts),
        "rows_ok": sum(p[ROWS_OK] for p in parts),
        "rows_error": sum(p[ROWS_ERROR] for p in parts),
        "parts": len([p for p in parts if p[PART]]),
        "audio_hours": audio_s / 3600,
        "wall_s": wall_s,
        "rtfx": audio_s / wall_s if wall_s > 0 else None,
        "padding_efficiency": audio_s / padded_s if padded_s > 0 else None,
        # starting Ray's actors and loading models: on a short job most of the wall time
        "first_part_s": first_commit - started_at if first_commit is not None else None,
    }
