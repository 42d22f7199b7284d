"""Sharded corpora in: NeMo tarred audio datasets, Lhotse Shar and WebDataset tars, found from what `--manifest`
names (`sharded_corpus`), listed as the units the read stage reads (`ShardListing`), and their tars streamed once,
member by member (`tar_members`).

Formats (docs/shards.md):
- NeMo tarred (`NEMO_TARRED`; `convert_to_tarred_audio_dataset.py`'s layout): `tarred_audio_manifest.json`, whose
  lines keep every original key plus `shard_id`, `audio_filepath` being the member's name (`base-subN.ext` names the
  member `base.ext` at another offset, as NeMo's and Lhotse's readers take it), beside `audio_0.tar` ...
  `audio_N.tar`. Named by the manifest (or a brace range of `sharded_manifests/manifest_{id}.json`) with
  `--tarred-audio` naming the shards, or by its folder or `metadata.yaml`: then `sharded_manifests/` is read where
  it exists (one listing a shard), else the whole manifest, and the shards are the folder's `audio_<id>.tar`.
  A line's shard is the tar whose name ends in its `shard_id` (`audio_7.tar`), or the 8th where no name carries a
  number.
- Lhotse Shar (`SHAR`): a folder or URI holding `cuts.NNNNNN.jsonl.gz` beside `recording.NNNNNN.tar` (members
  `{cut_id}.<ext>`, each followed by `{cut_id}.json`); on a store that cannot be listed, the cuts files named
  directly (a brace range: `gs://b/shar/cuts.{000000..000031}.jsonl.gz`), each with its `recording.NNNNNN.tar`
  beside it.
- WebDataset (`WEBDATASET`): tar URLs (brace ranges); a sample is the members sharing a name up to its first dot
  (`utt1.flac`, `utt1.json`); every audio member is a row, its text from `{key}.json` (NeMo-like keys: `text`,
  optionally `duration` and `offset`; the rest kept in `extra`) or `{key}.txt`. Nothing lists a WebDataset's rows
  before its tars are read, so their count is unknown until then and each rerun reads every tar again (skipping
  members committed already without decoding them).

Brace ranges: `audio_{0..127}.tar` and, for shells that eat braces, NeMo's `audio__OP_0..127_CL_.tar`, both
expanded by braceexpand (`expand_braces`).

Streaming: a tar is read once from its start (`tarfile` in stream mode `r|*`) through fsspec, never downloaded whole
nor written to a temporary file; a member is held in memory only while its rows are decoded. What a broken tar
gives (`tar_members`): the members before the break, then one `TarBroken` naming the last member read and the cause.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import braceexpand
import fsspec

from pipeline.io.remote import classify_failure
from pipeline.io.uris import local_path

NEMO_TARRED = "nemo_tarred"
SHAR = "shar"
WEBDATASET = "webdataset"
FORMATS = (NEMO_TARRED, SHAR, WEBDATASET)

# what a WebDataset member's extension must be to be audio (lowercase, without the dot): a row each
AUDIO_EXTENSIONS = frozenset({"flac", "wav", "mp3", "opus", "ogg", "m4a", "aiff", "aif", "au", "sph", "w64", "caf"})
READ_BLOCK_BYTES = 8 << 20  # fsspec's read-ahead block of a streamed tar: a few requests per shard, bounded memory
NEMO_MANIFEST = "tarred_audio_manifest.json"
NEMO_METADATA = "metadata.yaml"
NEMO_SHARDED_MANIFESTS = "sharded_manifests"
_TAR_NUMBER = re.compile(r"(\d+)\.tar$")
# names taken for loose manifests without looking: only other names are looked at as folders (a request each)
_MANIFEST_SUFFIXES = (".json", ".jsonl", ".gz", ".bz2", ".xz", ".zst", ".txt")
_SHAR_CUTS = re.compile(r"^cuts\.(\d+)\.jsonl(\.gz)?$")
_NEMO_SHARD_MANIFEST = re.compile(r"^manifest_(\d+)\.json$")
_SUB_SUFFIX = re.compile(r"^(?P<stem>.+)-sub\d+(?P<ext>\.\w+)?$")  # NeMo's repeats of one member at other offsets
_SAMPLE_KEY = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset's: the name up to its first dot, and the rest


class ShardsError(ValueError):
    """A sharded corpus that cannot be read as named (before any row is read): the message says why."""


def expand_braces(pattern: str) -> list[str]:
    """`pattern` with its brace ranges expanded, in order: `audio_{0..2}.tar` and `audio__OP_0..2_CL_.tar` both
    give `audio_0.tar`, `audio_1.tar`, `audio_2.tar`; a name without braces is itself."""
    pattern = pattern.replace("_OP_", "{").replace("_CL_", "}")
    return list(braceexpand.braceexpand(pattern, escape=False))


def nemo_member(audio_filepath: str) -> str:
    """The tar member a NeMo tarred manifest's `audio_filepath` names: `x-sub2.wav` is `x.wav` (a repeat of one
    file at another offset, which the conversion does not store twice)."""
    found = _SUB_SUFFIX.match(audio_filepath)
    return audio_filepath if found is None else found.group("stem") + (found.group("ext") or "")


def sample_key(member: str) -> tuple[str, str] | None:
    """A WebDataset member's (sample key, field): the name up to its first dot, and the rest; None for a name
    without a dot."""
    found = _SAMPLE_KEY.match(member)
    return None if found is None else (found.group(1), found.group(2))


def shard_id_of(tar_uri: str) -> int | None:
    """The number a shard's name ends with (`audio_17.tar` -> 17), or None."""
    found = _TAR_NUMBER.search(tar_uri.split("?", 1)[0])
    return None if found is None else int(found.group(1))


@dataclass(frozen=True)
class ShardListing:
    """What one call of the read stage reads: a listing of rows and the shards they name.

    NeMo tarred: `listing` is a manifest, `tars` shard id -> tar URI (every shard it may name). Shar: `listing` is a
    cuts file, `tars` {0: its recording tar}. WebDataset: `listing` is None, `tars` {0: the tar}: its rows are the
    tar's members.
    """

    format: str
    listing: str | None
    tars: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"format": self.format, "listing": self.listing,
                           "tars": [[shard, uri] for shard, uri in sorted(self.tars.items())]})

    @classmethod
    def from_json(cls, text: str) -> ShardListing:
        values = json.loads(text)
        return cls(values["format"], values["listing"], {int(shard): uri for shard, uri in values["tars"]})

    @property
    def name(self) -> str:
        """What error rows and messages call it: the listing, or the tar."""
        return self.listing or next(iter(self.tars.values()), "")


def _filesystem(uri: str) -> tuple[Any, str]:
    path = local_path(uri)
    if path is not None:
        return fsspec.filesystem("file"), path
    return fsspec.core.url_to_fs(uri)


def _join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name


def _listed(folder: str) -> list[str]:
    """The names (not paths) of the files directly in `folder`, sorted; [] where it is not a folder."""
    filesystem, path = _filesystem(folder)
    try:
        if not filesystem.isdir(path):
            return []
        return sorted(posixpath.basename(entry.rstrip("/")) for entry in filesystem.ls(path, detail=False))
    except FileNotFoundError:
        return []
    except Exception as error:  # noqa: BLE001  (any backend's failure: said in words)
        failure = classify_failure(error)
        raise ShardsError(f"{folder}: cannot list the folder "
                          f"({failure.describe() if failure else f'{type(error).__name__}: {error}'})") from None


def _is_tar(uri: str) -> bool:
    return uri.split("?", 1)[0].lower().endswith(".tar")


def tars_by_shard(tar_uris: list[str]) -> dict[int, str]:
    """Shard id -> tar URI: the number each name ends with where every name has one (NeMo's `audio_<id>.tar`), else
    the position in the list."""
    ids = [shard_id_of(uri) for uri in tar_uris]
    if all(shard is not None for shard in ids) and len(set(ids)) == len(ids):
        return dict(zip(ids, tar_uris))  # type: ignore[arg-type]
    return dict(enumerate(tar_uris))


def _nemo_folder(folder: str, names: list[str]) -> list[ShardListing]:
    tars = tars_by_shard([_join(folder, name) for name in names if re.fullmatch(r"audio_\d+\.tar", name)])
    sharded = _listed(_join(folder, NEMO_SHARDED_MANIFESTS)) if NEMO_SHARDED_MANIFESTS in names else []
    per_shard = [(int(found.group(1)), name) for name in sharded if (found := _NEMO_SHARD_MANIFEST.match(name))]
    if per_shard:  # one listing a shard: the read stage never holds the whole manifest
        return [ShardListing(NEMO_TARRED, _join(_join(folder, NEMO_SHARDED_MANIFESTS), name),
                             {shard: tars[shard]} if shard in tars else {}) for shard, name in sorted(per_shard)]
    if NEMO_MANIFEST not in names:
        raise ShardsError(f"{folder}: a NeMo tarred set needs {NEMO_MANIFEST} or {NEMO_SHARDED_MANIFESTS}/ beside "
                          f"its audio_<id>.tar shards")
    return [ShardListing(NEMO_TARRED, _join(folder, NEMO_MANIFEST), tars)]


def _shar_cuts(cuts_uris: list[str]) -> list[ShardListing]:
    listings = []
    for uri in cuts_uris:
        folder, name = uri.rsplit("/", 1) if "/" in uri else (".", uri)
        found = _SHAR_CUTS.match(name)
        if found is None:
            raise ShardsError(f"{uri}: not a Shar cuts file (cuts.NNNNNN.jsonl.gz)")
        listings.append(ShardListing(SHAR, uri, {0: _join(folder, f"recording.{found.group(1)}.tar")}))
    return listings


def _one_input(pattern: str) -> tuple[str, list[ShardListing]] | None:
    """What one `--manifest` value is, where it is sharded: (its format, its listings); None for a loose manifest."""
    uris = expand_braces(pattern)
    if all(_is_tar(uri) for uri in uris):
        return WEBDATASET, [ShardListing(WEBDATASET, None, {0: uri}) for uri in uris]
    names = [uri.rstrip("/").rsplit("/", 1)[-1] for uri in uris]
    if all(_SHAR_CUTS.match(name) for name in names):
        return SHAR, _shar_cuts(uris)
    if len(uris) == 1 and names[0] == NEMO_METADATA:
        folder = uris[0].rstrip("/").rsplit("/", 1)[0] if "/" in uris[0] else "."
        return NEMO_TARRED, _nemo_folder(folder, _listed(folder))
    if len(uris) == 1 and not names[0].lower().endswith(_MANIFEST_SUFFIXES) and not _looks_like_file(uris[0]):
        entries = _listed(uris[0])
        if NEMO_MANIFEST in entries or NEMO_METADATA in entries or NEMO_SHARDED_MANIFESTS in entries:
            return NEMO_TARRED, _nemo_folder(uris[0].rstrip("/"), entries)
        cuts = [name for name in entries if _SHAR_CUTS.match(name)]
        if cuts:
            return SHAR, _shar_cuts([_join(uris[0].rstrip("/"), name) for name in cuts])
        if entries:
            raise ShardsError(f"{uris[0]}: a folder, but neither a NeMo tarred set ({NEMO_MANIFEST}, audio_<id>.tar) "
                              "nor a Lhotse Shar (cuts.NNNNNN.jsonl.gz, recording.NNNNNN.tar)")
    return None


def _looks_like_file(uri: str) -> bool:
    path = local_path(uri)
    return path is not None and os.path.isfile(path)


def sharded_corpus(manifests: tuple[str, ...] | list[str], tarred_audio: tuple[str, ...] | list[str] = ()
                   ) -> list[ShardListing] | None:
    """The read stage's listings of the sharded corpora `manifests` name (see the module docstring), or None where
    every manifest is a loose one. `tarred_audio` (`--tarred-audio`) makes every manifest a NeMo tarred manifest
    (brace ranges of sharded manifests allowed) with these shards. A job naming loose manifests and sharded corpora
    together is refused (`ShardsError`), as is `--tarred-audio` naming no tar."""
    if tarred_audio:
        tar_uris = [uri for pattern in tarred_audio for uri in expand_braces(pattern)]
        if not tar_uris or not all(_is_tar(uri) for uri in tar_uris):
            raise ShardsError(f"--tarred-audio must name .tar shards (brace ranges allowed), got "
                              f"{', '.join(tarred_audio)}")
        tars = tars_by_shard(tar_uris)
        listings = []
        for pattern in manifests:
            for uri in expand_braces(pattern):
                found = _NEMO_SHARD_MANIFEST.match(uri.rsplit("/", 1)[-1])
                shard = int(found.group(1)) if found else None
                listings.append(ShardListing(NEMO_TARRED, uri, {shard: tars[shard]} if shard in tars else
                                             ({} if shard is not None else tars)))
        return listings
    kinds = [(pattern, _one_input(pattern)) for pattern in manifests]
    sharded = [found for _, found in kinds if found is not None]
    if not sharded:
        return None
    loose = [pattern for pattern, found in kinds if found is None]
    if loose:
        raise ShardsError(f"loose manifests ({', '.join(loose[:3])}) and sharded corpora "
                          f"({', '.join(p for p, f in kinds if f is not None)[:200]}) in one job: run them as two jobs "
                          "(into two outputs, or one after the other into the same output)")
    return [listing for _, listings in sharded for listing in listings]


# ---------------------------------------------------------------------------------------------------- streaming

@dataclass(frozen=True)
class TarMember:
    """A regular file of a tar: its name, and its bytes or why they could not be used (too large)."""

    name: str
    data: bytes | None
    problem: str | None = None


@dataclass(frozen=True)
class TarBroken:
    """Where a tar could not be read on: after `last_member` (None: before its first), and why."""

    last_member: str | None
    reason: str

    def describe(self, tar_uri: str) -> str:
        if self.last_member is None:
            return f"{tar_uri}: {self.reason}"
        return f"{tar_uri}: shard truncated or corrupt after member {self.last_member} ({self.reason})"


def _open_stream(uri: str) -> Any:
    path = local_path(uri)
    if path is not None:
        return open(path, "rb")  # noqa: SIM115  (closed by tar_members)
    filesystem, inner = fsspec.core.url_to_fs(uri)
    return filesystem.open(inner, "rb", block_size=READ_BLOCK_BYTES, cache_type="readahead")


def tar_members(uri: str, max_member_bytes: int) -> Iterator[TarMember | TarBroken]:
    """The regular files of the tar at `uri`, in order, each read whole (a member larger than `max_member_bytes` is
    skipped unread and given a `problem`), from one stream; where the tar cannot be opened or read on, one
    `TarBroken` last. Never raises for what the tar or its storage does."""
    last: str | None = None
    try:
        stream = _open_stream(uri)
    except Exception as error:  # noqa: BLE001
        yield TarBroken(None, f"cannot open the shard ({_why(error)})")
        return
    try:
        with tarfile.open(fileobj=stream, mode="r|*") as archive:
            for info in archive:
                if not info.isfile():
                    continue
                if info.size > max_member_bytes:
                    yield TarMember(info.name, None, f"member of {info.size} bytes, larger than input.max_file_bytes "
                                                     f"({max_member_bytes}, --max-file-bytes)")
                else:
                    handle = archive.extractfile(info)
                    data = handle.read() if handle is not None else b""
                    if len(data) != info.size:
                        raise EOFError(f"member {info.name} cut short: {len(data)} of {info.size} bytes")
                    yield TarMember(info.name, data)
                last = info.name
    except Exception as error:  # noqa: BLE001  (tarfile.ReadError, EOFError, zlib errors, storage failures)
        yield TarBroken(last, _why(error) if last is not None or not _empty_error(error) else "empty or not a tar")
    finally:
        stream.close()


def _empty_error(error: BaseException) -> bool:
    return isinstance(error, tarfile.ReadError) and "empty" in str(error)


def _why(error: BaseException) -> str:
    failure = classify_failure(error)
    if failure is not None:
        return failure.describe()
    if isinstance(error, FileNotFoundError):
        return "file not found"
    return f"{type(error).__name__}: {error}".rstrip(": ")


__all__ = ["AUDIO_EXTENSIONS", "FORMATS", "NEMO_TARRED", "SHAR", "WEBDATASET", "ShardListing", "ShardsError",
           "TarBroken", "TarMember", "expand_braces", "nemo_member", "sample_key", "shard_id_of", "sharded_corpus",
           "tar_members", "tars_by_shard"]
