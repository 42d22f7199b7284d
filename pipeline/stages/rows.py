"""What the stages share (`pipeline/stages/__init__.py` describes them): marking rows failed, setting columns, the
rows still ok, `lower_priority`, which the audio and writer actors call so that the ASR actor gets the CPU first
where they share a node's busy cores, each stage's busy seconds shared among its rows (`share_busy_s`), and the run's
summary from the parts' summary rows (`RunTotals`, `summarize`)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import schema
from pipeline.schema import AUDIO_S, BUSY_S_BY_STAGE, COMMITTED_AT, PADDED_S, PART, ROWS, ROWS_ERROR, ROWS_OK

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


def share_busy_s(table: pa.Table, name: str, busy_s: float) -> pa.Table:
    """`table` with column `name` (one of `schema.BUSY_S_BY_STAGE`) set to `busy_s`, the seconds a stage spent on
    the call, shared equally among its rows: whatever batches later stages make of them, the rows of a part add up
    to the time spent on them."""
    if not table.num_rows:
        return table
    return set_column(table, name, pa.array(np.full(table.num_rows, busy_s / table.num_rows), pa.float64()))


def busy_s_of(table: pa.Table, name: str) -> float:
    """The busy seconds `share_busy_s` gave the rows of `table` in column `name`; 0 where no stage set it."""
    if name not in table.column_names or not table.num_rows:
        return 0.0
    return float(pc.sum(table.column(name)).as_py() or 0.0)


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


class RunTotals:
    """The run's figures (`summary()`, what `summarize` returns) added up one part's summary row at a time (`add`),
    in constant time per part: the driver updates its progress at every committed part, and summing every part
    again at each would be quadratic in the parts (a million rows are thousands of parts)."""

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at  # Unix time the run started
        self.rows = self.rows_ok = self.rows_error = self.parts = 0
        self.audio_s = self.padded_s = 0.0
        self.first_commit: float | None = None
        self.last_commit: float | None = None
        self.busy_s = dict.fromkeys(BUSY_S_BY_STAGE, 0.0)

    def add(self, part: dict[str, Any]) -> None:
        """Count one summary row of a committed part (`FinishAndWrite`'s)."""
        self.rows += part[ROWS]
        self.rows_ok += part[ROWS_OK]
        self.rows_error += part[ROWS_ERROR]
        self.parts += 1 if part[PART] else 0
        self.audio_s += part[AUDIO_S]
        self.padded_s += part[PADDED_S]
        committed = part[COMMITTED_AT]
        self.first_commit = committed if self.first_commit is None else min(self.first_commit, committed)
        self.last_commit = committed if self.last_commit is None else max(self.last_commit, committed)
        for stage, name in BUSY_S_BY_STAGE.items():
            self.busy_s[stage] += part.get(name) or 0.0

    def summary(self) -> dict[str, Any]:
        wall_s = time.time() - self.started_at
        return {
            "rows": self.rows,
            "rows_ok": self.rows_ok,
            "rows_error": self.rows_error,
            "parts": self.parts,
            "audio_hours": self.audio_s / 3600,
            "wall_s": wall_s,
            "rtfx": self.audio_s / wall_s if wall_s > 0 else None,
            "padding_efficiency": self.audio_s / self.padded_s if self.padded_s > 0 else None,
            # starting Ray's actors and loading models: on a short job most of the wall time
            "first_part_s": self.first_commit - self.started_at if self.first_commit is not None else None,
            "last_commit_at": self.last_commit,  # Unix time of the latest commit
            # seconds each stage's workers spent on this run's committed rows (schema.BUSY_S_BY_STAGE)
            "busy_s": dict(self.busy_s),
        }


def summarize(parts: list[dict[str, Any]], started_at: float) -> dict[str, Any]:
    """Summary rows of this run's parts, and the Unix time the run started -> the run's figures (`RunTotals`)."""
    totals = RunTotals(started_at)
    for part in parts:
        totals.add(part)
    return totals.summary()
