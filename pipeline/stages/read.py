"""The manifest stage (`ReadManifests`, stage 1 of `pipeline/stages/__init__.py`): manifest URIs -> their rows not yet
committed. It imports neither torch nor NeMo."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from pipeline import schema
from pipeline.io import IdSet, read_manifest
from pipeline.io.uris import AudioRoots
from pipeline.stages.rows import share_busy_s


class ReadManifests:
    """CPU stage: manifest URIs -> their rows (error rows included) not yet committed, as tables of `chunk_rows`.

    Called as a function (Ray tasks), with the committed ids read once by the driver (`sink.committed_ids`),
    looked up `LOOKUP_ROWS` lines at a time. The rows leave in small tables, but Ray Data merges what a task
    yields into large blocks; `graph.read_rows` splits them again.

    `row_limits` (manifest URI -> rows, `--limit`) reads only a manifest's first rows, committed ones counted; a
    row whose audio lies outside `allowed_roots` (`--allowed-roots`) leaves as an error row naming the rule. Each
    table carries the seconds spent reading it (`schema.READ_BUSY_S`, the time between two yields).
    """

    LOOKUP_ROWS = 1024  # manifest lines whose ids are looked up among the committed ones at once
    # Reading manifests is I/O and asks for no CPU: a task that needs even 0.1 CPU can wait forever behind the job's
    # own actors. When a host dies, Ray reruns the read tasks it lost on the hosts left, where the job's actors
    # (restarted there) may hold every CPU; a read that needs none still runs. MAX_TASKS bounds how many read at once
    # instead.
    CPUS = 0.0
    MAX_TASKS = 4

    def __init__(self, committed: IdSet, chunk_rows: int, row_limits: dict[str, int] | None = None,
                 allowed_roots: AudioRoots | None = None) -> None:
        self.committed = committed
        self.chunk_rows = chunk_rows
        self.row_limits = row_limits or {}
        self.allowed_roots = allowed_roots or AudioRoots()

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        started = time.perf_counter()  # again after each yield: the time downstream stages take is not this one's
        for uri in batch.column(schema.MANIFEST).to_pylist():
            rows: list[dict[str, Any]] = []
            lines = itertools.islice(read_manifest(uri), self.row_limits.get(uri))
            while entries := list(itertools.islice(lines, self.LOOKUP_ROWS)):
                done = self.committed.contains([entry[schema.UTTERANCE_ID] for entry in entries])
                for entry, committed in zip(entries, done):
                    if committed:
                        continue
                    if entry[schema.STATUS] == schema.STATUS_OK:
                        outside = self.allowed_roots.problem(entry[schema.AUDIO_FILEPATH])
                        if outside is not None:
                            entry[schema.STATUS] = schema.STATUS_ERROR
                            entry[schema.ERROR] = f"{uri}, line {entry[schema.LINE]}: {outside}"
                    rows.append(entry)
                    if len(rows) == self.chunk_rows:
                        yield self._table(rows, started)
                        rows, started = [], time.perf_counter()
            if rows:
                yield self._table(rows, started)
                started = time.perf_counter()

    @staticmethod
    def _table(rows: list[dict[str, Any]], started: float) -> pa.Table:
        table = pa.Table.from_pylist(rows, schema=schema.INPUT_SCHEMA)
        return share_busy_s(table, schema.READ_BUSY_S, time.perf_counter() - started)
