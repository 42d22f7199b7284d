"""Parquet output, exactly once, by loopscribe's own commit protocol.

The output is a folder (local or any fsspec URI) of Parquet parts with `schema.OUTPUT_SCHEMA`, plus
`_config.json` (how the results were made), `_summary.json` and `_SUCCESS` when the job ends. The metadata
files start with "_" so Parquet readers (pyarrow, pandas, Spark, DuckDB) skip them: `pd.read_parquet(output)`
reads the transcripts.

Why not Ray Data's checkpointing: it needs a plan that starts with a Ray read and ids that survive every
stage, and keeps its own state beside the data; this protocol needs only the output folder, works the same
with or without Ray, and a user can see what is committed by listing files.

The protocol:
1. A part is named by its content, `part-<sha1 of its sorted utterance ids>.parquet`, and appears whole or
   not at all: written to a hidden temporary name and renamed on a local disk; a single PUT on object stores
   (an object is visible only once complete). A retried task rewrites the same name with the same rows.
2. A rerun first reads the `utterance_id` column of every committed part and skips those rows, so a job
   killed at any point and run again processes only the unfinished rows.
3. At the end, `deduplicate` removes any second row of an utterance id (two parts hold it if Ray re-ran an
   upstream task that batched rows differently; a part or two parts hold it if manifests list the same
   utterance twice: ids are made from content, `pipeline/io/manifest.py`; or a rerun with `--retry-errors`
   transcribed an error row again, and its ok row is the one kept), then `_SUCCESS` is written. Every
   utterance is then in exactly one row.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import schema

PART_PREFIX = "part-"
CONFIG_FILE = "_config.json"
SUMMARY_FILE = "_summary.json"
SUCCESS_FILE = "_SUCCESS"
READ_THREADS = 16  # parts read at once (object stores: one request each)


def _filesystem(output_uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    return fsspec.core.url_to_fs(output_uri)


def _is_local(filesystem: fsspec.AbstractFileSystem) -> bool:
    protocol = filesystem.protocol
    return "file" in (protocol if isinstance(protocol, (tuple, list)) else (protocol,))


def to_output_table(rows: dict[str, Any] | pa.Table) -> pa.Table:
    """Columns (lists or arrays) or a table -> a table with exactly `OUTPUT_SCHEMA`; missing columns are null."""
    if isinstance(rows, pa.Table):
        rows = {name: rows.column(name) for name in rows.column_names}
    length = len(next(iter(rows.values()))) if rows else 0
    arrays = []
    for field in schema.OUTPUT_SCHEMA:
        values = rows.get(field.name)
        if values is None:
            arrays.append(pa.nulls(length, field.type))
        elif isinstance(values, (pa.Array, pa.ChunkedArray)):
            arrays.append(values.cast(field.type))
        else:
            arrays.append(pa.array(list(values), type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema.OUTPUT_SCHEMA)


def part_name(utterance_ids: Iterable[str]) -> str:
    digest = hashlib.sha1("\n".join(sorted(utterance_ids)).encode()).hexdigest()
    return f"{PART_PREFIX}{digest[:24]}.parquet"


class PartWriteError(OSError):
    """A part could not be committed (access denied, bucket gone, disk full): the message names the output."""


def write_part(output_uri: str, table: pa.Table) -> str:
    """Commit one part atomically (see the module docstring) and return its name; `PartWriteError` naming the
    output and the cause if it cannot be (nothing half-written is left under a part's name)."""
    filesystem, root = _filesystem(output_uri)
    name = part_name(table.column(schema.UTTERANCE_ID).to_pylist())
    final = f"{root.rstrip('/')}/{name}"
    temporary = f"{root.rstrip('/')}/.tmp-{uuid.uuid4().hex}.parquet"
    try:
        filesystem.makedirs(root, exist_ok=True)
        if _is_local(filesystem):
            try:
                pq.write_table(table, temporary)
                os.replace(temporary, final)
            finally:
                if os.path.exists(temporary):  # a failed write (disk full) leaves no temporary behind
                    os.remove(temporary)
        else:
            with filesystem.open(final, "wb") as handle:
                pq.write_table(table, handle)
    except Exception as error:  # fsspec backends raise their own types (botocore, gcsfs, aiohttp ...)
        raise PartWriteError(f"cannot commit a part to {output_uri.rstrip('/')}/{name}: "
                             f"{type(error).__name__}: {' '.join(str(error).split())[:300]}") from error
    return name


def list_parts(output_uri: str) -> list[str]:
    filesystem, root = _filesystem(output_uri)
    # other processes (the writer actors) add parts: a listing cached by this process's filesystem object
    # (s3fs, gcsfs keep one per instance) would hide them from the resume scan, the dedupe and the summary
    filesystem.invalidate_cache(root)
    if not filesystem.exists(root):
        return []
    return sorted(path for path in filesystem.ls(root, detail=False)
                  if path.rsplit("/", 1)[-1].startswith(PART_PREFIX) and path.endswith(".parquet"))


def read_parts(output_uri: str, columns: list[str] | None = None) -> Iterator[tuple[str, pa.Table]]:
    """(path, table) of every committed part in name order, `columns` only if given.

    Parts are read by up to `READ_THREADS` threads at once: resuming, deduplicating and summing up a job of
    thousands of parts on an object store is one request per part, and one at a time that is minutes.
    """
    filesystem, _ = _filesystem(output_uri)
    paths = list_parts(output_uri)  # listed once: parts this process adds meanwhile (the dedupe's) are not read

    def read(path: str) -> pa.Table:
        with filesystem.open(path, "rb") as handle:
            return pq.read_table(handle, columns=columns)

    with ThreadPoolExecutor(max_workers=min(READ_THREADS, max(len(paths), 1))) as pool:
        yield from zip(paths, pool.map(read, paths))


class IdSet:
    """A set of utterance ids held as one sorted array of their UTF-8 bytes (numpy, fixed width).

    What a rerun skips: the resume scan of an output of millions of rows, which the driver holds and every
    manifest-reading task receives. As Python strings in a `set` the ids take several times their bytes, pickled
    and unpickled string by string; here they take their own bytes and travel as one buffer (measured in
    docs/benchmarks.md, "The dedupe's memory on a million rows"). `contains` answers for many ids at once (a
    binary search each); `in` for one.
    An id must not end in NUL bytes (numpy's fixed-width bytes drop them); loopscribe's ids are hex digits.
    """

    def __init__(self, ids: Iterable[str] = ()) -> None:
        encoded = [i.encode() for i in ids]
        self._sorted = np.unique(np.array(encoded, dtype=bytes)) if encoded else np.zeros(0, dtype="S1")

    @classmethod
    def union(cls, parts: list[IdSet]) -> IdSet:
        merged = cls()
        arrays = [part._sorted for part in parts if len(part._sorted)]
        if arrays:
            merged._sorted = np.unique(np.concatenate(arrays))  # one width: the widest
        return merged

    def contains(self, ids: list[str]) -> np.ndarray:
        """ids -> bool [len(ids)]: whether each is in the set."""
        found = np.zeros(len(ids), dtype=bool)
        if not ids or not len(self._sorted):
            return found
        keys = np.array([i.encode() for i in ids], dtype=bytes)
        fits = np.char.str_len(keys) <= self._sorted.dtype.itemsize  # a longer id is in no entry
        keys = keys[fits].astype(self._sorted.dtype)
        at = np.minimum(np.searchsorted(self._sorted, keys), len(self._sorted) - 1)
        found[fits] = self._sorted[at] == keys
        return found

    def __contains__(self, utterance_id: str) -> bool:
        return bool(self.contains([utterance_id])[0])

    def __len__(self) -> int:
        return len(self._sorted)

    def __iter__(self) -> Iterator[str]:
        return (value.decode() for value in self._sorted)


def _is_ok(statuses: pa.ChunkedArray) -> pa.ChunkedArray:
    """A `status` column -> whether each row is ok (a null status is not)."""
    return pc.fill_null(pc.equal(statuses, schema.STATUS_OK), False)


def committed_ids(output_uri: str, ok_only: bool = False) -> IdSet:
    """The utterance ids already committed under `output_uri` (reads one column of each part); with `ok_only`,
    only those with an ok row, so that a rerun transcribes the error rows again (`--retry-errors`)."""
    columns = [schema.UTTERANCE_ID, schema.STATUS] if ok_only else [schema.UTTERANCE_ID]
    parts = []
    for _, table in read_parts(output_uri, columns):
        ids = table.column(0)
        if ok_only:
            ids = ids.filter(_is_ok(table.column(1)))
        parts.append(IdSet(ids.to_pylist()))  # a part's ids as Python strings for a moment, not the output's
    return IdSet.union(parts)


@dataclass(frozen=True)
class Deduplicated:
    duplicates: int  # second rows of an utterance removed (a re-batched retry, an utterance listed twice)
    errors_replaced: int  # error rows removed because the utterance also has an ok row (`--retry-errors`)


def deduplicate(output_uri: str) -> Deduplicated:
    """Rewrite parts so that no utterance id appears twice: an ok row is kept over error rows (an error row a
    rerun transcribed again, `--retry-errors`), and among rows of the same status the first in part-name order.

    Returns how many rows were removed, of each kind; none (the usual case) rewrites nothing. Parts made only of
    duplicates go first, then the partly duplicated ones are rewritten (new part written, old one removed):
    a rewritten part can take the name of a later part holding exactly its remaining rows, which is all
    duplicates, and removing that one afterwards would remove the rewrite.
    """
    filesystem, _ = _filesystem(output_uri)
    # in Arrow, not as Python objects: the ids of millions of rows as Python strings take gigabytes of the driver
    paths: list[str] = []
    part_lengths: list[int] = []
    id_chunks: list[pa.Array] = []
    ok_chunks: list[pa.Array] = []
    for path, table in read_parts(output_uri, [schema.UTTERANCE_ID, schema.STATUS]):
        paths.append(path)
        part_lengths.append(table.num_rows)
        # 64-bit offsets: value_counts fails past 2 GiB of ids (some 60 million) in 32-bit ones
        id_chunks.extend(table.column(0).cast(pa.large_string()).chunks)
        ok_chunks.extend(_is_ok(table.column(1)).chunks)
    # every row, parts in name order: a row's position in it orders rows as the rule does (part, then row)
    ids = pa.chunked_array(id_chunks, pa.large_string())
    counts = pc.value_counts(ids)
    duplicated_ids = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    if len(duplicated_ids) == 0:
        return Deduplicated(duplicates=0, errors_replaced=0)

    # the rule, on the rows of the duplicated ids only (a manifest listing an utterance twice puts both in one
    # part: rows, not parts, are compared): ok rows first, then by position, and each id keeps its first row
    of_duplicated_id = pc.is_in(ids, value_set=duplicated_ids)
    rows = pa.table({  # filter, not take: a take joins the chunks of all the ids into one array first (a copy)
        "id": ids.filter(of_duplicated_id),
        "ok": pa.chunked_array(ok_chunks, pa.bool_()).filter(of_duplicated_id),
        "position": pc.indices_nonzero(of_duplicated_id),
    }).sort_by([("ok", "descending"), ("position", "ascending")])
    # without threads, "first" is the first in the table's order
    kept = rows.group_by("id", use_threads=False).aggregate([("position", "first"), ("ok", "first")])
    dropped = rows.filter(pc.invert(pc.is_in(rows.column("position"), value_set=kept.column("position_first"))))
    ids_with_ok_row = kept.column("id").filter(kept.column("ok_first"))
    replaced = pc.sum(pc.and_(pc.invert(dropped.column("ok")),
                              pc.is_in(dropped.column("id"), value_set=ids_with_ok_row))).as_py()
    dropped_positions = dropped.column("position").to_numpy()
    keep_row = np.ones(len(ids), dtype=bool)
    keep_row[dropped_positions] = False
    part_starts = np.cumsum([0, *part_lengths])
    removed = 0
    all_duplicates: list[str] = []
    partly: list[tuple[str, np.ndarray]] = []
    for part_index in np.unique(np.searchsorted(part_starts, dropped_positions, side="right") - 1):
        keep = keep_row[part_starts[part_index]:part_starts[part_index + 1]]
        if keep.any():
            partly.append((paths[part_index], keep))
        else:
            all_duplicates.append(paths[part_index])
            removed += len(keep)
    for path in all_duplicates:
        filesystem.rm(path)
    for path, keep in partly:
        with filesystem.open(path, "rb") as handle:
            table = pq.read_table(handle)
        left = table.filter(pa.array(keep))
        removed += table.num_rows - left.num_rows
        write_part(output_uri, left)
        filesystem.rm(path)
    return Deduplicated(duplicates=removed - replaced, errors_replaced=replaced)


def write_json(output_uri: str, name: str, payload: dict[str, Any]) -> None:
    filesystem, root = _filesystem(output_uri)
    filesystem.makedirs(root, exist_ok=True)
    with filesystem.open(f"{root.rstrip('/')}/{name}", "w") as handle:
        json.dump(payload, handle, indent=2, sort_keys=True)
        handle.write("\n")


class IdentityMismatch(ValueError):
    """The output holds results made another way (another model or decoding)."""


def check_identity(output_uri: str, identity: dict[str, Any]) -> None:
    """Refuse (`IdentityMismatch`) to add rows to an output whose `_config.json` records another results
    identity, or whose rows were identified another way (`schema.ROW_IDENTITY`: an output of a loopscribe that
    identified rows by manifest line cannot be resumed by content). A setting that only one of the two knows
    (added by a later version) does not make them differ."""
    filesystem, root = _filesystem(output_uri)
    path = f"{root.rstrip('/')}/{CONFIG_FILE}"
    if not filesystem.exists(path):
        return
    with filesystem.open(path, "r") as handle:
        written = json.load(handle)
    if written.get("row_identity") != schema.ROW_IDENTITY and list_parts(output_uri):
        raise IdentityMismatch(
            f"{output_uri} was written by an older loopscribe, which identified rows by manifest line: its rows "
            f"cannot be matched to utterances by content ({schema.ROW_IDENTITY}), so resuming it could transcribe "
            "rows twice or skip them; write to a new output, or delete this one to start over")
    earlier = written.get("identity")
    now = json.loads(json.dumps(identity))  # as it will be stored: tuples become lists
    if earlier is None:
        return
    for section in set(earlier) & set(now):
        before, after = earlier[section] or {}, now[section] or {}
        if any(before[key] != after[key] for key in set(before) & set(after)):
            raise IdentityMismatch(
                f"{output_uri} holds results of another model or decoding ({CONFIG_FILE}: {earlier}); "
                "write to a new output, or delete this one to start over")


def mark_success(output_uri: str, summary: dict[str, Any]) -> None:
    """Write the summary, then the `_SUCCESS` marker (last, so its presence means the output is complete)."""
    write_json(output_uri, SUMMARY_FILE, summary)
    filesystem, root = _filesystem(output_uri)
    with filesystem.open(f"{root.rstrip('/')}/{SUCCESS_FILE}", "w") as handle:
        handle.write("")


def is_complete(output_uri: str) -> bool:
    filesystem, root = _filesystem(output_uri)
    filesystem.invalidate_cache(root)
    return filesystem.exists(f"{root.rstrip('/')}/{SUCCESS_FILE}")


def read_output(output_uri: str, columns: list[str] | None = None) -> pa.Table:
    """Every committed row, `columns` only if given (all columns: for tests and small outputs)."""
    tables = [table for _, table in read_parts(output_uri, columns)]
    if tables:  # parts written before a column was added lack it: null there
        return pa.concat_tables(tables, promote_options="default")
    empty = schema.OUTPUT_SCHEMA.empty_table()
    return empty.select(columns) if columns is not None else empty
