"""What a job's manifests hold, counted as the run reads them: rows, rows committed already (which the run skips),
rows it will commit, error rows, and the audio seconds their durations add up to (`scan_manifest`, `count_rows`).

`--dry-run` reports these counts (`pipeline/dry_run.py`), and a running job counts them beside its first batches
for its progress total (`pipeline/progress.py`).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pipeline import schema
from pipeline.io import IdSet, read_manifest
from pipeline.io.manifest import InShards
from pipeline.io.shards import NEMO_TARRED, WEBDATASET, ShardListing
from pipeline.io.uris import AudioRoots

AUDIO_SAMPLE = 16  # rows kept as a uniform sample of the rows to transcribe (`--dry-run` reads their audio)
LOOKUP_ROWS = 1024  # manifest rows looked up among the committed ids at once
SCAN_THREADS = 16  # manifests counted at once
EXAMPLES = 5  # error rows named per manifest


@dataclass
class ManifestScan:
    """One manifest's rows as the run would see them."""

    uri: str
    rows: int = 0
    rows_error: int = 0
    rows_committed: int = 0  # committed already: the run skips them
    rows_outside_roots: int = 0
    rows_to_transcribe: int = 0
    audio_s: float = 0.0  # the manifest's durations of its usable rows
    audio_s_to_transcribe: float = 0.0
    rows_without_duration: int = 0  # rows to transcribe whose line gives no duration (their audio is not counted)
    error_examples: list[str] = field(default_factory=list)
    sample: list[dict[str, Any]] = field(default_factory=list)  # rows to transcribe, a uniform sample of them


class RowsUnknown(ValueError):
    """A corpus whose rows cannot be counted before it is read (a WebDataset tar lists nothing else)."""


def scan_listing(listing: ShardListing, committed: IdSet, roots: AudioRoots) -> ManifestScan:
    """A sharded corpus's listing counted as `scan_manifest` counts a manifest (`ReadShards` reads it so); a
    WebDataset tar, whose rows are known only once it is read, raises `RowsUnknown` (counting its members would read
    the whole tar: the run's progress then goes without a total, and `--dry-run` says the rows are unknown)."""
    if listing.format == WEBDATASET:
        raise RowsUnknown(f"{listing.name}: a WebDataset tar's rows are known only once it is read")
    in_shards = InShards(listing.tars) if listing.format == NEMO_TARRED else InShards({}, listing.tars[0])
    return scan_manifest(listing.listing or "", None, committed, roots, in_shards)


def scan_manifest(uri: str, max_rows: int | None, committed: IdSet, roots: AudioRoots,
                  shards: InShards | None = None) -> ManifestScan:
    """Every row of one manifest (its first `max_rows`), counted; a reservoir sample of the rows to transcribe.
    `shards`: the manifest lists a sharded corpus (`read_manifest`)."""
    scan = ManifestScan(uri)
    chooser = random.Random(hashlib.sha1(uri.encode("utf-8", "surrogatepass")).digest())  # the same sample each time
    rows = itertools.islice(read_manifest(uri, shards), max_rows)
    while entries := list(itertools.islice(rows, LOOKUP_ROWS)):
        done = committed.contains([entry[schema.UTTERANCE_ID] for entry in entries])
        for entry, is_committed in zip(entries, done):
            scan.rows += 1
            ok = entry[schema.STATUS] == schema.STATUS_OK
            if ok:
                scan.audio_s += entry[schema.DURATION] or 0.0
            if is_committed:
                scan.rows_committed += 1
                continue
            if not ok:
                scan.rows_error += 1
                if len(scan.error_examples) < EXAMPLES:
                    scan.error_examples.append(entry[schema.ERROR])
                continue
            outside = roots.problem(entry[schema.AUDIO_FILEPATH])
            if outside is not None:
                scan.rows_outside_roots += 1
                if len(scan.error_examples) < EXAMPLES:
                    scan.error_examples.append(f"{uri}, line {entry[schema.LINE]}: {outside}")
                continue
            scan.rows_to_transcribe += 1
            scan.audio_s_to_transcribe += entry[schema.DURATION] or 0.0
            scan.rows_without_duration += entry[schema.DURATION] is None
            if len(scan.sample) < AUDIO_SAMPLE:
                scan.sample.append(entry)
            else:
                at = chooser.randrange(scan.rows_to_transcribe)
                if at < AUDIO_SAMPLE:
                    scan.sample[at] = entry
    return scan


@dataclass(frozen=True)
class RowCounts:
    """A job's rows in all: what its manifests hold, what earlier runs committed, what this run will commit."""

    rows: int
    rows_committed: int
    rows_to_commit: int  # every row not committed yet, error rows among them (each becomes an output row)
    audio_s_to_transcribe: float  # the durations of the usable rows to transcribe
    rows_without_duration: int  # usable rows to transcribe whose manifest line gives no duration


def count_rows(manifest_uris: list[str], row_limits: dict[str, int], committed: IdSet,
               roots: AudioRoots, listings: list[ShardListing] | None = None) -> RowCounts:
    """`scan_manifest` over every manifest (the first `row_limits[uri]` rows where given), summed; or with
    `listings`, `scan_listing` over a sharded corpus's (`RowsUnknown` for a WebDataset)."""
    with ThreadPoolExecutor(max_workers=max(1, min(SCAN_THREADS, len(listings or manifest_uris)))) as pool:
        if listings is not None:
            scans = list(pool.map(lambda listing: scan_listing(listing, committed, roots), listings))
        else:
            scans = list(pool.map(lambda uri: scan_manifest(uri, row_limits.get(uri), committed, roots),
                                  manifest_uris))
    rows, done = sum(s.rows for s in scans), sum(s.rows_committed for s in scans)
    return RowCounts(rows, done, rows - done, sum(s.audio_s_to_transcribe for s in scans),
                     sum(s.rows_without_duration for s in scans))


__all__ = ["AUDIO_SAMPLE", "ManifestScan", "RowCounts", "RowsUnknown", "count_rows", "scan_listing", "scan_manifest"]
