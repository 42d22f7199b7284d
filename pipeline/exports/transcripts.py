"""An output folder read for export: its rows grouped into recordings, each with a unique file name.

A recording is one audio file (and channel, where rows name one): every row of that file, whole or a segment
(`offset`, `duration`), in time order. Word times in the output are seconds from the start of their row's audio
(`schema.WORDS`); here they become seconds from the start of the recording (`offset` added), so that two segments
of one file go into one subtitle file at their places.

Names. A recording's name is its audio file's name without the extension (`talks/intro.flac` -> `intro`), with
characters that are unsafe in file names or break a CTM line (whitespace, `/ \\ : * ? " < > |`, control characters)
made `_`; where rows of one file name different channels, each gets `-ch<N>` (`-mix` for all channels mixed down).
Where two recordings would get the same name (ignoring case, as macOS and Windows disks do), every one of them gets
`-` and the first 8 hex digits of the sha1 of its audio path (and channel) after its name: `a/x.wav` and `b/x.wav`
become `x-36250069` and `x-f4ca5af1`, the same in every export whatever else is exported with them.

Memory: the rows stay in Arrow, sorted once; only one recording at a time becomes Python objects.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import schema
from pipeline.exports.cues import TimedWord
from pipeline.io import sink
from pipeline.io.claim import CLAIM_FILE, read_identity
from pipeline.io.uris import local_path

UNSAFE = re.compile(r"[\s/\\:*?\"<>|\x00-\x1f\x7f]+")
NAME_HASH_DIGITS = 8
COLUMNS = [schema.UTTERANCE_ID, schema.MANIFEST, schema.LINE, schema.SOURCE_ID, schema.AUDIO_FILEPATH, schema.OFFSET,
           schema.DURATION, schema.CHANNEL, schema.AUDIO_DURATION, schema.REFERENCE_TEXT, schema.EXTRA, schema.TEXT,
           schema.WORDS, schema.CONFIDENCE, schema.STATUS, schema.ERROR]


class ExportError(ValueError):
    """The output cannot be exported (not an output, or its job has not finished): the message says why and what to
    do."""


@dataclass(frozen=True)
class Utterance:
    """One ok row, its words in seconds from the start of its recording."""

    manifest: str | None
    line: int | None
    source_id: str | None
    audio_filepath: str
    offset_s: float
    duration_s: float  # the manifest's
    audio_duration_s: float | None  # measured
    channel: int | None
    reference_text: str
    extra: dict[str, Any]
    text: str
    words: tuple[TimedWord, ...]
    confidence: float | None


@dataclass(frozen=True)
class Recording:
    name: str  # unique in the export (module docstring)
    audio_filepath: str
    channel: int | None
    utterances: tuple[Utterance, ...]  # ok rows, in time order


@dataclass(frozen=True)
class ErrorRow:
    manifest: str | None
    line: int | None
    audio_filepath: str | None
    offset_s: float | None
    duration_s: float | None
    error: str


class Transcripts:
    """An output's committed rows, ready to export: `recordings()` one at a time (by name), `utterances()` in
    manifest order, `errors` (the error rows)."""

    def __init__(self, table: pa.Table) -> None:
        ok = pc.fill_null(pc.equal(table.column(schema.STATUS), schema.STATUS_OK), False)
        self.errors = [ErrorRow(r[schema.MANIFEST], r[schema.LINE], r[schema.AUDIO_FILEPATH], r[schema.OFFSET],
                                r[schema.DURATION], r[schema.ERROR] or "(no cause recorded)")
                       for r in table.filter(pc.invert(ok)).sort_by(
                           [(schema.MANIFEST, "ascending"), (schema.LINE, "ascending")]).select(
                           [schema.MANIFEST, schema.LINE, schema.AUDIO_FILEPATH, schema.OFFSET, schema.DURATION,
                            schema.ERROR]).to_pylist()]
        rows = table.filter(ok)
        rows = rows.append_column("channel_key", pc.fill_null(rows.column(schema.CHANNEL), -1))
        rows = rows.append_column("offset_key", pc.fill_null(rows.column(schema.OFFSET), 0.0))
        self.rows = rows.sort_by([(schema.AUDIO_FILEPATH, "ascending"), ("channel_key", "ascending"),
                                  ("offset_key", "ascending"), (schema.MANIFEST, "ascending"),
                                  (schema.LINE, "ascending")])
        self.slices = recording_slices(self.rows)  # name -> (first row, rows), in name order

    @property
    def rows_ok(self) -> int:
        return self.rows.num_rows

    def recordings(self) -> Iterator[Recording]:
        for name, (start, length) in self.slices.items():
            rows = self.rows.slice(start, length).to_pylist()
            yield Recording(name, rows[0][schema.AUDIO_FILEPATH], rows[0][schema.CHANNEL],
                            tuple(utterance_of(row) for row in rows))

    def utterances(self, batch_rows: int = 4096) -> Iterator[Utterance]:
        """Every ok row in manifest order (manifest, then line), `batch_rows` at a time as Python objects."""
        ordered = self.rows.drop_columns([schema.WORDS]).sort_by(
            [(schema.MANIFEST, "ascending"), (schema.LINE, "ascending")])
        for start in range(0, ordered.num_rows, batch_rows):
            for row in ordered.slice(start, batch_rows).to_pylist():
                yield utterance_of({**row, schema.WORDS: None})


def read_transcripts(output_uri: str, incomplete: bool = False) -> Transcripts:
    """The committed rows of `output_uri`. An output whose job has not written `_SUCCESS` is refused unless
    `incomplete`; then every part there is read, and an utterance in two parts (a retried task's, before the
    job's dedupe) is taken once, its ok row first."""
    if not sink.is_complete(output_uri):
        if read_identity(output_uri) is None and not sink.list_parts(output_uri):
            raise ExportError(f"no loopscribe output at {output_uri} (no {CLAIM_FILE}, no parts)")
        if not incomplete:
            raise ExportError(
                f"{output_uri} has no {sink.SUCCESS_FILE}: its job is running or was stopped, so its rows may still "
                f"change (`python jobs/inspect_output.py {output_uri}` says how far it got); export it once the job "
                "has finished, or with --incomplete to export the rows committed so far")
        return Transcripts(first_of_each(sink.read_output(output_uri, COLUMNS, every_part=True)))
    return Transcripts(sink.read_output(output_uri, COLUMNS))


def first_of_each(table: pa.Table) -> pa.Table:
    """One row per utterance id: its ok row where it has one, else its first listing (manifest, line)."""
    if table.num_rows == 0:
        return table
    rank = pc.if_else(pc.fill_null(pc.equal(table.column(schema.STATUS), schema.STATUS_OK), False), 0, 1)
    ordered = table.append_column("ok_rank", rank).sort_by(
        [(schema.UTTERANCE_ID, "ascending"), ("ok_rank", "ascending"), (schema.MANIFEST, "ascending"),
         (schema.LINE, "ascending")])
    ids = ordered.column(schema.UTTERANCE_ID).to_numpy(zero_copy_only=False)
    first = np.ones(len(ids), dtype=bool)
    first[1:] = ids[1:] != ids[:-1]
    return ordered.filter(pa.array(first)).drop_columns(["ok_rank"])


def stem_of(audio_filepath: str) -> str:
    """The audio file's name without its extension, as a file name and CTM recording id can hold it."""
    path = local_path(audio_filepath)
    if path is None:  # a URI: its path, without a query or fragment
        path = re.split(r"[?#]", audio_filepath.split("://", 1)[1], maxsplit=1)[0]
    name = posixpath.basename(path.rstrip("/"))
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return UNSAFE.sub("_", stem).strip("_") or "recording"


def recording_names(keys: list[tuple[str, int | None]]) -> dict[tuple[str, int | None], str]:
    """(audio path, channel) of each recording -> its unique name (module docstring)."""
    channels: dict[str, set[int | None]] = {}
    for audio, channel in keys:
        channels.setdefault(audio, set()).add(channel)
    base = {}
    for audio, channel in keys:
        suffix = "" if len(channels[audio]) == 1 else "-mix" if channel is None else f"-ch{channel}"
        base[(audio, channel)] = stem_of(audio) + suffix
    taken: dict[str, int] = {}
    for name in base.values():
        taken[name.casefold()] = taken.get(name.casefold(), 0) + 1
    names = {}
    for (audio, channel), name in base.items():
        if taken[name.casefold()] > 1:
            digest = hashlib.sha1(f"{audio}\x00{'' if channel is None else channel}".encode()).hexdigest()
            name = f"{name}-{digest[:NAME_HASH_DIGITS]}"
        names[(audio, channel)] = name
    return names


def recording_slices(rows: pa.Table) -> dict[str, tuple[int, int]]:
    """Rows sorted by audio path and channel -> {recording name: (first row, rows)}, in name order."""
    if rows.num_rows == 0:
        return {}
    audio = rows.column(schema.AUDIO_FILEPATH).to_numpy(zero_copy_only=False)
    channel = rows.column("channel_key").to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.concatenate([[True], (audio[1:] != audio[:-1]) | (channel[1:] != channel[:-1])]))
    ends = np.append(starts[1:], len(audio))
    keys = [(str(audio[s]), None if channel[s] < 0 else int(channel[s])) for s in starts]
    names = recording_names(keys)
    return dict(sorted((names[key], (int(s), int(e - s))) for key, s, e in zip(keys, starts, ends)))


def utterance_of(row: dict[str, Any]) -> Utterance:
    offset_s = row[schema.OFFSET] or 0.0
    words = tuple(TimedWord(w["word"], offset_s + w["start"], offset_s + w["end"], w["confidence"])
                  for w in row[schema.WORDS] or () if w["word"])
    try:
        extra = json.loads(row[schema.EXTRA] or "{}")
    except ValueError:
        extra = {}
    return Utterance(
        manifest=row[schema.MANIFEST], line=row[schema.LINE], source_id=row[schema.SOURCE_ID],
        audio_filepath=row[schema.AUDIO_FILEPATH], offset_s=offset_s, duration_s=row[schema.DURATION] or 0.0,
        audio_duration_s=row[schema.AUDIO_DURATION], channel=row[schema.CHANNEL],
        reference_text=row[schema.REFERENCE_TEXT] or "", extra=extra if isinstance(extra, dict) else {},
        text=row[schema.TEXT] or "", words=tuple(sorted(words, key=lambda w: w.start_s)),
        confidence=row[schema.CONFIDENCE])
