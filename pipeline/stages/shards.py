"""The shard stage (`LoadShards`, stage 2 of a sharded corpus's job, in place of `LoadAudio`): a shard's task (its
rows not yet committed, from `ReadShards`) -> its rows with their audio decoded, in tables of `LoadAudio.BATCH_ROWS`.
It imports neither torch nor NeMo.

A shard is read once, as a stream (`pipeline/io/shards.py::tar_members`), on the audio actors: a call per shard. Each
wanted member is decoded by `LoadAudio` itself from the bytes in memory (`LoadAudio.__call__`'s `in_memory`), so
resampling, channel mixing, bounds, error rows and columns are the loose files' own. What a shard may do to its rows:

- a listed member missing from the shard: an error row "<shard>: member <m> is not in the shard";
- a shard that cannot be opened (missing, denied): each of its rows an error row saying so;
- a tar cut short or corrupt: the rows of the members read are transcribed, the others error rows "<shard>: shard
  truncated or corrupt after member <m> (<cause>)"; for a WebDataset tar, whose rows past the break are unknown,
  one error row stands for them;
- a corrupt member: its row an error row, as a corrupt file's is;
- a member larger than `--max-file-bytes`: its rows error rows, the member skipped unread;
- members nobody listed (NeMo, Shar): one warning per shard with their count (the Ray worker's log).
A member's rows keep their samples inline whatever their length (`LoadAudio`): a shard cannot be read again by
range, as the ASR stage reads a long loose file.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from pipeline import schema
from pipeline.config import InputConfig, LongAudioConfig
from pipeline.io import IdSet
from pipeline.io import shards as shard_formats
from pipeline.io.audio import AudioBytes
from pipeline.io.manifest import member_identity, utterance_identity
from pipeline.io.shards import TarBroken, TarMember, sample_key, tar_members
from pipeline.schema import AUDIO_BUSY_S
from pipeline.stages.audio import LoadAudio
from pipeline.stages.read import SHARD, SHARD_FORMAT, SHARD_ROWS, shard_error_row
from pipeline.stages.rows import share_busy_s

log = logging.getLogger(__name__)


def failed(row: dict[str, Any], message: str) -> dict[str, Any]:
    """`row` as an error row, `message` after its manifest and line (as `rows.mark_failed` writes it)."""
    return {**row, schema.STATUS: schema.STATUS_ERROR,
            schema.ERROR: f"{row[schema.MANIFEST]}, line {row[schema.LINE]}: {message}"}


class LoadShards:
    """CPU stage: shard tasks (`ReadShards`) -> rows with `LoadAudio`'s columns, `LoadAudio.BATCH_ROWS` at a time,
    every row of every task passed on once (error rows included). Called by Ray Data one task at a time, as a
    generator; testable without it."""

    CPUS = LoadAudio.CPUS
    BATCH_ROWS = LoadAudio.BATCH_ROWS

    def __init__(self, sample_rate: int, limits: InputConfig | None = None,
                 long_audio: LongAudioConfig | None = None, committed: IdSet | None = None,
                 **audio_settings: Any) -> None:
        """`committed`: the ids committed already (a WebDataset's members are looked up here); `audio_settings`: the
        rest of `LoadAudio`'s settings."""
        self.audio = LoadAudio(sample_rate, limits, long_audio, **audio_settings)
        self.limits = self.audio.limits
        self.committed = committed or IdSet()

    def __call__(self, tasks: pa.Table) -> Iterator[pa.Table]:
        for task in tasks.to_pylist():
            yield from self.shard(task[SHARD], task[SHARD_FORMAT], task[SHARD_ROWS] or [])

    def shard(self, tar: str, shard_format: str, rows: list[dict[str, Any]]) -> Iterator[pa.Table]:
        """One shard's rows with their audio, in tables of `BATCH_ROWS`."""
        batch = _Batch(self)
        if shard_format == shard_formats.WEBDATASET:
            yield from self._webdataset(tar, batch)
        else:
            yield from self._listed(tar, shard_format, rows, batch)
        yield from batch.flush()

    def _listed(self, tar: str, shard_format: str, rows: list[dict[str, Any]], batch: _Batch) -> Iterator[pa.Table]:
        """A NeMo tarred or Shar shard: the listed rows, matched to members by name (Shar: the name before its
        extension, the cut id; its `.json` members are the recordings' descriptions)."""
        wanted: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            if row[schema.STATUS] != schema.STATUS_OK or not tar:
                yield from batch.add(row, None)
            else:
                wanted.setdefault(row[schema.SHARD_MEMBER], []).append(row)
        if not wanted:
            return
        shar = shard_format == shard_formats.SHAR
        broken: TarBroken | None = None
        unlisted = 0
        for item in tar_members(tar, self.limits.max_file_bytes):
            if isinstance(item, TarBroken):
                broken = item
                break
            name = item.name
            if shar:
                stem, _, extension = name.rpartition(".")
                if extension == "json":
                    continue
                name = stem
            listed = wanted.pop(name, None)
            if listed is None:
                unlisted += 1
                continue
            for row in listed:
                yield from self._member_row(tar, item, row, batch)
        if unlisted:
            log.warning("loopscribe: %s holds %d member(s) no line lists: not transcribed", tar, unlisted)
        for member, listed in wanted.items():
            why = broken.describe(tar) if broken is not None else f"{tar}: member {member} is not in the shard"
            for row in listed:
                yield from batch.add(failed(row, why), None)

    def _member_row(self, tar: str, member: TarMember, row: dict[str, Any], batch: _Batch) -> Iterator[pa.Table]:
        if member.data is None:
            yield from batch.add(failed(row, f"{tar} member {member.name}: {member.problem}"), None)
        else:
            yield from batch.add(row, AudioBytes(f"{tar} member {member.name}", member.data))

    def _webdataset(self, tar: str, batch: _Batch) -> Iterator[pa.Table]:
        """A WebDataset tar: every audio member a row, its sample's `.json` or `.txt` its text."""
        group: list[TarMember] = []
        key: str | None = None
        samples = 0
        orphans = 0
        for item in tar_members(tar, self.limits.max_file_bytes):
            if isinstance(item, TarBroken):
                if group:
                    samples += 1
                    yield from self._sample(tar, key, group, samples, batch)
                what = "shard" if item.last_member is None else f"after {item.last_member}"
                row = shard_error_row(tar, item.describe(tar) + (
                    "" if item.last_member is None else "; the members after it were not read"), what)
                if not self.committed.contains([row[schema.UTTERANCE_ID]])[0]:  # a rerun of a tar still broken
                    yield from batch.add(row, None)
                return
            found = sample_key(item.name)
            item_key = found[0] if found is not None else item.name
            if group and item_key != key:
                samples += 1
                orphans += yield from self._sample(tar, key, group, samples, batch)
                group = []
            key = item_key
            group.append(item)
        if group:
            samples += 1
            orphans += yield from self._sample(tar, key, group, samples, batch)
        if orphans:
            log.warning("loopscribe: %s holds %d sample(s) without an audio member: not transcribed", tar, orphans)

    def _sample(self, tar: str, key: str | None, group: list[TarMember], number: int,
                batch: _Batch) -> Iterator[pa.Table]:
        """The rows of one WebDataset sample (a row per audio member); returns 1 where it has no audio member."""
        fields = {(sample_key(m.name) or (m.name, ""))[1]: m for m in group}
        audio = [m for f, m in fields.items() if f.rsplit(".", 1)[-1].lower() in shard_formats.AUDIO_EXTENSIONS]
        if not audio:
            return 1
        values, problem = _sidecar(fields)
        for member in audio:
            row = {schema.UTTERANCE_ID: utterance_identity(member_identity(tar, member.name), 0.0, 0.0, None, None),
                   schema.MANIFEST: tar, schema.LINE: number, schema.SOURCE_ID: key, schema.AUDIO_FILEPATH: tar,
                   schema.SHARD_MEMBER: member.name, schema.CHANNEL: None, schema.PHRASES: None,
                   schema.STATUS: schema.STATUS_OK, schema.ERROR: "", **values}
            if self.committed.contains([row[schema.UTTERANCE_ID]])[0]:
                continue
            if problem is not None:
                yield from batch.add(failed(row, f"{tar} member {problem}"), None)
            else:
                yield from self._member_row(tar, member, row, batch)
        return 0


def _sidecar(fields: dict[str, TarMember]) -> tuple[dict[str, Any], str | None]:
    """A WebDataset sample's text, offset, duration and the rest (`extra`) from its `.json` (NeMo-like keys) or
    `.txt`; (values, None), or (defaults, what is wrong with the sidecar)."""
    values: dict[str, Any] = {schema.OFFSET: 0.0, schema.DURATION: 0.0, schema.REFERENCE_TEXT: "", schema.EXTRA: "{}"}
    if "json" in fields and fields["json"].data is not None:
        member = fields["json"]
        try:
            entry = json.loads(member.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            return values, f"{member.name}: not JSON ({type(error).__name__}: {error})"
        if not isinstance(entry, dict):
            return values, f"{member.name}: expected a JSON object, got {type(entry).__name__}"
        text = entry.get("text")
        values[schema.REFERENCE_TEXT] = "" if text is None else text if isinstance(text, str) else json.dumps(text)
        for key, column in (("offset", schema.OFFSET), ("duration", schema.DURATION)):
            seconds = entry.get(key)
            if seconds is not None:
                if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 1e12:
                    return values, f"{member.name}: {key!r} must be a number of seconds >= 0, got {seconds!r}"
                values[column] = float(seconds)
        rest = {k: v for k, v in entry.items() if k not in ("text", "offset", "duration")}
        values[schema.EXTRA] = json.dumps(rest, ensure_ascii=False, sort_keys=True, default=str)
    elif "txt" in fields and fields["txt"].data is not None:
        values[schema.REFERENCE_TEXT] = fields["txt"].data.decode("utf-8", "replace").strip()
    return values, None


class _Batch:
    """Rows gathered for `LoadAudio`, given to it `BATCH_ROWS` at a time; the seconds since the last table left
    (reading the shard and decoding) are the rows' audio busy seconds."""

    def __init__(self, stage: LoadShards) -> None:
        self.stage = stage
        self.rows: list[dict[str, Any]] = []
        self.audio: list[AudioBytes | None] = []
        self.started = time.perf_counter()

    def add(self, row: dict[str, Any], audio: AudioBytes | None) -> Iterator[pa.Table]:
        self.rows.append(row)
        self.audio.append(audio)
        if len(self.rows) >= self.stage.BATCH_ROWS:
            yield from self.flush()

    def flush(self) -> Iterator[pa.Table]:
        if not self.rows:
            return
        table = pa.Table.from_pylist(self.rows, schema=schema.INPUT_SCHEMA)
        table = self.stage.audio(table, self.audio)
        self.rows, self.audio = [], []
        yield share_busy_s(table, AUDIO_BUSY_S, time.perf_counter() - self.started)
        self.started = time.perf_counter()
