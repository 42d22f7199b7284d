"""Manifests in, one row per utterance out: NeMo JSON-lines and Lhotse cuts, local or from any fsspec URI.

Formats. Lines are told apart by their keys, so a file may mix both.
- NeMo: one JSON object per line with `audio_filepath` and `duration` (seconds), optional `offset` and `text`
  (null means absent for these two). The first of `id`, `utterance_id`, `utt_id` that holds a non-empty string
  or an integer is the line's own id (`source_id`); every other key is kept, as JSON, in the `extra` column.
- Lhotse: cut manifests, one cut per line, read as JSON without importing lhotse (which reads `s3://` through
  smart_open, not fsspec). The cut's `id` is its `source_id`, `start` its offset, its supervisions' texts
  joined by spaces its text, its `custom.phrases` its phrase list. The audio is the recording's first file or
  url source, or where the cut names a `channel`, the source whose `channels` hold it: `channel` is then that
  channel's index in the source's `channels` (null where the source has one channel). A cut naming several
  channels decodes all channels of one source mixed down; several channels that are not all of one source's are
  an error row.

Values kept as they are, never costing the row its transcript:
- a reference `text` (a NeMo line's `text`, a supervision's) that is not a string is kept as its JSON text
  (`42` -> "42", `["a", "b"]` -> '["a", "b"]'); unpaired surrogates (JSON escapes) in it are kept as their escapes
  (`"\\ud800"`), as UTF-8 cannot hold them;
- `NaN`, `Infinity` and `-Infinity` (which Python's JSON reader accepts) in the keys kept in `extra` are written as
  the strings "NaN", "Infinity" and "-Infinity", so that `extra` is always valid JSON (as a number they would make
  it unreadable to every strict JSON reader).
A line nested deeper than `MAX_JSON_DEPTH` levels (100) is an error row saying so ("JSON nested 5000 levels deep,
deeper than the 100 levels loopscribe reads"), valid JSON or not: no manifest needs more, and a bound of its own
makes the answer the same in every process (Python's reader stops near 1,000, depending on its stack).

Phrases. A row's own phrase list to boost (`phrases`: a NeMo line's key, a Lhotse cut's `custom` key; see
docs/decoding.md) is a list of phrases, each a string (`"anna boyle"`, or `"anna boyle<TAB>2.5"` with its own
weight, as in a `--phrases` file) or a `[phrase, weight]` pair; a weight is a number > 0. It goes to the
`phrases` column as [{text, weight}] (whitespace runs made one space; null or [] is no list), and stays in
`extra` as written. A value that is not such a list, an empty phrase, a bad weight, more than `MAX_ROW_PHRASES`
phrases or a phrase longer than `MAX_PHRASE_CHARS` makes the line an error row naming the item; whether the
model's tokenizer can write each phrase is checked by the stage that decodes.

Identity. A row's `utterance_id` is `utterance_identity` of what the utterance is: resolved audio URI, offset,
duration, channel and the manifest's own id. Where the manifest lists it does not count, so an edited or
re-sorted manifest resumes right; two lines saying the same thing are one utterance (same id), and two cuts
sharing a Lhotse id but not their audio, offset, duration or channel are two. A line that cannot be used has no
content to hash: its id hashes the manifest URI and the line's bytes, so it keeps its id when lines are added
above it; its `source_id` is filled where the line had a usable id.

Reading. A manifest is read as bytes, decompressed as its suffix says (`.gz`, `.bz2`, `.xz`, ...), and cut at
"\n" (a "\r" before it is dropped). Lines are UTF-8, each decoded on its own; a UTF-8 BOM at the start of a line
is skipped, and a file starting with a UTF-16 BOM is read as UTF-16. Blank lines (whitespace only) are skipped
but counted, so `line` is the line's number in the file. `read_manifest` never raises; what cannot be used is
an error row, its `error` f"{uri}, line {n}: {why}":
- a line that is not UTF-8: "not UTF-8 (byte 0xff at column 17)", columns counting bytes; a NUL byte, malformed
  or truncated JSON (columns counting characters; a line ending inside the JSON value "ends early"), JSON nested
  deeper than `MAX_JSON_DEPTH`, a value that is not an object, a key missing, null or of the wrong type, a
  negative or non-finite number of seconds: one row for that line, every other line unaffected;
- compressed data cut short or corrupt: every complete line before the break, then one row "compressed data
  broken after line 41 (EOFError: ...)"; a file named `.gz` that is not gzip: one row "not a gzip file ...";
- a binary file (an audio file given as a manifest): one row "not a text manifest: ...". A manifest is binary
  when its first non-blank line does not start with "{" and holds, in its first 8 KiB, a control byte other
  than tab, CR, LF, VT, FF, or bytes that are not UTF-8; a file whose first line is JSON is read line by line;
- a manifest that cannot be opened (missing, unreadable, a directory, not a regular file): one row
  "cannot open the manifest (...)".
These rows of a whole file are at line 1, at the first non-blank line (binary) or after the last complete line
(a break), and their ids hash the manifest URI and what failed.

Paths. A relative audio path is taken from the manifest's folder, and "." and ".." are resolved like a
filesystem on every backend, never above an object store's bucket (`resolve_audio_path`). `file://` URIs are
local paths. A local manifest name is a glob only where no file has that name (`expand_manifest_uris`), and
is never parsed as an fsspec chain: `x::y.json` is that file.

Sharded corpora (`InShards`; pipeline/io/shards.py, docs/shards.md). A NeMo tarred manifest's lines and a Lhotse
Shar cuts file's cuts name a member of a tar shard: read with `shards`, a row's `audio_filepath` is the shard and
`shard_member` the member (a NeMo line's `audio_filepath`, `-subN` taken off; a cut's id), and its id hashes the shard
and member instead of a path (`member_identity`). A NeMo line also needs an integer `shard_id` naming one of the
shards (else an error row naming it); a Shar cut's offset is 0 and its channel null (its tar holds the cut's audio).

`sniff_manifest` looks at a manifest's first MiB before a job starts, to name manifests with nothing to read.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from decoders.boosting import PhraseListError, split_phrase
from pipeline import schema
from pipeline.io.manifest_file import LIMIT_REACHED, SURROGATE, Broken, cause, decode_line, manifest_lines
from pipeline.io.shards import nemo_member
from pipeline.io.uris import expand_manifest_uris, resolve_audio_path

__all__ = ["InShards", "expand_manifest_uris", "member_identity", "parse_line", "read_manifest", "resolve_audio_path",
           "sniff_manifest", "utterance_identity"]

NEMO_KEYS = ("audio_filepath", "duration", "offset", "text")
NEMO_ID_KEYS = ("id", "utterance_id", "utt_id")  # the first usable one is a NeMo line's own id
LHOTSE_KEYS = ("id", "start", "duration", "channel", "recording", "supervisions")  # what a cut's row uses
SNIFF_BYTES = 1 << 20  # decompressed bytes `sniff_manifest` reads at most
MAX_ROW_PHRASES = 10_000  # phrases a row may list (`phrases`): a bound on what one line can make an actor build
MAX_PHRASE_CHARS = 1_000  # characters of one of them
MAX_JSON_DEPTH = 100  # nesting levels a line may have (see the module docstring)
IDENTITY_HEX_DIGITS = 32
_SHOWN_CHARS = 80  # a value quoted in an error message is cut to this
# a JSON string (to its end, or the line's: one pass, no backtracking), or a bracket
_JSON_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)
_NON_FINITE_TEXT = {math.inf: "Infinity", -math.inf: "-Infinity"}


# ---------------------------------------------------------------------------------------------------- identity

def utterance_identity(audio_uri: str, offset_s: float, duration_s: float, channel: int | None,
                       given_id: str | None) -> str:
    """The id of the utterance these five values describe: the first 32 hex digits of the SHA-1 of their
    canonical JSON, seconds rounded to microseconds (so 1.5 and 1.5000000001 agree, and -0.0 is 0.0)."""
    canonical = json.dumps([audio_uri, round(float(offset_s), 6) + 0.0, round(float(duration_s), 6) + 0.0, channel,
                            given_id], ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha1(canonical.encode("ascii")).hexdigest()[:IDENTITY_HEX_DIGITS]


def _error_identity(uri: str, what: str, raw: bytes = b"") -> str:
    """The id of an error row: a hash of the manifest URI, what failed ("line", or a problem of the whole file)
    and the line's bytes, never its number."""
    digest = hashlib.sha1(json.dumps([what, uri], ensure_ascii=True).encode("ascii") + b"\n")
    digest.update(raw)
    return digest.hexdigest()[:IDENTITY_HEX_DIGITS]



def read_manifest(uri: str, shards: InShards | None = None) -> Iterator[dict[str, Any]]:
    """Every non-blank line of one manifest as a row with the columns of `schema.INPUT_COLUMNS` (see
    `parse_line`), plus one error row where the file cannot be opened or read on, or is binary (see the
    module docstring). `shards`: the manifest lists a sharded corpus's members (`InShards`). Never raises."""
    for item in manifest_lines(uri):
        if isinstance(item, Broken):
            yield _error_row(uri, item.line_number, item.message, _error_identity(uri, item.what))
            continue
        line_number, line = item
        text, raw, problem = decode_line(line)
        if problem is not None:
            yield _error_row(uri, line_number, problem, _error_identity(uri, "line", raw))
        elif text.strip():
            yield parse_line(text, uri, line_number, raw, shards)


def sniff_manifest(uri: str) -> str | None:
    """A one-line problem naming the manifest, or None where it looks usable, from at most its first MiB
    (decompressed): it cannot be opened; it is binary; its compression is broken before its first non-blank
    line; it has no non-blank line ("no line to transcribe"); no line of its first MiB is UTF-8 (or UTF-16)
    text. Malformed lines are not a problem here (they are error rows). Never raises."""
    non_blank = decoded = 0
    read_whole = True
    try:
        for item in manifest_lines(uri, limit_bytes=SNIFF_BYTES):
            if item is LIMIT_REACHED:
                read_whole = False
                break
            if isinstance(item, Broken):
                return f"{uri}: {item.message}" if item.what in ("open", "binary") or not non_blank else None
            text, _, _ = decode_line(item[1])
            if text is None or text.strip():
                non_blank += 1
                decoded += text is not None
    except Exception as error:  # manifest_lines does not raise; this keeps a bug here from stopping a job
        return f"{uri}: cannot be read ({cause(error)})"
    if not non_blank:
        return f"{uri}: no line to transcribe (empty, or only blank lines)" if read_whole else None
    if not decoded:
        return f"{uri}: not UTF-8 or UTF-16 text (no line of its first MiB decodes)"
    return None


# ------------------------------------------------------------------------------------------------------- lines

class _Unusable(ValueError):
    """A line that cannot be used: the message says why."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _is_text(value: Any) -> bool:
    """A non-empty string that is Unicode text (JSON escapes can make unpaired surrogates, which are not)."""
    if not isinstance(value, str) or not value:
        return False
    return SURROGATE.search(value) is None


def _row(uri: str, line_number: int, utterance_id: str, **values: Any) -> dict[str, Any]:
    row = {
        schema.UTTERANCE_ID: utterance_id,
        schema.MANIFEST: uri,
        schema.LINE: line_number,
        schema.SOURCE_ID: None,
        schema.AUDIO_FILEPATH: "",
        schema.SHARD_MEMBER: None,
        schema.OFFSET: 0.0,
        schema.DURATION: 0.0,
        schema.CHANNEL: None,
        schema.REFERENCE_TEXT: "",
        schema.EXTRA: "{}",
        schema.PHRASES: None,
        schema.STATUS: schema.STATUS_OK,
        schema.ERROR: "",
    }
    row.update(values)
    return row


def _error_row(uri: str, line_number: int, message: str, utterance_id: str,
               source_id: str | None = None) -> dict[str, Any]:
    return _row(uri, line_number, utterance_id, **{
        schema.SOURCE_ID: source_id, schema.STATUS: schema.STATUS_ERROR,
        schema.ERROR: f"{uri}, line {line_number}: {message}"})


def _json_problem(error: json.JSONDecodeError, line: str) -> str:
    what = error.msg.removesuffix(" at")
    if error.msg.startswith("Unterminated string") or error.pos >= len(line.rstrip()):
        return f"malformed JSON (the line ends early, truncated? {what} at column {error.colno})"
    return f"malformed JSON ({what} at column {error.colno})"


def parse_line(line: str, uri: str, line_number: int, raw: bytes | None = None,
               shards: InShards | None = None) -> dict[str, Any]:
    """One manifest line (text) -> one row with the columns of `schema.INPUT_COLUMNS`; an error row naming the
    manifest and line if it cannot be used. `raw`, the line's bytes in the file, makes an error row's id. With
    `shards`, the line lists a member of a sharded corpus (`InShards`, `shard_row_values`)."""
    raw = line.encode("utf-8", "surrogatepass") if raw is None else raw
    try:
        return _parse(line, uri, line_number, raw, shards)
    except Exception as error:  # a bug here must cost one row, not the manifest
        return _error_row(uri, line_number, f"cannot read the line ({cause(error)})",
                          _error_identity(uri, "line", raw))


@dataclass(frozen=True)
class InShards:
    """Where the lines of a sharded corpus's listing keep their audio (`pipeline/io/shards.py`).

    A NeMo tarred manifest's line names its member (`audio_filepath`) and its shard (`shard_id`, a key of `tars`,
    shard id -> tar URI); a Lhotse Shar cuts file's cut is the member `{cut id}.<ext>` of its one recording tar
    (`shar_tar`), which holds the cut's audio from its start (offset 0) and only its channels (channel null).
    The row's `audio_filepath` is the tar, `shard_member` the member, and its id `utterance_identity` of
    `member_identity(tar, member)`, offset, duration, channel and the line's own id: stable across reruns.
    """

    tars: dict[int, str]
    shar_tar: str | None = None


def member_identity(tar_uri: str, member: str) -> str:
    """What stands for a shard member's audio in its `utterance_identity`: the tar and the member's name."""
    return f"{tar_uri}#{member}"


def _parse(line: str, uri: str, line_number: int, raw: bytes, shards: InShards | None = None) -> dict[str, Any]:
    def error_row(message: str, source_id: str | None = None) -> dict[str, Any]:
        return _error_row(uri, line_number, message, _error_identity(uri, "line", raw), source_id)

    if "\x00" in line:
        return error_row(f"NUL byte at column {line.index(chr(0)) + 1}")
    depth = _nesting_depth(line)
    if depth > MAX_JSON_DEPTH:
        return error_row(f"JSON nested {depth} levels deep, deeper than the {MAX_JSON_DEPTH} levels loopscribe reads")
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as error:
        return error_row(_json_problem(error, line))
    except RecursionError:  # not reached within MAX_JSON_DEPTH; kept so that it could only cost the line
        return error_row(f"JSON nested too deeply to read (more than {MAX_JSON_DEPTH} levels)")
    except ValueError as error:  # an integer of more than 4300 digits
        return error_row(f"malformed JSON ({cause(error)})")
    if not isinstance(entry, dict):
        return error_row(f"expected a JSON object, got {type(entry).__name__}")
    is_cut = "recording" in entry or "supervisions" in entry
    if shards is not None:
        return _shard_row(entry, uri, line_number, shards, error_row)
    id_key, given_id = _cut_id(entry) if is_cut else _nemo_id(entry)
    try:
        values = _cut_values(entry, given_id) if is_cut else _nemo_values(entry, id_key)
    except _Unusable as error:
        return error_row(str(error), given_id)
    audio = resolve_audio_path(values.pop("audio"), uri)
    channel = values.get(schema.CHANNEL)
    return _row(uri, line_number, utterance_identity(
        audio, values[schema.OFFSET], values[schema.DURATION], channel, given_id), **{
        schema.SOURCE_ID: given_id, schema.AUDIO_FILEPATH: audio, **values})


def _shard_row(entry: dict[str, Any], uri: str, line_number: int, shards: InShards,
               error_row: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """A listing's line of a sharded corpus -> its row (`InShards`)."""
    if shards.shar_tar is not None:
        id_key, given_id = _cut_id(entry)
        try:
            if given_id is None:
                raise _Unusable(f"a Lhotse cut needs a string 'id', got {_shown(entry.get('id'))}")
            supervisions = entry.get("supervisions") if isinstance(entry.get("supervisions"), list) else []
            texts = [_reference_text(s.get("text")) for s in supervisions if isinstance(s, dict)]
            custom = entry.get("custom")
            name = f"cut {_shown(given_id)}"
            values = {schema.OFFSET: 0.0, schema.DURATION: _seconds(entry, "duration", required=True),
                      schema.CHANNEL: None, schema.REFERENCE_TEXT: " ".join(t for t in texts if t),
                      schema.EXTRA: _extra_json({k: v for k, v in entry.items() if k not in LHOTSE_KEYS}),
                      schema.PHRASES: _phrases(custom.get("phrases"), f"{name}: 'custom.phrases'")
                      if isinstance(custom, dict) else None}
        except _Unusable as error:
            return error_row(str(error), given_id)
        tar, member = shards.shar_tar, given_id
    else:
        id_key, given_id = _nemo_id(entry)
        try:
            values = _nemo_values(entry, id_key)
            shard = entry.get("shard_id")
            if not _is_int(shard):
                raise _Unusable(f"a NeMo tarred manifest's line needs an integer 'shard_id', got {_shown(shard)}")
            if shard not in shards.tars:
                raise _Unusable(f"shard_id {shard}: no such shard among the {len(shards.tars)} named (--tarred-audio, "
                                f"or audio_{shard}.tar beside the manifest)")
        except _Unusable as error:
            return error_row(str(error), given_id)
        tar, member = shards.tars[shard], nemo_member(values.pop("audio"))
    return _row(uri, line_number, utterance_identity(
        member_identity(tar, member), values[schema.OFFSET], values[schema.DURATION], values.get(schema.CHANNEL),
        given_id), **{schema.SOURCE_ID: given_id, schema.AUDIO_FILEPATH: tar, schema.SHARD_MEMBER: member, **values})


def _nesting_depth(line: str) -> int:
    """How deeply the JSON of `line` nests (brackets inside strings do not count); a line with no more than
    `MAX_JSON_DEPTH` brackets in all is not measured."""
    if line.count("[") + line.count("{") <= MAX_JSON_DEPTH:
        return 0
    steps = (1 if token in "[{" else -1 for token in _JSON_STRING_OR_BRACKET.findall(line) if token[0] != '"')
    return max(itertools.accumulate(steps), default=0)


def _finite(value: Any) -> Any:
    """`value` (parsed JSON) with every NaN or infinite number replaced by its name as a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return _NON_FINITE_TEXT.get(value, "NaN")
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _extra_json(extra: dict[str, Any]) -> str:
    try:
        text = json.dumps(extra, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except ValueError:  # NaN or Infinity: as strings (the module docstring)
        extra = _finite(extra)
        text = json.dumps(extra, ensure_ascii=False, sort_keys=True)
    # unpaired surrogates (from JSON escapes) cannot be stored as UTF-8: escaped, nothing is lost
    return text if SURROGATE.search(text) is None else json.dumps(extra, ensure_ascii=True, sort_keys=True)


def _seconds(entry: dict[str, Any], key: str, required: bool) -> float:
    if key not in entry or (entry[key] is None and not required):
        if required:
            raise _Unusable(f"missing key {key!r}")
        return 0.0
    value = entry[key]
    if value is None:
        raise _Unusable(f"{key!r} is null")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Unusable(f"{key!r} must be a number of seconds, got {_shown(value)}")
    try:
        seconds = float(value)
    except OverflowError:  # an integer past float range
        seconds = math.inf
    if not math.isfinite(seconds):
        raise _Unusable(f"{key!r} must be a finite number of seconds, got {_shown(value)}")
    if seconds < 0:
        raise _Unusable(f"{key!r} must not be negative, got {_shown(value)}")
    return seconds + 0.0


def _reference_text(value: Any) -> str:
    """A reference `text` as text: a string as written (unpaired surrogates as their escapes), another JSON value
    as its JSON text, null as "" (the module docstring)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(_finite(value), ensure_ascii=False)
    return SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", value)


def _audio(value: Any, key: str, where: str = "") -> str:
    if value is None:
        raise _Unusable(f"{where}{key!r} is null")
    if not _is_text(value):
        raise _Unusable(f"{where}{key!r} must be a non-empty string of Unicode text, got {_shown(value)}")
    return value


def _nemo_id(entry: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the key, the id) of a NeMo line's own id, or (None, None)."""
    for key in NEMO_ID_KEYS:
        value = entry.get(key)
        if _is_text(value):
            return key, value
        if isinstance(value, int) and not isinstance(value, bool):
            return key, str(value)
    return None, None


def _nemo_values(entry: dict[str, Any], id_key: str | None) -> dict[str, Any]:
    if "audio_filepath" not in entry:
        raise _Unusable("missing key 'audio_filepath'")
    audio = _audio(entry["audio_filepath"], "audio_filepath")
    extra = {k: v for k, v in entry.items() if k not in NEMO_KEYS and k != id_key}
    return {
        "audio": audio,
        schema.OFFSET: _seconds(entry, "offset", required=False),
        schema.DURATION: _seconds(entry, "duration", required=True),
        schema.REFERENCE_TEXT: _reference_text(entry.get("text")),
        schema.EXTRA: _extra_json(extra),
        schema.PHRASES: _phrases(entry.get("phrases")),
    }


def _cut_id(cut: dict[str, Any]) -> tuple[str | None, str | None]:
    cut_id = cut.get("id")
    return ("id", cut_id) if _is_text(cut_id) else (None, None)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pick_source(name: str, wanted: Any, files: list[dict[str, Any]]) -> tuple[dict[str, Any], int | None]:
    """The audio source of a cut that asks for channel(s) `wanted`, and the channel index to decode in it."""
    if wanted is None:
        return files[0], None
    channels_wanted = [wanted] if _is_int(wanted) else wanted
    if not isinstance(channels_wanted, list) or not channels_wanted or not all(map(_is_int, channels_wanted)):
        raise _Unusable(f"{name}: 'channel' must be an integer or a list of integers, got {_shown(wanted)}")
    wanted_set = set(channels_wanted)
    for source in files:
        channels = source.get("channels")
        if not isinstance(channels, list) or not all(map(_is_int, channels)):
            continue
        if len(wanted_set) == 1 and channels_wanted[0] in channels:
            return source, None if len(channels) == 1 else channels.index(channels_wanted[0])
        if len(wanted_set) > 1 and wanted_set == set(channels):
            return source, None  # all of the source's channels, mixed down
    if len(wanted_set) > 1:
        raise _Unusable(f"{name}: channels {_shown(channels_wanted)} are not all the channels of one audio source: "
                        "only one channel, or all of a source's channels, is supported")
    raise _Unusable(f"{name}: channel {_shown(channels_wanted[0])} is in no file or url audio source's 'channels'")


def _cut_values(cut: dict[str, Any], cut_id: str | None) -> dict[str, Any]:
    if cut_id is None:
        raise _Unusable(f"a Lhotse cut needs a string 'id', got {_shown(cut.get('id'))}")
    name = f"cut {_shown(cut_id)}"
    recording = cut.get("recording")
    if not isinstance(recording, dict):
        raise _Unusable(f"{name}: missing 'recording' (only cuts with recordings are supported)")
    sources = recording.get("sources") if isinstance(recording.get("sources"), list) else []
    files = [s for s in sources if isinstance(s, dict) and s.get("type") in ("file", "url")]
    if not files:
        kinds = sorted({_shown(s.get("type")) for s in sources if isinstance(s, dict)})
        raise _Unusable(f"{name}: no file or url audio source (found {', '.join(kinds) or 'none'})")
    source, channel = _pick_source(name, cut.get("channel"), files)
    audio = _audio(source.get("source"), "source", f"{name}: the audio source's ")
    supervisions = cut.get("supervisions") if isinstance(cut.get("supervisions"), list) else []
    texts = [_reference_text(s.get("text")) for s in supervisions if isinstance(s, dict)]
    extra = {k: v for k, v in cut.items() if k not in LHOTSE_KEYS}
    custom = cut.get("custom")
    phrases = _phrases(custom.get("phrases"), f"{name}: 'custom.phrases'") if isinstance(custom, dict) else None
    return {
        "audio": audio,
        schema.OFFSET: _seconds(cut, "start", required=False),
        schema.DURATION: _seconds(cut, "duration", required=True),
        schema.CHANNEL: channel,
        schema.REFERENCE_TEXT: " ".join(t for t in texts if t),
        schema.EXTRA: _extra_json(extra),
        schema.PHRASES: phrases,
    }


def _phrase_weight(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Unusable(f"{what}: the weight must be a number > 0, got {_shown(value)}")
    try:
        weight = float(value)
    except OverflowError:
        weight = math.inf
    if not math.isfinite(weight) or weight <= 0:
        raise _Unusable(f"{what}: the weight must be a number > 0, got {_shown(value)}")
    return weight


def _phrases(value: Any, key: str = "'phrases'") -> list[dict[str, Any]] | None:
    """A row's `phrases` -> [{text, weight}] (see the module docstring), None for no list; `_Unusable` names the
    item that cannot be used."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Unusable(f"{key} must be a list of phrases (strings, or [phrase, weight] pairs), got {_shown(value)}")
    if len(value) > MAX_ROW_PHRASES:
        raise _Unusable(f"{key} lists {len(value)} phrases, more than the {MAX_ROW_PHRASES} a row may")
    phrases = []
    for number, item in enumerate(value, start=1):
        what = f"{key} item {number}"
        weight = None
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
            text, weight = item[0], _phrase_weight(item[1], what)
        elif isinstance(item, str):
            text = item
        else:
            raise _Unusable(f"{what} must be a string or a [phrase, weight] pair, got {_shown(item)}")
        if SURROGATE.search(text) is not None:
            raise _Unusable(f"{what} must be Unicode text, got {_shown(text)}")
        try:
            text, weight_in_text = split_phrase(text, weighted=isinstance(item, str))
        except PhraseListError as error:
            raise _Unusable(f"{what}: {error}") from None
        weight = weight if weight_in_text is None else weight_in_text
        if len(text) > MAX_PHRASE_CHARS:
            raise _Unusable(f"{what}: a phrase of {len(text)} characters, more than {MAX_PHRASE_CHARS}")
        phrases.append({"text": text, "weight": weight})
    return phrases or None
