"""The manifest stage (stage 1 of `pipeline/stages/__init__.py`): manifest URIs -> their rows not yet committed
(`ReadManifests`), or a sharded corpus's listings -> per shard, its rows not yet committed (`ReadShards`). It imports
neither torch nor NeMo."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from pipeline import schema
from pipeline.io import IdSet, read_manifest, shards
from pipeline.io.manifest import InShards, member_identity, utterance_identity
from pipeline.io.shards import ShardListing
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


# the rows `ReadShards` yields: one a shard that holds rows to transcribe, with those rows
SHARD = "shard"  # the tar's URI ("" for the error rows of lines that name no shard)
SHARD_FORMAT = "shard_format"  # pipeline/io/shards.py's FORMATS
SHARD_ROWS = "shard_rows"  # the shard's rows not yet committed, as `schema.INPUT_SCHEMA` structs (none: WebDataset)
SHARD_TASK_SCHEMA = pa.schema([pa.field(SHARD, pa.string()), pa.field(SHARD_FORMAT, pa.string()),
                               pa.field(SHARD_ROWS, pa.list_(pa.struct(list(schema.INPUT_SCHEMA))))])
LISTING = "listing"  # the column of the read stage's input: a `ShardListing` as JSON


class ReadShards:
    """CPU stage for sharded corpora: `ShardListing`s (`pipeline/io/shards.py`, as JSON in column `listing`) -> one
    task row per shard that still holds rows to transcribe (`SHARD_TASK_SCHEMA`): the shard, its format and those
    rows, error rows included; the shard stage (`pipeline/stages/shards.py`) reads the shard once for them. A shard
    whose listed rows are all committed gets no task, so it is never opened. A WebDataset tar lists nothing
    before it is read: it always gets a task (without rows), and the shard stage skips its committed members.

    Lines that name no shard (a `shard_id` no tar has) are error rows, in a task of their own (shard "").
    A NeMo listing of several shards (a whole `tarred_audio_manifest.json`) is held in memory until read to its end,
    since its lines may name the shards in any order; `sharded_manifests/` are read a shard at a time.
    """

    LOOKUP_ROWS = ReadManifests.LOOKUP_ROWS
    CPUS = ReadManifests.CPUS
    MAX_TASKS = ReadManifests.MAX_TASKS

    def __init__(self, committed: IdSet, allowed_roots: AudioRoots | None = None) -> None:
        self.committed = committed
        self.allowed_roots = allowed_roots or AudioRoots()

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        for text in batch.column(LISTING).to_pylist():
            yield from self.tasks(ShardListing.from_json(text))

    def tasks(self, listing: ShardListing) -> Iterator[pa.Table]:
        """The task rows of one listing, a table each."""
        if listing.format == shards.WEBDATASET:
            tar = listing.tars[0]
            outside = self.allowed_roots.problem(tar)
            if outside is not None:  # no member can be listed: one error row stands for the shard
                row = shard_error_row(tar, f"{tar}: {outside}")
                if not self.committed.contains([row[schema.UTTERANCE_ID]])[0]:
                    yield self._task(tar, listing.format, [row])
            else:
                yield self._task(tar, listing.format, [])
            return
        in_shards = InShards(listing.tars) if listing.format == shards.NEMO_TARRED else InShards({}, listing.tars[0])
        by_shard: dict[str, list[dict[str, Any]]] = {}
        lines = read_manifest(listing.listing, in_shards)
        while entries := list(itertools.islice(lines, self.LOOKUP_ROWS)):
            done = self.committed.contains([entry[schema.UTTERANCE_ID] for entry in entries])
            for entry, committed in zip(entries, done):
                if committed:
                    continue
                tar = entry[schema.AUDIO_FILEPATH] if entry[schema.STATUS] == schema.STATUS_OK else ""
                if tar:
                    outside = self.allowed_roots.problem(tar)
                    if outside is not None:
                        entry[schema.STATUS] = schema.STATUS_ERROR
                        entry[schema.ERROR] = f"{listing.listing}, line {entry[schema.LINE]}: {outside}"
                        tar = ""
                by_shard.setdefault(tar, []).append(entry)
        for tar, rows in by_shard.items():
            yield self._task(tar, listing.format, rows)

    @staticmethod
    def _task(tar: str, shard_format: str, rows: list[dict[str, Any]]) -> pa.Table:
        return pa.Table.from_pylist([{SHARD: tar, SHARD_FORMAT: shard_format, SHARD_ROWS: rows}],
                                    schema=SHARD_TASK_SCHEMA)


def shard_error_row(tar: str, error: str, what: str = "shard") -> dict[str, Any]:
    """An error row standing for a whole shard (or what of it could not be read, `what`): its id is stable for the
    same shard and cause."""
    return {schema.UTTERANCE_ID: utterance_identity(member_identity(tar, f"<{what}>"), 0.0, 0.0, None, None),
            schema.MANIFEST: tar, schema.LINE: 0, schema.SOURCE_ID: None, schema.AUDIO_FILEPATH: tar,
            schema.SHARD_MEMBER: None, schema.OFFSET: 0.0, schema.DURATION: 0.0, schema.CHANNEL: None,
            schema.REFERENCE_TEXT: "", schema.EXTRA: "{}", schema.PHRASES: None, schema.STATUS: schema.STATUS_ERROR,
            schema.ERROR: error}
