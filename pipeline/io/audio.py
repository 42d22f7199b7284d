"""Audio in, within bounds: one file's bytes (a segment: the byte ranges it needs; `pipeline.io.audio_read`), decoded
with soundfile, pick or mix down channels, slice offset/duration, resample with soxr (HQ) -> `LoadedAudio`.

Any failure raises `AudioError` whose message names the file (its URI, or `name`) and the cause; the audio stage
turns it into an error row, so one bad file never fails a batch. What each bad input gives:

- missing, not a regular file, larger than `input.max_file_bytes` or slower to fetch than `input.read_timeout_s`:
  what reading it gives (`pipeline.io.audio_read`): "file not found", "not a regular file (FIFO)", an error naming
  the size and the limit, "read timed out after 60 s".
- remote storage failing: what the failure was ("access denied (HTTP 403 Forbidden): ...", "connection refused",
  "server error (HTTP 503 ...)", `pipeline.io.remote`), the transient ones after `input.read_retries` retries.
- empty: "empty file"; not audio: "not decodable audio (<libsndfile's reason>)"; header only, or truncated
  before the first frame: "no audio frames (header only or truncated)"; cut or corrupt after some frames:
  "corrupt or truncated after <s> s".
- a header claiming a sample rate below `input.min_sample_rate` (`--min-sample-rate`): "header says 1 Hz; below
  the minimum 1000 Hz", before anything is decoded (a 54 KB WAV claiming 1 Hz decoded to 7.5 hours, 1.7 GB).
- more than `input.max_row_duration_s` (`--max-row-duration-s`) of audio to decode: a requested `duration`
  (1e12), or from the offset to the end as the header declares it (a FLAC claiming 2^36 frames), is refused
  before decoding; audio of unknown length that decodes past the bound is refused as soon as it does.
- NaN or infinite samples (float WAV): "NaN or infinite samples".
- an offset past the end: "offset <s> s is past the end (<s> s)"; a `channel` the file lacks: the error names
  the file's channel count.
Messages never carry an object's repr (libsndfile's "Error opening <_io.BytesIO object at 0x...>").

Memory is bounded whatever a header says: frames are decoded in chunks of at most about 4 MiB (`_CHUNK_VALUES`),
each chunk is mixed down (or its channel taken) and resampled as it comes (soxr's stream gives what one call on
the whole would), so what is held is the file's bytes (read by range: at most `_CACHE_BYTES`, 24 MiB, of them,
`pipeline.io.audio_read`), one chunk, and the output at `sample_rate`: at most `max_row_duration_s * sample_rate`
float32 samples. A header declaring more frames than the bytes hold, within the bound, costs only what is there:
decoding stops where the bytes do (libsndfile already cuts a WAV's frame count to its bytes, so a WAV whose data
chunk claims 4 GB on a 1 s body decodes to that 1 s), and the measured `duration_s` says what was decoded. A FLAC
whose header leaves its length open (total frames 0, as streaming encoders write it) decodes to its end.

Lengths: `duration_s` is what was decoded (the segment a row asks for: NeMo's convention, offset and duration
select it), `file_duration_s` the whole file's from offset 0, as its header declares it or as decoding found its end
(None where neither tells), so that a manifest `duration` shorter than the file can be seen (`pipeline/graph.py::
output_totals`).

Segments (a row with an offset or a duration) are read by byte range where libsndfile seeks cheaply
(`RANGE_FORMATS`), the rows of one batch that name one file through one open of it, in order of offset
(`load_audio_batch`); other formats, and remote files whose size is not told, are fetched whole, once for all of
a file's rows in a batch. Which formats, what they cost, and how a row's reads are bounded: `pipeline.io.audio_read`.

Decoding runs in the caller's thread (on bytes already in memory, or asking the range reader for the next bytes,
within the bounds above); fetches run in `pipeline.io.audio_read`'s worker threads, waited on at most
`read_timeout_s`.
"""

from __future__ import annotations

import io
import math
import operator
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import soundfile
import soxr

from pipeline.config import InputConfig
from pipeline.io.audio_read import (
    DEFAULT_LIMITS,
    RANGE_FORMATS,
    AudioError,
    RangeReader,
    call_within,
    open_source,
    read_bytes,
    without_object_reprs,
)

_CHUNK_VALUES = 1 << 20  # float32 values decoded per chunk (4 MiB whatever the channel count)
_CHUNK_OUTPUT_SAMPLES = 1 << 22  # resampled samples per chunk: soxr's stream segfaulted on one call giving 1.6e9
_UNKNOWN_FRAMES = 1 << 62  # libsndfile gives SF_COUNT_MAX frames for a length the header leaves open

try:  # libsndfile's own read call, through soundfile's handle: see `_decode_into`
    from soundfile import _ffi as _sf_ffi
    from soundfile import _snd as _sf_lib
except ImportError:  # pragma: no cover - soundfile has had both since 0.8; `_decode_into` falls back to read()
    _sf_ffi = _sf_lib = None


@dataclass(frozen=True)
class LoadedAudio:
    samples: np.ndarray  # float32 [N] at the requested sample rate, finite
    duration_s: float  # measured: frames decoded / source_rate (the manifest's `duration` may be wrong)
    source_rate: int  # the file's sample rate, Hz
    channels: int  # the file's channel count (before selection or mixdown)
    # the whole file's length, from offset 0: its header's frame count, or where decoding reached its end; None
    # where neither tells (a header that leaves the length open, and a segment that ends before the file does)
    file_duration_s: float | None = None


def load_audio(
    uri: str,
    sample_rate: int,
    offset_s: float = 0.0,
    duration_s: float | None = None,
    channel: int | None = None,
    limits: InputConfig = DEFAULT_LIMITS,
) -> LoadedAudio:
    """One utterance: the whole file is fetched (`read_bytes`) and decoded (`decode_audio`); a segment (an offset
    or a duration) is read by range where its format allows (`load_audio_batch`). A request past the bounds is
    refused before anything is read."""
    _check_request(uri, offset_s, duration_s, channel, limits)
    if not offset_s and not duration_s:
        return decode_audio(read_bytes(uri, limits), sample_rate, offset_s, duration_s, channel, limits, name=uri)
    loaded = load_audio_batch([uri], sample_rate, [offset_s], [duration_s], [channel], limits)[0]
    if isinstance(loaded, AudioError):
        raise loaded
    return loaded


@dataclass(frozen=True)
class AudioBytes:
    """A row's encoded audio already in memory (a tar shard's member, `pipeline/io/shards.py`), decoded as a fetched
    file is (`decode_audio`); `name` is what its errors call it ("s3://b/audio_3.tar member x.flac")."""

    name: str
    data: bytes


def load_audio_batch(
    uris: Sequence[str | AudioBytes],
    sample_rate: int,
    offsets_s: Sequence[float | None],
    durations_s: Sequence[float | None],
    channels: Sequence[int | None],
    limits: InputConfig = DEFAULT_LIMITS,
) -> list[LoadedAudio | AudioError]:
    """The rows of one batch -> per row its `LoadedAudio`, or the `AudioError` that row gets (never raised).

    Rows naming the same file share one open of it, read in order of offset: the cuts of one recording read
    by range what they need, once (`RangeReader`), and a file read whole is fetched once for all its rows.
    An offset None is 0; a duration None or 0 is "to the end". A lone row of a whole file is read as
    `load_audio` reads it (`read_bytes`, then `decode_audio`). A row given as `AudioBytes` is decoded from them.
    """
    if not len(uris) == len(offsets_s) == len(durations_s) == len(channels):
        raise ValueError(f"uris, offsets_s, durations_s and channels must have one entry per row, got "
                         f"{len(uris)}, {len(offsets_s)}, {len(durations_s)} and {len(channels)}")
    if sample_rate < 1:
        raise ValueError(f"sample_rate must be >= 1 Hz, got {sample_rate}")
    results: list[LoadedAudio | AudioError | None] = [None] * len(uris)
    rows_of: dict[str, list[int]] = {}
    for row, uri in enumerate(uris):
        if isinstance(uri, AudioBytes):
            results[row] = _row_outcome(uri.name, decode_audio, memoryview(uri.data), sample_rate,
                                        offsets_s[row] or 0.0, durations_s[row] or None, channels[row], limits,
                                        uri.name)
            continue
        try:
            _check_request(uri, offsets_s[row] or 0.0, durations_s[row] or None, channels[row], limits)
        except AudioError as error:
            results[row] = error
            continue
        rows_of.setdefault(uri, []).append(row)
    for uri, rows in rows_of.items():
        rows.sort(key=lambda row: offsets_s[row] or 0.0)  # one pass through the file: a cut's neighbour is cached
        if len(rows) == 1 and not offsets_s[rows[0]] and not durations_s[rows[0]]:
            results[rows[0]] = _row_outcome(uri, _load_whole, uri, sample_rate, channels[rows[0]], limits)
            continue
        _load_rows(uri, rows, sample_rate, offsets_s, durations_s, channels, limits, results)
    return results  # type: ignore[return-value]  # every row was given its outcome


def _load_rows(uri: str, rows: list[int], sample_rate: int, offsets_s: Sequence[float | None],
               durations_s: Sequence[float | None], channels: Sequence[int | None], limits: InputConfig,
               results: list[LoadedAudio | AudioError | None]) -> None:
    """`rows` of one file, read through one open of it (or its bytes, where its size cannot be known)."""
    try:
        source = call_within(time.monotonic() + limits.read_timeout_s, limits, uri, open_source, uri,
                              limits.max_file_bytes)
    except AudioError as error:
        for row in rows:
            results[row] = error
        return
    if isinstance(source, bytes):
        data = memoryview(source)
        for row in rows:
            results[row] = _row_outcome(uri, decode_audio, data, sample_rate, offsets_s[row] or 0.0,
                                        durations_s[row] or None, channels[row], limits, uri)
        return
    reader = RangeReader(source, uri, limits)
    try:
        for row in rows:
            reader.begin_row()
            outcome = _row_outcome(uri, _decode_range, reader, sample_rate, offsets_s[row] or 0.0,
                                   durations_s[row] or None, channels[row], limits, uri)
            results[row] = reader.failure or outcome  # a failed read says why, not "truncated" after it
    finally:
        reader.release()


def _load_whole(uri: str, sample_rate: int, channel: int | None, limits: InputConfig) -> LoadedAudio:
    return decode_audio(read_bytes(uri, limits), sample_rate, 0.0, None, channel, limits, name=uri)


def _row_outcome(uri: str, load: Callable[..., LoadedAudio], *args: Any) -> LoadedAudio | AudioError:
    """`load(*args)`, or the AudioError it raised (any other exception made one)."""
    try:
        return load(*args)
    except AudioError as error:
        return error
    except Exception as error:  # a decoder bug must cost one row, not the batch
        return AudioError(f"{uri}: cannot load audio ({type(error).__name__}: {without_object_reprs(str(error))})")


def _decode_range(reader: RangeReader, sample_rate: int, offset_s: float, duration_s: float | None,
                  channel: int | None, limits: InputConfig, name: str) -> LoadedAudio:
    """One row through a file's `RangeReader`: read by range where the format seeks cheaply, else whole."""
    with _open_sound(reader, name) as sound:
        if sound.format not in RANGE_FORMATS:
            reader.fetch_whole()
        reader.plan(int(sound.frames) if 0 < sound.frames < _UNKNOWN_FRAMES else None)
        return _decode(sound, sample_rate, offset_s, duration_s, channel, limits, name, expect=reader.expect)


def decode_audio(
    data_or_file: bytes | bytearray | memoryview | BinaryIO,
    sample_rate: int,
    offset_s: float = 0.0,
    duration_s: float | None = None,
    channel: int | None = None,
    limits: InputConfig = DEFAULT_LIMITS,
    name: str = "<bytes>",
) -> LoadedAudio:
    """Encoded audio (bytes, or a seekable binary file) -> float32 samples at `sample_rate` from `offset_s` for
    `duration_s` seconds (None or 0: to the end); `channel` None mixes all channels down (their mean), an int
    takes that channel (0-based). Refuses what breaks `limits` before decoding it (module docstring)."""
    if sample_rate < 1:
        raise ValueError(f"sample_rate must be >= 1 Hz, got {sample_rate}")
    _check_request(name, offset_s, duration_s, channel, limits)
    with _open_sound(data_or_file, name) as sound:
        return _decode(sound, sample_rate, offset_s, duration_s, channel, limits, name)


def _open_sound(data_or_file: bytes | bytearray | memoryview | BinaryIO, name: str) -> soundfile.SoundFile:
    """libsndfile's handle on encoded audio (its header read), or AudioError: "empty file", "not decodable"."""
    if isinstance(data_or_file, (bytes, bytearray, memoryview)):
        if len(data_or_file) == 0:
            raise AudioError(f"{name}: empty file")
        source: BinaryIO = io.BytesIO(data_or_file)
    else:
        source = data_or_file
        position = source.tell()
        if source.seek(0, io.SEEK_END) == position:
            raise AudioError(f"{name}: empty file")
        source.seek(position)
    try:
        return soundfile.SoundFile(source)
    except (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError) as error:
        raise AudioError(f"{name}: not decodable audio ({_libsndfile_reason(error)})") from None


def _decode(sound: soundfile.SoundFile, sample_rate: int, offset_s: float, duration_s: float | None,
            channel: int | None, limits: InputConfig, name: str,
            expect: Callable[[int], None] | None = None) -> LoadedAudio:
    """`decode_audio` on an open handle; `expect(frames)` is told, before each chunk, how many frames are about
    to be decoded (a range reader sizes its next fetch by it)."""
    source_rate, channels = int(sound.samplerate), int(sound.channels)
    if source_rate < limits.min_sample_rate:
        raise AudioError(f"{name}: header says {source_rate} Hz; below the minimum {limits.min_sample_rate} Hz "
                         f"(input.min_sample_rate, --min-sample-rate)")
    if channels < 1:
        raise AudioError(f"{name}: header says {channels} channels")
    if channel is not None and channel >= channels:
        raise AudioError(f"{name}: channel {channel} asked for, but the audio has {channels} channel(s) "
                         f"(channels count from 0)")
    declared = int(sound.frames) if 0 <= sound.frames < _UNKNOWN_FRAMES else None
    max_frames = math.ceil(limits.max_row_duration_s * source_rate)
    start_f = offset_s * source_rate
    start = round(start_f) if start_f < _UNKNOWN_FRAMES else _UNKNOWN_FRAMES
    if start > 0 and (start >= _UNKNOWN_FRAMES or (declared is not None and start >= declared)):
        length = f"{declared / source_rate:.3f} s" if declared is not None else "length unknown"
        raise AudioError(f"{name}: offset {_seconds(offset_s)} s is past the end ({length})")
    requested = max(1, round(duration_s * source_rate)) if duration_s else None
    if requested is None and declared is not None and declared - start > max_frames:
        raise AudioError(
            f"{name}: the header declares {(declared - start) / source_rate:.0f} s ({declared - start} frames at "
            f"{source_rate} Hz) from offset {offset_s:g} s, longer than input.max_row_duration_s "
            f"({limits.max_row_duration_s:g} s, --max-row-duration-s)")
    if start > 0:
        try:
            sound.seek(start)
        except (soundfile.LibsndfileError, RuntimeError, ValueError):
            raise AudioError(f"{name}: cannot reach offset {_seconds(offset_s)} s: the audio ends before it, or is "
                             f"truncated") from None

    # frames to decode: what was asked for, else to the end, and one past the bound to see it crossed
    budget = requested if requested is not None else max_frames + 1
    ratio = sample_rate / source_rate
    chunk_frames = max(1, _CHUNK_VALUES // channels)
    if ratio > 1:
        chunk_frames = max(1, min(chunk_frames, int(_CHUNK_OUTPUT_SAMPLES / ratio)))
    if declared is not None:  # a short file gets a short buffer; a header that lies short only costs more chunks
        chunk_frames = min(chunk_frames, declared - start + 1)
    buffer = np.empty((max(1, min(chunk_frames, budget)), channels), dtype=np.float32)
    resampler = None
    if source_rate != sample_rate:
        try:
            resampler = soxr.ResampleStream(source_rate, sample_rate, 1, dtype="float32", quality="HQ")
        except (ValueError, RuntimeError) as error:
            raise AudioError(f"{name}: cannot resample {source_rate} Hz to {sample_rate} Hz ({error})") from None

    parts: list[np.ndarray] = []
    decoded = 0
    while decoded < budget:
        wanted = min(len(buffer), budget - decoded)
        if expect is not None:
            expect(wanted)
        frames, failure = _decode_into(sound, buffer[:wanted])
        if failure is not None:
            if decoded + frames == 0:
                if start == 0:
                    raise AudioError(f"{name}: no audio frames (header only or truncated)")
                raise AudioError(f"{name}: no audio frames from offset {_seconds(offset_s)} s (the audio ends before "
                                 f"it, or is truncated)")
            raise AudioError(f"{name}: corrupt or truncated after {(start + decoded + frames) / source_rate:.3f} s"
                             f"{_detail(failure)}")
        decoded += frames
        if requested is None and decoded > max_frames:
            raise AudioError(f"{name}: decodes to more than input.max_row_duration_s ({limits.max_row_duration_s:g}"
                             f" s, --max-row-duration-s) from offset {offset_s:g} s")
        if frames:
            block = buffer[:frames]
            if channel is not None:
                mono = block[:, channel].copy()
            elif channels == 1:
                mono = block[:, 0].copy()
            else:  # in float64: the mean of finite float32 values never overflows to inf
                with np.errstate(invalid="ignore"):  # inf - inf: found just below
                    mono = block.mean(axis=1, dtype=np.float64).astype(np.float32)
            finite = np.isfinite(mono)
            if not finite.all():
                first = start + decoded - frames + int(np.argmin(finite))
                raise AudioError(f"{name}: NaN or infinite samples (the first at {first / source_rate:.3f} s)")
            parts.append(mono if resampler is None else _resample(resampler, mono, False, name))
        if frames < wanted:  # libsndfile returns short only at the end
            break
    if decoded == 0:
        if start == 0:
            raise AudioError(f"{name}: no audio frames (header only or truncated)")
        raise AudioError(f"{name}: no audio frames from offset {_seconds(offset_s)} s (the audio ends before it)")
    if resampler is not None:
        parts.append(_resample(resampler, np.zeros(0, np.float32), True, name))
    # decoding stopped short of the budget where the file ends: then its end is known, whatever the header says
    file_frames = start + decoded if decoded < budget or requested is None else declared
    samples = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if len(samples) == 0:
        raise AudioError(f"{name}: {decoded} frame(s) at {source_rate} Hz are too short to give one sample at "
                         f"{sample_rate} Hz")
    return LoadedAudio(np.ascontiguousarray(samples, dtype=np.float32), decoded / source_rate, source_rate, channels,
                       None if file_frames is None else file_frames / source_rate)


def _seconds(seconds: float) -> str:
    """Seconds for a message: milliseconds shown, and a huge offset in short."""
    return f"{seconds:.3f}" if seconds < 1e9 else f"{seconds:.3g}"


def _resample(resampler: soxr.ResampleStream, mono: np.ndarray, last: bool, name: str) -> np.ndarray:
    resampled = resampler.resample_chunk(mono, last=last)
    if not np.isfinite(resampled).all():  # finite samples near float32's maximum can ring past it
        raise AudioError(f"{name}: NaN or infinite samples after resampling (samples near float32's maximum)")
    return resampled


def _decode_into(sound: soundfile.SoundFile, buffer: np.ndarray) -> tuple[int, str | None]:
    """Decode up to `len(buffer)` frames into `buffer` (float32 [frames, channels], C order) -> (frames decoded,
    libsndfile's error or None).

    Calls libsndfile's `sf_readf_float` directly: `SoundFile.read` seeks to the new position after every read,
    and that seek fails at the end of a FLAC whose header leaves the length open ("Internal psf_fseek() failed",
    on a good file); it also raises without saying how many frames came before an error.
    """
    if _sf_lib is not None and hasattr(sound, "_file"):
        pointer = _sf_ffi.cast("float *", buffer.__array_interface__["data"][0])
        frames = int(_sf_lib.sf_readf_float(sound._file, pointer, len(buffer)))
        if _sf_lib.sf_error(sound._file):
            return max(frames, 0), _sf_ffi.string(_sf_lib.sf_strerror(sound._file)).decode("utf-8", "replace")
        return frames, None
    try:  # only where soundfile's internals move; tests run it by patching `_sf_lib`
        return len(sound.read(len(buffer), dtype="float32", always_2d=True, out=buffer)), None
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as error:
        return 0, _libsndfile_reason(error)


def _libsndfile_reason(error: BaseException) -> str:
    """libsndfile's reason without "Error opening <_io.BytesIO object at 0x...>: "."""
    reason = getattr(error, "error_string", None) or str(error)
    reason = without_object_reprs(reason).strip()
    reason = re.sub(r"^Error opening\s*:?\s*", "", reason)
    if reason.startswith("File does not exist or is not a regular file"):  # its words for "no stream found"
        return "no audio stream found"
    return reason or type(error).__name__


def _detail(failure: str) -> str:
    """libsndfile's reason for a failed read, in parentheses, unless it is its internal seek failure (which says
    nothing more than "truncated")."""
    failure = re.sub(r"^Error\s*:\s*", "", without_object_reprs(failure).strip())
    return "" if not failure or "psf_fseek" in failure else f" ({failure.rstrip('.')})"


def _check_request(name: str, offset_s: float, duration_s: float | None, channel: int | None,
                   limits: InputConfig) -> None:
    """The row's own numbers, before any read: offset and duration finite and >= 0, duration within
    `max_row_duration_s`, channel an integer >= 0."""
    if isinstance(offset_s, bool) or not isinstance(offset_s, (int, float, np.number)) or not 0 <= offset_s < math.inf:
        raise AudioError(f"{name}: offset {offset_s!r} must be a finite number of seconds >= 0")
    if duration_s is not None:
        if (isinstance(duration_s, bool) or not isinstance(duration_s, (int, float, np.number))
                or not 0 <= duration_s < math.inf):
            raise AudioError(f"{name}: duration {duration_s!r} must be a finite number of seconds >= 0")
        if duration_s > limits.max_row_duration_s:
            raise AudioError(f"{name}: duration {duration_s:g} s is longer than input.max_row_duration_s "
                             f"({limits.max_row_duration_s:g} s, --max-row-duration-s)")
    if channel is not None:
        try:
            index = operator.index(channel)
        except TypeError:
            raise AudioError(f"{name}: channel {channel!r} must be an integer (0-based) or null") from None
        if isinstance(channel, bool) or index < 0:
            raise AudioError(f"{name}: channel {channel!r} must be an integer >= 0 (0-based) or null")
