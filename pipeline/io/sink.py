"""Parquet output, exactly once, by loopscribe's own commit protocol.

The output is a folder (local or any fsspec URI) of Parquet parts with `schema.OUTPUT_SCHEMA`, plus
`_identity.json` (the claim: what kind of results the output holds), `_config.json` (how the last run was made),
`_summary.json` and `_SUCCESS` when the job ends. The metadata files start with "_" so Parquet readers (pyarrow,
pandas, Spark, DuckDB) skip them: `pd.read_parquet(output)` reads the transcripts once `_SUCCESS` is there.

Why not Ray Data's checkpointing: it needs a plan that starts with a Ray read and ids that survive every
stage, and keeps its own state beside the data; this protocol needs only the output folder, works the same
with or without Ray, and a user can see what is committed by listing files.

The protocol:
0. Before any work, a job claims the output for its results identity (the model's content, the decoding, every
   setting that changes results) in one atomic step (`pipeline/io/claim.py`): of two jobs started together into a
   new output exactly one makes the claim; a job whose identity differs from the claim is refused with the setting
   that differs, before it writes anything. Jobs of the same identity share the output. Then the job removes
   `_SUCCESS` (`mark_incomplete`): from here on parts come and go.
1. A part is named by its content, `part-<sha1 of its sorted rows>.parquet` (a row: its utterance id, manifest and
   line, `part_name`), and appears whole or not at all: written to a hidden temporary name and renamed on a local
   disk; a single PUT on object stores (an object is visible only once complete). A retried task rewrites the
   same name with the same rows.
2. A rerun first reads the `utterance_id` column of every committed part and skips those rows, so a job
   killed at any point and run again processes only the unfinished rows.
3. At the end, `deduplicate` removes any second row of an utterance id (two parts hold it if Ray re-ran an
   upstream task that batched rows differently; a part or two parts hold it if manifests list the same
   utterance twice: ids are made from content, `pipeline/io/manifest.py`; or a rerun with `--retry-errors`
   transcribed an error row again, and its ok row is the one kept), then `_SUCCESS` is written, listing the
   parts the output is made of. Every utterance is then in exactly one row.

Readers wait for `_SUCCESS`: before it, a reader can see a row twice (a retry's part beside the first one) and a
listed part vanish (the dedupe removes it). After it, no part is removed until another job starts on the output,
and `read_output` reads exactly the parts `_SUCCESS` lists (a part gone from that list is an error naming it);
reading an unfinished output, it reads the parts a fresh listing shows in place of any that vanished.
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
RELIST_ROUNDS = 3  # fresh listings read for the parts that replaced vanished ones (an unfinished output)


def output_filesystem(output_uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    return fsspec.core.url_to_fs(output_uri)


def is_local_filesystem(filesystem: fsspec.AbstractFileSystem) -> bool:
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


def part_name(utterance_ids: Iterable[str], sources: Iterable[str | None] | None = None) -> str:
    """`part-<sha1>.parquet`, the hash of the part's sorted rows: a row is its utterance id, and where `sources`
    gives one, where a manifest lists it (`part_sources`). A retried task rewrites the same name with the same
    rows; the same utterances listed by two manifests (a copy caught by a glob) make two parts, whose repeats the
    dedupe counts, not one part written over the other."""
    keys = list(utterance_ids) if sources is None else [
        utterance_id if source is None else f"{utterance_id}\t{source}"
        for utterance_id, source in zip(utterance_ids, sources, strict=True)]
    digest = hashlib.sha1("\n".join(sorted(keys)).encode()).hexdigest()
    return f"{PART_PREFIX}{digest[:24]}.parquet"


def part_sources(table: pa.Table) -> list[str | None]:
    """Where each row of a part comes from, `<manifest>:<line>`, for `part_name`; None where it has no manifest."""
    if schema.MANIFEST not in table.column_names or schema.LINE not in table.column_names:
        return [None] * table.num_rows
    return [None if manifest is None else f"{manifest}:{line}" for manifest, line in zip(
        table.column(schema.MANIFEST).to_pylist(), table.column(schema.LINE).to_pylist())]


class PartWriteError(OSError):
    """A part could not be committed (access denied, bucket gone, disk full): the message names the output."""


def write_part(output_uri: str, table: pa.Table) -> str:
    """Commit one part atomically (see the module docstring) and return its name; `PartWriteError` naming the
    output and the cause if it cannot be (nothing half-written is left under a part's name)."""
    filesystem, root = output_filesystem(output_uri)
    name = part_name(table.column(schema.UTTERANCE_ID).to_pylist(), part_sources(table))
    final = f"{root.rstrip('/')}/{name}"
    temporary = f"{root.rstrip('/')}/.tmp-{uuid.uuid4().hex}.parquet"
    try:
        filesystem.makedirs(root, exist_ok=True)
        if is_local_filesystem(filesystem):
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
    filesystem, root = output_filesystem(output_uri)
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

    A part that vanishes between the listing and its reading was removed by the dedupe of a job finishing on
    this output, after it wrote the part that replaces it: the parts of a fresh listing not yet read are read
    after the others (up to `RELIST_ROUNDS` listings), so a resume scan misses no committed row.
    """
    filesystem, _ = output_filesystem(output_uri)
    paths = list_parts(output_uri)  # listed once: parts this process adds meanwhile (the dedupe's) are not read
    seen = set(paths)
    for _ in range(RELIST_ROUNDS + 1):
        vanished = False
        for path, table in _read_paths(filesystem, paths, columns):
            if table is None:
                vanished = True
            else:
                yield path, table
        if not vanished:
            return
        paths = [path for path in list_parts(output_uri) if path not in seen]
        seen.update(paths)
    raise FileNotFoundError(f"parts of {output_uri} keep vanishing while they are read: a job is finishing on it; "
                            f"read it once it has written {SUCCESS_FILE}")


def read_columns(handle: Any, columns: list[str] | None) -> pa.Table:
    """One part's `columns` (all where None); a column of `OUTPUT_SCHEMA` that a part written before it was added
    lacks comes back null (pyarrow would refuse to read the part)."""
    if columns is None:
        return pq.read_table(handle)
    parquet = pq.ParquetFile(handle)
    present = set(parquet.schema_arrow.names)
    table = parquet.read(columns=[name for name in columns if name in present])
    for name in columns:
        if name not in present and name in schema.OUTPUT_SCHEMA.names:
            table = table.append_column(name, pa.nulls(table.num_rows, schema.OUTPUT_SCHEMA.field(name).type))
    return table.select([name for name in columns if name in table.column_names])


def _read_paths(filesystem: fsspec.AbstractFileSystem, paths: list[str],
                columns: list[str] | None) -> Iterator[tuple[str, pa.Table | None]]:
    """(path, table) in the order of `paths`, read by up to `READ_THREADS` threads; None for a part gone."""
    def read(path: str) -> pa.Table | None:
        try:
            with filesystem.open(path, "rb") as handle:
                return read_columns(handle, columns)
        except FileNotFoundError:
            return None

    with ThreadPoolExecutor(max_workers=min(READ_THREADS, max(len(paths), 1))) as pool:
        yield from zip(paths, pool.map(read, paths))


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Fixed-width bytes (`S<n>`) -> their distinct values in numpy's order, as `np.unique` gives them, 5-7x faster
    on a million ids: sorted as rows of big-endian 64-bit words (the bytes' order), not string by string. The width
    comes back rounded up to a multiple of 8 (NUL-padded, as numpy's fixed width pads)."""
    width = -(-values.dtype.itemsize // 8) * 8
    values = np.ascontiguousarray(values.astype(f"S{width}"))
    words = values.view(">u8").reshape(len(values), width // 8)
    ordered = values[np.lexsort(words.T[::-1])]  # lexsort's last key is its first
    first = np.ones(len(ordered), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return ordered[first]


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
        self._sorted = sorted_unique(np.array(encoded, dtype=bytes)) if encoded else np.zeros(0, dtype="S1")

    @classmethod
    def from_arrow(cls, ids: pa.Array | pa.ChunkedArray) -> IdSet:
        """The set of a string column's values (nulls left out), made from its bytes without a Python string per
        id: a resume scan of a million rows builds it in a fraction of a second where the strings took seconds."""
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.large_string())
        ids = ids.drop_null().cast(pa.large_binary())  # 64-bit offsets, whatever the column's were
        merged = cls()
        if not len(ids):
            return merged
        offsets = np.frombuffer(ids.buffers()[1], dtype=np.int64)[ids.offset:ids.offset + len(ids) + 1]
        data = np.frombuffer(ids.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
        lengths = np.diff(offsets)
        width = max(1, int(lengths.max()))
        if (lengths == width).all():  # every id as long (loopscribe's: hex digits): the bytes as they lie
            values = data.view(f"S{width}")
        else:  # each id's bytes at the start of a row of `width`, NUL-padded, as numpy's fixed width keeps them
            padded = np.zeros((len(ids), width), dtype=np.uint8)
            rows = np.repeat(np.arange(len(ids)), lengths)
            columns = np.arange(len(data)) - np.repeat(offsets[:-1] - offsets[0], lengths)
            padded[rows, columns] = data
            values = padded.view(f"S{width}").ravel()
        merged._sorted = sorted_unique(values)
        return merged

    @classmethod
    def union(cls, parts: list[IdSet]) -> IdSet:
        merged = cls()
        arrays = [part._sorted for part in parts if len(part._sorted)]
        if arrays:
            merged._sorted = sorted_unique(np.concatenate(arrays))  # one width: the widest
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
    chunks: list[pa.Array] = []
    for _, table in read_parts(output_uri, columns):
        ids = table.column(0)
        if ok_only:
            ids = ids.filter(_is_ok(table.column(1)))
        chunks.extend(ids.cast(pa.large_string()).chunks)
    # in Arrow until the end: no Python string per id (a million rows' took seconds of a rerun's start)
    return IdSet.from_arrow(pa.chunked_array(chunks, pa.large_string()))


@dataclass(frozen=True)
class Deduplicated:
    duplicates: int  # second rows of an utterance removed (a re-batched retry, an utterance listed twice)
    errors_replaced: int  # error rows removed because the utterance also has an ok row (`--retry-errors`)
    # utterances listed more than once whose listings disagree on reference text or extra keys, and a few of them:
    # "<manifest>, line <n> and <manifest>, line <m>: reference_text differs"
    conflicting: int = 0
    conflict_examples: tuple[str, ...] = ()


SHOWN_CONFLICTS = 5  # examples of conflicting repeats `deduplicate` names


def deduplicate(output_uri: str) -> Deduplicated:
    """Rewrite parts so that no utterance id appears twice: an ok row is kept over error rows (an error row a
    rerun transcribed again, `--retry-errors`), and among rows of the same status the first listing: the first
    manifest in name order, then the first line (then the first in part-name order, for rows of no manifest).

    Returns how many rows were removed, of each kind, and the utterances whose listings disagree on reference text
    or extra keys (`Deduplicated.conflicting`: reported, as the kept row says only one of them); none (the usual
    case) reads nothing more and rewrites nothing. Parts made only of
    duplicates go first, then the partly duplicated ones are rewritten (new part written, old one removed):
    a rewritten part can take the name of a later part holding exactly its remaining rows, which is all
    duplicates, and removing that one afterwards would remove the rewrite.
    """
    filesystem, _ = output_filesystem(output_uri)
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
    # part: rows, not parts, are compared): ok rows first, then the first listing, and each id keeps its first row
    of_duplicated_id = pc.is_in(ids, value_set=duplicated_ids)
    part_starts = np.cumsum([0, *part_lengths])
    rows = pa.table({  # filter, not take: a take joins the chunks of all the ids into one array first (a copy)
        "id": ids.filter(of_duplicated_id),
        "ok": pa.chunked_array(ok_chunks, pa.bool_()).filter(of_duplicated_id),
        "position": pc.indices_nonzero(of_duplicated_id),
    })
    rows = _with_listings(filesystem, rows, paths, part_starts, of_duplicated_id).sort_by(
        [("ok", "descending"), ("manifest", "ascending"), ("line", "ascending"), ("position", "ascending")])
    conflicting, conflict_examples = _conflicts(rows)
    # without threads, "first" is the first in the table's order
    kept = rows.group_by("id", use_threads=False).aggregate([("position", "first"), ("ok", "first")])
    dropped = rows.filter(pc.invert(pc.is_in(rows.column("position"), value_set=kept.column("position_first"))))
    ids_with_ok_row = kept.column("id").filter(kept.column("ok_first"))
    replaced = pc.sum(pc.and_(pc.invert(dropped.column("ok")),
                              pc.is_in(dropped.column("id"), value_set=ids_with_ok_row))).as_py()
    dropped_positions = dropped.column("position").to_numpy()
    keep_row = np.ones(len(ids), dtype=bool)
    keep_row[dropped_positions] = False
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
    return Deduplicated(duplicates=removed - replaced, errors_replaced=replaced, conflicting=conflicting,
                        conflict_examples=conflict_examples)


def _with_listings(filesystem: fsspec.AbstractFileSystem, rows: pa.Table, paths: list[str], part_starts: np.ndarray,
                   of_duplicated_id: pa.ChunkedArray) -> pa.Table:
    """`rows` (the rows of duplicated ids, in position order) with where each is listed (`manifest`, `line`) and
    what it says (`values`: its reference text and extra keys), read from the parts that hold them."""
    columns = [schema.MANIFEST, schema.LINE, schema.REFERENCE_TEXT, schema.EXTRA]
    holding = np.unique(np.searchsorted(part_starts, rows.column("position").to_numpy(), side="right") - 1)
    pieces: dict[str, list[pa.ChunkedArray]] = {"manifest": [], "line": [], "values": []}
    for part_index, (path, table) in zip(holding, _read_paths(filesystem, [paths[i] for i in holding], columns)):
        if table is None:
            raise FileNotFoundError(f"{path} vanished while the output was deduplicated: another job is finishing "
                                    "on this output")
        mask = of_duplicated_id.slice(part_starts[part_index], part_starts[part_index + 1] - part_starts[part_index])
        table = table.filter(mask)
        pieces["manifest"].append(table.column(schema.MANIFEST).cast(pa.large_string()))
        pieces["line"].append(table.column(schema.LINE).cast(pa.int64()))
        pieces["values"].append(pc.binary_join_element_wise(  # text and extra, told apart by a NUL neither holds
            pc.fill_null(table.column(schema.REFERENCE_TEXT), ""), pc.fill_null(table.column(schema.EXTRA), ""),
            "\x00").cast(pa.large_string()))
    for name, chunks in pieces.items():
        rows = rows.append_column(name, pa.chunked_array([c for chunk in chunks for c in chunk.chunks],
                                                         chunks[0].type if chunks else pa.large_string()))
    return rows


def _conflicts(rows: pa.Table) -> tuple[int, tuple[str, ...]]:
    """How many ids of `rows` (sorted as the dedupe keeps them: each id's first row is kept) have rows that differ
    in reference text or extra keys, and up to `SHOWN_CONFLICTS` examples naming the kept row and one that
    differs from it."""
    distinct = rows.group_by("id").aggregate([("values", "count_distinct")])
    conflicting_ids = distinct.column("id").filter(pc.greater(distinct.column("values_count_distinct"), 1))
    if len(conflicting_ids) == 0:
        return 0, ()
    shown_ids = set(pc.sort_indices(conflicting_ids).to_pylist()[:SHOWN_CONFLICTS])  # a stable choice
    shown_ids = {conflicting_ids[i].as_py() for i in shown_ids}
    listed: dict[str, list[dict[str, Any]]] = {}
    for row in rows.filter(pc.is_in(rows.column("id"), value_set=pa.array(sorted(shown_ids), pa.large_string()))
                           ).select(["id", "manifest", "line", "values"]).to_pylist():
        listed.setdefault(row["id"], []).append(row)
    examples = []
    for utterance_id in sorted(listed):
        first, *others = listed[utterance_id]
        other = next(row for row in others if row["values"] != first["values"])
        (text, extra), (other_text, other_extra) = (row["values"].split("\x00", 1) for row in (first, other))
        what = " and ".join(name for name, differs in ((schema.REFERENCE_TEXT, text != other_text),
                                                         (schema.EXTRA, extra != other_extra)) if differs)
        examples.append(f"{first['manifest']}, line {first['line']} and {other['manifest']}, line {other['line']}: "
                        f"{what} {'differ' if ' and ' in what else 'differs'} (the first is kept)")
    return len(conflicting_ids), tuple(examples)


def write_json(output_uri: str, name: str, payload: dict[str, Any]) -> None:
    filesystem, root = output_filesystem(output_uri)
    filesystem.makedirs(root, exist_ok=True)
    with filesystem.open(f"{root.rstrip('/')}/{name}", "w") as handle:
        json.dump(payload, handle, indent=2, sort_keys=True)
        handle.write("\n")


def mark_incomplete(output_uri: str) -> None:
    """Remove `_SUCCESS` (if there) before a run changes the output: a reader waiting for it waits for this run."""
    filesystem, root = output_filesystem(output_uri)
    path = f"{root.rstrip('/')}/{SUCCESS_FILE}"
    filesystem.invalidate_cache(path)
    try:
        filesystem.rm(path)
    except FileNotFoundError:
        pass


def mark_success(output_uri: str, summary: dict[str, Any]) -> None:
    """Write the summary, then the `_SUCCESS` marker (last, so its presence means the output is complete), which
    lists the parts the complete output is made of: `{"parts": [names]}`."""
    write_json(output_uri, SUMMARY_FILE, summary)
    filesystem, root = output_filesystem(output_uri)
    names = [path.rsplit("/", 1)[-1] for path in list_parts(output_uri)]
    with filesystem.open(f"{root.rstrip('/')}/{SUCCESS_FILE}", "w") as handle:
        json.dump({"parts": names}, handle, indent=0)
        handle.write("\n")


def is_complete(output_uri: str) -> bool:
    filesystem, root = output_filesystem(output_uri)
    filesystem.invalidate_cache(root)
    return filesystem.exists(f"{root.rstrip('/')}/{SUCCESS_FILE}")


def success_parts(output_uri: str) -> list[str] | None:
    """The paths of the parts `_SUCCESS` lists, in name order; None where there is no `_SUCCESS` or it lists none
    (an earlier loopscribe wrote it empty)."""
    filesystem, root = output_filesystem(output_uri)
    path = f"{root.rstrip('/')}/{SUCCESS_FILE}"
    filesystem.invalidate_cache(path)
    try:
        with filesystem.open(path, "r") as handle:
            names = json.loads(handle.read() or "null")
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(names, dict) or not isinstance(names.get("parts"), list):
        return None
    return sorted(f"{root.rstrip('/')}/{name}" for name in names["parts"])


def read_output(output_uri: str, columns: list[str] | None = None, every_part: bool = False) -> pa.Table:
    """Every committed row, `columns` only if given (all columns: for tests and small outputs): the parts
    `_SUCCESS` lists where it lists them (a listed part that is gone is a `FileNotFoundError` naming it: a job
    started on the output since), else, or with `every_part`, every part in the folder now."""
    listed = None if every_part else success_parts(output_uri)
    if listed is None:
        tables = [table for _, table in read_parts(output_uri, columns)]
    else:
        tables = []
        for path, table in _read_paths(output_filesystem(output_uri)[0], listed, columns):
            if table is None:
                raise FileNotFoundError(f"{path} is listed in {output_uri.rstrip('/')}/{SUCCESS_FILE} but is gone: "
                                        f"a job has started on this output since; read it once that job has written "
                                        f"{SUCCESS_FILE}")
            tables.append(table)
    if tables:  # parts written before a column was added lack it: null there
        return pa.concat_tables(tables, promote_options="default")
    empty = schema.OUTPUT_SCHEMA.empty_table()
    return empty.select(columns) if columns is not None else empty
