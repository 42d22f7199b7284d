"""Kept pseudo-labels with their audio in shards: a NeMo tarred audio dataset and a Lhotse Shar, written once.

`write_shards` reads each kept utterance's audio once (its segment of the original file, at the model's sample
rate: `pipeline/io/audio.py::load_audio_batch`, the rows of one file through one open of it) and writes it into
every sharded format asked for, in the same shards: shard k of the tarred set and of the Shar hold the same
utterances. `shard_count` shards of at most `max_shard_utterances` each, balanced (sizes differ by at most one,
where NeMo's conversion discards the remainder instead: every kept utterance is in a shard here).

**NeMo tarred** (`TARRED`/): the layout NeMo's `scripts/speech_recognition/convert_to_tarred_audio_dataset.py`
writes with `--slice_with_offset --force_codec flac`, which its `TarredAudioToCharDataset` and
`TarredAudioToBPEDataset` read: `audio_{k}.tar` (k from 0), `tarred_audio_manifest.json` whose lines keep every key
of the NeMo line (`filters.nemo_line`) with `audio_filepath` set to the member's name, the line's `offset` moved to
`source_audio_offset` (the member is the slice, read from 0) and `shard_id` added, `sharded_manifests/
manifest_{k}.json` (the same lines, per shard) and `metadata.yaml` (NeMo's `ASRTarredDatasetMetadata`). A member
is named as the script names a slice: the audio path with `/` and `.` made `_`, then `_{offset}_{duration}` with
their `.` made `_` (`12.5` -> `12_5`; WebDataset groups members by the name up to its first dot), then `.flac`; a
name already taken (the same slice listed twice) gets `-sub{N}` as the script's unsliced names do. One difference:
the script keeps the source file's extension in the manifest's `audio_filepath` while the member it writes is
`.flac` (its reader matches by the name without extension); here the manifest names the member exactly.

**Lhotse Shar** (`SHAR`/): `cuts.{k:06d}.jsonl.gz` and `recording.{k:06d}.tar` written by lhotse's own
`SharWriter`, read with `CutSet.from_shar(in_dir=...)`: one cut per utterance, its audio in FLAC, one supervision
with the pseudo-label (`custom`: confidence, the input's own text where it had one, and where the audio came from).

Both are written into the run's folder, on a local disk directly and elsewhere (an object store) through a local
staging folder, one shard at a time, uploaded as each shard closes. They count as done only when the run does:
`labelled.txt`, written after them (`pipeline/labels/runs.py`), so a run killed while writing shards leaves a
folder the next run removes.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline import schema
from pipeline.io import Folder
from pipeline.labels.filters import duration_of, nemo_line

NEMO, TARRED, SHAR = "nemo", "nemo_tarred", "shar"
OUTPUT_FORMATS = (NEMO, TARRED, SHAR)
AUDIO_BATCH_ROWS = 32  # utterances whose audio is read in one call (the segments of a file share its reads)


@dataclass
class ShardsWritten:
    """What `write_shards` wrote: per format its folder's URI, the utterances written, and those whose audio could
    not be read again (id -> the error), which the caller rejects."""

    folders: dict[str, str] = field(default_factory=dict)
    shards: int = 0
    utterances: int = 0
    audio_s: float = 0.0
    failed: dict[str, str] = field(default_factory=dict)


def shard_count(utterances: int, max_shard_utterances: int) -> int:
    return max(1, math.ceil(utterances / max_shard_utterances)) if utterances else 0


def shard_ranges(utterances: int, max_shard_utterances: int) -> list[tuple[int, int]]:
    """[start, stop) of each shard: `shard_count` shards whose sizes differ by at most one."""
    shards = shard_count(utterances, max_shard_utterances)
    bounds = [utterances * k // shards for k in range(shards + 1)] if shards else [0]
    return list(zip(bounds[:-1], bounds[1:]))


def _nemo_number(value: float) -> str:
    """`12.34` -> `12_34`, `12` -> `12_0`: how the conversion script writes an offset or duration into a name."""
    parts = str(value).split(".")
    return "_".join(parts if len(parts) == 2 else [*parts, "0"])


def member_base(audio_filepath: str, offset_s: float, duration_s: float) -> str:
    """The tar member's name without extension, as NeMo's conversion names a slice (module docstring)."""
    base, _ = os.path.splitext(audio_filepath)
    base = base.replace("/", "_").replace(".", "_")
    return f"{base}_{_nemo_number(offset_s)}_{_nemo_number(duration_s)}"


def flac_bytes(samples: np.ndarray, sample_rate: int) -> bytes:
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, sample_rate, format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


def read_audio(rows: list[dict[str, Any]], sample_rate: int) -> Iterator[tuple[dict[str, Any], np.ndarray | str]]:
    """Each row's audio (its offset and duration of its file, at `sample_rate`), or the error reading it gave,
    `AUDIO_BATCH_ROWS` at a time (in the rows' order, but for rows whose audio is a member of an input shard,
    which come first in their batch: each shard they name is streamed once, `shard_member_audio`)."""
    from pipeline.io import AudioError, load_audio_batch

    for start in range(0, len(rows), AUDIO_BATCH_ROWS):
        batch = rows[start:start + AUDIO_BATCH_ROWS]
        in_tar = [row for row in batch if row.get(schema.SHARD_MEMBER)]
        if in_tar:
            yield from shard_member_audio(in_tar, sample_rate)
            batch = [row for row in batch if not row.get(schema.SHARD_MEMBER)]
        loaded = load_audio_batch([r[schema.AUDIO_FILEPATH] for r in batch], sample_rate,
                                  [r.get(schema.OFFSET) or 0.0 for r in batch], [duration_of(r) for r in batch],
                                  [r.get(schema.CHANNEL) for r in batch])
        for row, outcome in zip(batch, loaded):
            yield row, (str(outcome) if isinstance(outcome, AudioError) else outcome.samples)


def shard_member_audio(rows: list[dict[str, Any]], sample_rate: int
                       ) -> Iterator[tuple[dict[str, Any], np.ndarray | str]]:
    """The audio of rows whose `audio_filepath` is an input tar shard and `shard_member` its member (as
    `pipeline/stages/shards.py` read them; a NeMo `x-subN` name is the member `x`), or the error reading it gave:
    each shard streamed once (`pipeline/io/shards.py::tar_members`), each member decoded from its bytes."""
    from pipeline.config import InputConfig
    from pipeline.io import AudioError, load_audio_batch
    from pipeline.io.audio import AudioBytes
    from pipeline.io.shards import TarBroken, nemo_member, tar_members

    by_shard: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_shard.setdefault(row[schema.AUDIO_FILEPATH], []).append(row)
    for tar, shard_rows in by_shard.items():
        wanted = {name for row in shard_rows
                  for name in (row[schema.SHARD_MEMBER], nemo_member(row[schema.SHARD_MEMBER]))}
        found: dict[str, bytes | str] = {}
        broken = ""
        for item in tar_members(tar, InputConfig().max_file_bytes):  # the transcription's own bound
            if isinstance(item, TarBroken):
                broken = f"shard unreadable after member {item.last_member!r} ({item.reason})" \
                    if item.last_member else f"shard unreadable ({item.reason})"
            elif item.name in wanted:
                found[item.name] = item.data if item.data is not None else item.problem
        sources: list[bytes | str] = []
        for row in shard_rows:
            member = row[schema.SHARD_MEMBER]
            sources.append(found.get(member, found.get(nemo_member(member), broken or "not in the shard")))
        readable = [k for k, source in enumerate(sources) if isinstance(source, bytes)]
        loaded = load_audio_batch(
            [AudioBytes(f"{tar} member {shard_rows[k][schema.SHARD_MEMBER]}", sources[k]) for k in readable],
            sample_rate, [shard_rows[k].get(schema.OFFSET) or 0.0 for k in readable],
            [duration_of(shard_rows[k]) for k in readable], [shard_rows[k].get(schema.CHANNEL) for k in readable])
        decoded = dict(zip(readable, loaded))
        for k, row in enumerate(shard_rows):
            if k not in decoded:
                yield row, f"{tar}: member {row[schema.SHARD_MEMBER]!r}: {sources[k]}"
            else:
                outcome = decoded[k]
                yield row, (str(outcome) if isinstance(outcome, AudioError) else outcome.samples)


class _Staging:
    """Where a format's files are written before they are in the run's folder: the folder itself on a local disk,
    else a local temporary folder whose files are uploaded (and deleted) as each shard closes."""

    def __init__(self, folder: Folder) -> None:
        from fsspec.implementations.local import LocalFileSystem

        self.folder = folder
        self.local = isinstance(folder.filesystem, LocalFileSystem)
        self.root = folder.root if self.local else tempfile.mkdtemp(prefix="loopscribe-shards-")
        os.makedirs(self.root, exist_ok=True)

    def path(self, name: str) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def publish(self, *names: str) -> None:
        if self.local:
            return
        for name in names:
            path = os.path.join(self.root, name)
            if os.path.exists(path):
                self.folder.put(name, path)
                os.remove(path)

    def close(self) -> None:
        if not self.local:
            shutil.rmtree(self.root, ignore_errors=True)


def _metadata_yaml(shards: int, utterances: int) -> str:
    """NeMo's `ASRTarredDatasetMetadata` as the conversion script saves it (OmegaConf, keys in its order)."""
    import yaml

    config = {"num_shards": shards, "shuffle": False, "max_duration": None, "min_duration": None,
              "shuffle_seed": None, "sort_in_shards": False, "slice_with_offset": True, "shard_manifests": True,
              "keep_files_together": False, "force_codec": "flac", "use_lhotse": False, "use_bucketing": False,
              "num_buckets": None, "bucket_duration_bins": None}
    metadata = {"created_datetime": time.strftime("%m-%d-%Y %H-%M-%S"), "version": 0,
                "num_samples_per_shard": utterances // shards if shards else 0, "is_concatenated_manifest": False,
                "dataset_config": config, "history": []}
    return yaml.safe_dump(metadata, sort_keys=False)


def _cut(row: dict[str, Any], samples: np.ndarray, sample_rate: int) -> Any:
    """A lhotse MonoCut of the utterance, its audio in memory (SharWriter encodes it into the shard)."""
    import soundfile
    from lhotse import MonoCut, Recording, SupervisionSegment

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, sample_rate, format="WAV", subtype="PCM_16")
    cut_id = row[schema.UTTERANCE_ID]
    recording = Recording.from_bytes(buffer.getvalue(), recording_id=cut_id)
    custom: dict[str, Any] = {"confidence": row[schema.CONFIDENCE], "source": row[schema.AUDIO_FILEPATH],
                              "source_offset": float(row.get(schema.OFFSET) or 0.0)}
    if row.get(schema.REFERENCE_TEXT):
        custom["orig_text"] = row[schema.REFERENCE_TEXT]
    supervision = SupervisionSegment(id=f"{cut_id}-sup", recording_id=cut_id, start=0.0,
                                     duration=recording.duration, channel=0, text=row[schema.TEXT], custom=custom)
    return MonoCut(id=cut_id, start=0.0, duration=recording.duration, channel=0, recording=recording,
                   supervisions=[supervision])


def write_shards(rows: list[dict[str, Any]], run_folder: Folder, formats: tuple[str, ...], sample_rate: int,
                 max_shard_utterances: int, say: Callable[[str], None] = lambda line: None) -> ShardsWritten:
    """The kept utterances `rows` (output-shaped rows, segments included) with their audio, in each sharded
    format of `formats` (`TARRED`, `SHAR`), under `run_folder`/<format>/ (module docstring)."""
    from lhotse.shar import SharWriter

    wanted = [f for f in formats if f in (TARRED, SHAR)]
    written = ShardsWritten()
    if not wanted:
        return written
    stagings = {f: _Staging(run_folder.child(f)) for f in wanted}
    tarred_lines: list[dict[str, Any]] = []
    taken: dict[str, int] = {}
    ranges = shard_ranges(len(rows), max_shard_utterances)
    try:
        for shard_id, (start, stop) in enumerate(ranges):
            shard_lines: list[dict[str, Any]] = []
            tar = (tarfile.open(stagings[TARRED].path(f"audio_{shard_id}.tar"), mode="w")
                   if TARRED in stagings else None)
            shar = (SharWriter(stagings[SHAR].root, fields={"recording": "flac"}, shard_size=stop - start,
                               shard_offset=shard_id) if SHAR in stagings else None)
            for row, audio in read_audio(rows[start:stop], sample_rate):
                if isinstance(audio, str):
                    written.failed[row[schema.UTTERANCE_ID]] = audio
                    continue
                written.utterances += 1
                written.audio_s += len(audio) / sample_rate
                if tar is not None:
                    line = nemo_line(row)
                    offset = line.pop("offset", 0.0)
                    base = member_base(line["audio_filepath"], offset, line["duration"])
                    seen = taken.get(base, 0)
                    taken[base] = seen + 1
                    member = f"{base}-sub{seen}.flac" if seen else f"{base}.flac"
                    data = flac_bytes(audio, sample_rate)
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                    shard_lines.append({**line, "source_audio_offset": offset, "audio_filepath": member,
                                        "shard_id": shard_id})
                if shar is not None:
                    shar.write(_cut(row, audio, sample_rate))
            if tar is not None:
                tar.close()
                staging = stagings[TARRED]
                with open(staging.path(f"sharded_manifests/manifest_{shard_id}.json"), "w", encoding="utf-8") as out:
                    out.write("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in shard_lines))
                staging.publish(f"audio_{shard_id}.tar", f"sharded_manifests/manifest_{shard_id}.json")
                tarred_lines += shard_lines
            if shar is not None:
                shar.close()
                stagings[SHAR].publish(f"cuts.{shard_id:06d}.jsonl.gz", f"recording.{shard_id:06d}.tar")
            say(f"shard {shard_id + 1}/{len(ranges)} written ({', '.join(wanted)})")
        if TARRED in stagings:
            staging = stagings[TARRED]
            with open(staging.path("tarred_audio_manifest.json"), "w", encoding="utf-8") as out:
                out.write("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in tarred_lines))
            with open(staging.path("metadata.yaml"), "w", encoding="utf-8") as out:
                out.write(_metadata_yaml(len(ranges), len(tarred_lines)))
            staging.publish("tarred_audio_manifest.json", "metadata.yaml")
    finally:
        for staging in stagings.values():
            staging.close()
    written.folders = {f: run_folder.child(f).uri for f in wanted}
    written.shards = len(ranges)
    return written
