"""Manifests in, one row per utterance out: NeMo JSON-lines and Lhotse cuts, from any fsspec URI.

- NeMo: one JSON object per line with `audio_filepath` and `duration` (seconds), optional `offset` and
  `text`; every other key is kept, as JSON, in the `extra` column.
- Lhotse: cut manifests (`.jsonl` or `.jsonl.gz`), one cut per line, read as JSON without importing lhotse
  (which reads `s3://` through smart_open, not fsspec): the audio is the recording's first file source, the
  offset is the cut's `start`, the text is its supervisions' texts joined by spaces.

Lines are told apart by their keys, so a file may mix both. A relative audio path is resolved against the
manifest's folder. A line that cannot be used becomes an error row naming the manifest and line, never an
exception: nothing is lost. Utterance ids are stable across reruns: a Lhotse cut's own id, or for a NeMo line
a hash of the manifest URI and line number.
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
from collections.abc import Iterable, Iterator
from typing import Any

import fsspec

from pipeline import schema

NEMO_KEYS = ("audio_filepath", "duration", "offset", "text")


def expand_manifest_uris(patterns: Iterable[str]) -> list[str]:
    """Paths, URIs or globs -> the manifest URIs they name, in order, each once. A pattern that names
    nothing is an error (a typo should not silently transcribe nothing)."""
    uris: list[str] = []
    for pattern in patterns:
        filesystem, path = fsspec.core.url_to_fs(pattern)
        matches = sorted(filesystem.glob(path)) if fsspec.core.has_magic(path) else [path]
        matches = [m for m in matches if filesystem.isfile(m)]
        if not matches:
            raise FileNotFoundError(f"no manifest matches {pattern!r}")
        for match in matches:
            uri = match if "://" not in pattern else filesystem.unstrip_protocol(match)
            if uri not in uris:
                uris.append(uri)
    return uris


def read_manifest(uri: str) -> Iterator[dict[str, Any]]:
    """Every non-empty line of one manifest as a row (see `parse_line`). Gzip is recognized by suffix."""
    with fsspec.open(uri, "rt", encoding="utf-8", compression="infer") as handle:
        for line_number, line in enumerate(handle, start=1):
            if line.strip():
                yield parse_line(line, uri, line_number)


def utterance_id_for(uri: str, line_number: int) -> str:
    return hashlib.sha1(f"{uri}\n{line_number}".encode()).hexdigest()[:20]


def resolve_audio_path(audio_path: str, manifest_uri: str) -> str:
    """An absolute path or a URI stays as it is; a relative path is taken from the manifest's folder."""
    if "://" in audio_path or audio_path.startswith("/"):
        return audio_path
    return posixpath.join(posixpath.dirname(manifest_uri), audio_path)


def _row(uri: str, line_number: int, utterance_id: str, **values: Any) -> dict[str, Any]:
    row = {
        schema.UTTERANCE_ID: utterance_id,
        schema.MANIFEST: uri,
        schema.LINE: line_number,
        schema.AUDIO_FILEPATH: "",
        schema.OFFSET: 0.0,
        schema.DURATION: 0.0,
        schema.REFERENCE_TEXT: "",
        schema.EXTRA: "{}",
        schema.STATUS: schema.STATUS_OK,
        schema.ERROR: "",
    }
    row.update(values)
    return row


def _error_row(uri: str, line_number: int, message: str, utterance_id: str | None = None) -> dict[str, Any]:
    return _row(uri, line_number, utterance_id or utterance_id_for(uri, line_number),
                **{schema.STATUS: schema.STATUS_ERROR, schema.ERROR: f"{uri}, line {line_number}: {message}"})


def _seconds(value: Any, name: str, required: bool) -> float:
    if value is None:
        if required:
            raise ValueError(f"missing key {name!r}")
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name!r} must be a number of seconds, got {value!r}")
    if value < 0:
        raise ValueError(f"{name!r} must not be negative, got {value!r}")
    return float(value)


def parse_line(line: str, uri: str, line_number: int) -> dict[str, Any]:
    """One manifest line -> one row with the columns of `schema.INPUT_COLUMNS`; an error row if unusable."""
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as error:
        return _error_row(uri, line_number, f"malformed JSON ({error.msg} at column {error.colno})")
    if not isinstance(entry, dict):
        return _error_row(uri, line_number, f"expected a JSON object, got {type(entry).__name__}")
    try:
        if "recording" in entry or "supervisions" in entry:
            return _parse_lhotse_cut(entry, uri, line_number)
        return _parse_nemo_entry(entry, uri, line_number)
    except (ValueError, TypeError, KeyError, IndexError) as error:
        is_cut = "recording" in entry or "supervisions" in entry
        cut_id = entry.get("id") if is_cut and isinstance(entry.get("id"), str) and entry["id"] else None
        return _error_row(uri, line_number, str(error), utterance_id=cut_id)


def _parse_nemo_entry(entry: dict, uri: str, line_number: int) -> dict[str, Any]:
    audio = entry.get("audio_filepath")
    if not isinstance(audio, str) or not audio:
        raise ValueError("missing key 'audio_filepath'" if audio is None else
                         f"'audio_filepath' must be a non-empty string, got {audio!r}")
    text = entry.get("text", "")
    if not isinstance(text, str):
        raise ValueError(f"'text' must be a string, got {text!r}")
    extra = {k: v for k, v in entry.items() if k not in NEMO_KEYS}
    return _row(
        uri, line_number, utterance_id_for(uri, line_number),
        **{
            schema.AUDIO_FILEPATH: resolve_audio_path(audio, uri),
            schema.OFFSET: _seconds(entry.get("offset"), "offset", required=False),
            schema.DURATION: _seconds(entry.get("duration"), "duration", required=True),
            schema.REFERENCE_TEXT: text,
            schema.EXTRA: json.dumps(extra, ensure_ascii=False, sort_keys=True),
        },
    )


def _parse_lhotse_cut(cut: dict, uri: str, line_number: int) -> dict[str, Any]:
    cut_id = cut.get("id")
    if not isinstance(cut_id, str) or not cut_id:
        raise ValueError("a Lhotse cut needs a string 'id'")
    recording = cut.get("recording")
    if not isinstance(recording, dict):
        raise ValueError(f"cut {cut_id}: missing 'recording' (only cuts with recordings are supported)")
    sources = recording.get("sources") or []
    files = [s for s in sources if isinstance(s, dict) and s.get("type") in ("file", "url")]
    if not files:
        kinds = sorted({str(s.get("type")) for s in sources if isinstance(s, dict)})
        raise ValueError(f"cut {cut_id}: no file or url audio source (found {kinds or 'none'})")
    supervisions = cut.get("supervisions") or []
    text = " ".join(s.get("text", "") for s in supervisions if isinstance(s, dict) and s.get("text"))
    extra = {k: v for k, v in cut.items() if k not in ("id", "start", "duration", "recording", "supervisions")}
    return _row(
        uri, line_number, cut_id,
        **{
            schema.AUDIO_FILEPATH: resolve_audio_path(files[0]["source"], uri),
            schema.OFFSET: _seconds(cut.get("start", 0.0), "start", required=False),
            schema.DURATION: _seconds(cut.get("duration"), "duration", required=True),
            schema.REFERENCE_TEXT: text,
            schema.EXTRA: json.dumps(extra, ensure_ascii=False, sort_keys=True),
        },
    )
