"""Audio in, within bounds: fetch one file's bytes, decode with soundfile, pick or mix down channels, slice
offset/duration, resample with soxr (HQ) -> `LoadedAudio`.

Any failure raises `AudioError` whose message names the file (its URI, or `name`) and the cause; the audio stage
turns it into an error row, so one bad file never fails a batch. What each bad input gives:

- missing: "file not found"; empty: "empty file"; not audio: "not decodable audio (<libsndfile's reason>)";
  header only, or truncated before the first frame: "no audio frames (header only or truncated)"; cut or
  corrupt after some frames: "corrupt or truncated after <s> s".
- a local path that is not a regular file (FIFO, socket, device, directory): "not a regular file (FIFO)",
  found with `os.stat` before the file is opened (opening a FIFO nobody writes to blocks forever).
- larger than `input.max_file_bytes` (`--max-file-bytes`): an error naming the size and the limit. A local
  file's size is checked before it is opened, a remote one's where the backend tells it; no read takes more
  than `max_file_bytes + 1` bytes, so a file that grows or whose size is unknown is refused all the same.
- a fetch taking longer than `input.read_timeout_s` (`--read-timeout-s`): "read timed out after 60 s".
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
the whole would), so what is held is the file's bytes, one chunk, and the output at `sample_rate`: at most
`max_row_duration_s * sample_rate` float32 samples. A header declaring more frames than the bytes hold, within
the bound, costs only what is there: decoding stops where the bytes do (libsndfile already cuts a WAV's frame
count to its bytes, so a WAV whose data chunk claims 4 GB on a 1 s body decodes to that 1 s), and the measured
`duration_s` says what was decoded. A FLAC whose header leaves its length open (total frames 0, as streaming
encoders write it) decodes to its end.

Paths: a URI without "://" and a `file://` URI are local files, opened with `os.open`, never through fsspec, and
taken literally (`x::y.wav`, `a#b [1].wav`, spaces and non-ASCII names; no chain, glob or fragment parsing, no
percent-decoding, no `~` expansion). Anything else with "://" goes through fsspec (chains included).

Timeouts: a fetch runs in a daemon worker thread, reused between files (`_FetchThreads`), and the caller waits at
most `read_timeout_s`. A read that outlives it cannot be interrupted: its thread is abandoned, stops at the next
chunk if the read ever returns, and being a daemon never keeps the process from exiting. Decoding runs in the
caller's thread (it works on bytes already in memory, within the bounds above).
"""

from __future__ import annotations

import io
import math
import operator
import os
import re
import stat
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Any, BinaryIO

import fsspec
import numpy as np
import soundfile
import soxr

from pipeline.config import InputConfig
from pipeline.uris import local_path

DEFAULT_LIMITS = InputConfig()

_READ_CHUNK_BYTES = 8 << 20  # one read call of a fetch; an abandoned fetch stops at the next one
_CHUNK_VALUES = 1 << 20  # float32 values decoded per chunk (4 MiB whatever the channel count)
_CHUNK_OUTPUT_SAMPLES = 1 << 22  # resampled samples per chunk: soxr's stream segfaulted on one call giving 1.6e9
_UNKNOWN_FRAMES = 1 << 62  # libsndfile gives SF_COUNT_MAX frames for a length the header leaves open

try:  # libsndfile's own read call, through soundfile's handle: see `_decode_into`
    from soundfile import _ffi as _sf_ffi
    from soundfile import _snd as _sf_lib
except ImportError:  # pragma: no cover - soundfile has had both since 0.8; `_decode_into` falls back to read()
    _sf_ffi = _sf_lib = None


class AudioError(Exception):
    """Audio that cannot be used, with the reason; the message names the file."""


@dataclass(frozen=True)
class LoadedAudio:
    samples: np.ndarray  # float32 [N] at the requested sample rate, finite
    duration_s: float  # measured: frames decoded / source_rate (the manifest's `duration` may be wrong)
    source_rate: int  # the file's sample rate, Hz
    channels: int  # the file's channel count (before selection or mixdown)


def load_audio(
    uri: str,
    sample_rate: int,
    offset_s: float = 0.0,
    duration_s: float | None = None,
    channel: int | None = None,
    limits: InputConfig = DEFAULT_LIMITS,
) -> LoadedAudio:
    """Fetch (`read_bytes`) and decode (`decode_audio`) one utterance; a request past the bounds is refused
    before anything is read."""
    _check_request(uri, offset_s, duration_s, channel, limits)
    return decode_audio(read_bytes(uri, limits), sample_rate, offset_s, duration_s, channel, limits, name=uri)


def read_bytes(uri: str, limits: InputConfig = DEFAULT_LIMITS) -> bytes:
    """The bytes of one audio file, at most `limits.max_file_bytes` of them, fetched within
    `limits.read_timeout_s` seconds (see the module docstring for local paths and the worker thread)."""
    abandoned = threading.Event()
    future = _FETCH_THREADS.submit(_fetch, uri, limits.max_file_bytes, abandoned)
    done, _ = wait([future], timeout=limits.read_timeout_s)
    if not done:
        abandoned.set()
        raise AudioError(f"{uri}: read timed out after {limits.read_timeout_s:g} s "
                         f"(input.read_timeout_s, --read-timeout-s)")
    return future.result()


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
        sound = soundfile.SoundFile(source)
    except (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError) as error:
        raise AudioError(f"{name}: not decodable audio ({_libsndfile_reason(error)})") from None
    with sound:
        return _decode(sound, sample_rate, offset_s, duration_s, channel, limits, name)


def _decode(sound: soundfile.SoundFile, sample_rate: int, offset_s: float, duration_s: float | None,
            channel: int | None, limits: InputConfig, name: str) -> LoadedAudio:
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
    samples = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if len(samples) == 0:
        raise AudioError(f"{name}: {decoded} frame(s) at {source_rate} Hz are too short to give one sample at "
                         f"{sample_rate} Hz")
    return LoadedAudio(np.ascontiguousarray(samples, dtype=np.float32), decoded / source_rate, source_rate, channels)


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


_OBJECT_REPR = re.compile(r"<[^<>]*\bat 0x[0-9a-fA-F]+>|<_io\.[^<>]*>")


def _libsndfile_reason(error: BaseException) -> str:
    """libsndfile's reason without "Error opening <_io.BytesIO object at 0x...>: "."""
    reason = getattr(error, "error_string", None) or str(error)
    reason = _OBJECT_REPR.sub("", reason).strip()
    reason = re.sub(r"^Error opening\s*:?\s*", "", reason)
    if reason.startswith("File does not exist or is not a regular file"):  # its words for "no stream found"
        return "no audio stream found"
    return reason or type(error).__name__


def _detail(failure: str) -> str:
    """libsndfile's reason for a failed read, in parentheses, unless it is its internal seek failure (which says
    nothing more than "truncated")."""
    failure = re.sub(r"^Error\s*:\s*", "", _OBJECT_REPR.sub("", failure).strip())
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


def _fetch(uri: str, max_bytes: int, abandoned: threading.Event) -> bytes:
    """Runs in a fetch thread: the file's bytes, or AudioError naming it."""
    local = local_path(uri)
    try:
        if local is not None:
            return _read_local(local, uri, max_bytes, abandoned)
        return _read_remote(uri, max_bytes, abandoned)
    except AudioError:
        raise
    except (FileNotFoundError, NotADirectoryError):
        raise AudioError(f"{uri}: file not found") from None
    except IsADirectoryError:
        raise AudioError(f"{uri}: not a regular file (directory)") from None
    except OSError as error:
        raise AudioError(f"{uri}: cannot read ({type(error).__name__}: {error.strerror or error})") from None
    except Exception as error:  # fsspec backends raise their own types (botocore, gcsfs, aiohttp ...)
        raise AudioError(f"{uri}: cannot read ({type(error).__name__}: {_OBJECT_REPR.sub('', str(error))})") \
            from None


_FILE_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
               (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"))


def _check_regular(mode: int, size: int, uri: str, max_bytes: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _FILE_KINDS if test(mode)), "not a file")
        raise AudioError(f"{uri}: not a regular file ({kind})")
    _check_size(size, uri, max_bytes)


def _check_size(size: int, uri: str, max_bytes: int) -> None:
    if size > max_bytes:
        raise AudioError(f"{uri}: {size} bytes, more than input.max_file_bytes ({max_bytes} bytes, "
                         f"--max-file-bytes)")


def _read_local(path: str, uri: str, max_bytes: int, abandoned: threading.Event) -> bytes:
    status = os.stat(path)
    _check_regular(status.st_mode, status.st_size, uri, max_bytes)  # before open: opening a FIFO can block
    # O_NONBLOCK: were the path swapped for a FIFO since the stat, opening it still returns at once
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with open(descriptor, "rb", buffering=0) as handle:
        status = os.fstat(descriptor)
        _check_regular(status.st_mode, status.st_size, uri, max_bytes)
        return _read_capped(handle, uri, max_bytes, abandoned)


def _read_remote(uri: str, max_bytes: int, abandoned: threading.Event) -> bytes:
    filesystem, path = fsspec.core.url_to_fs(uri)
    try:
        info = filesystem.info(path)
    except FileNotFoundError:
        raise
    except Exception:  # some backends cannot tell (an HTTP server without HEAD): the capped read still holds
        info = {}
    if info.get("type") == "directory":
        raise AudioError(f"{uri}: not a regular file (directory)")
    if isinstance(info.get("size"), int):
        _check_size(info["size"], uri, max_bytes)
    with filesystem.open(path, "rb") as handle:
        return _read_capped(handle, uri, max_bytes, abandoned)


def _read_capped(handle: Any, uri: str, max_bytes: int, abandoned: threading.Event) -> bytes:
    """All of `handle`, read in chunks, never more than `max_bytes + 1` bytes (one past the limit tells a file
    that is too large); stops early once the caller has given up on it."""
    chunks: list[bytes] = []
    total = 0
    while total <= max_bytes and not abandoned.is_set():
        chunk = handle.read(min(_READ_CHUNK_BYTES, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > max_bytes:
        raise AudioError(f"{uri}: more than input.max_file_bytes ({max_bytes} bytes, --max-file-bytes)")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class _FetchThreads:
    """Daemon threads that run fetches, so that the caller can stop waiting for one (`read_bytes`).

    Threads are kept between fetches (the common case starts none); one is started only when every thread is
    busy. A fetch past its timeout is abandoned, not stopped (Python cannot interrupt a thread blocked in a
    read): its thread stays busy until the read returns, which for a dead mount may be never, and as a daemon it
    never keeps the process from exiting.
    """

    def __init__(self) -> None:
        self._jobs: SimpleQueue[tuple[Future, Callable[..., Any], tuple[Any, ...]]] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a job, or about to

    def submit(self, function: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        if start:
            threading.Thread(target=self._work, name="audio-fetch", daemon=True).start()
        self._jobs.put((future, function, args))
        return future

    def _work(self) -> None:
        while True:
            future, function, args = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function(*args))
                except BaseException as error:  # handed to the waiting caller by future.result()
                    future.set_exception(error)
            del future, function, args  # an abandoned fetch's bytes must not live on in an idle thread
            with self._lock:
                self._idle += 1

    def _after_fork(self) -> None:
        """A forked child has none of the parent's threads: start from none."""
        self.__init__()


_FETCH_THREADS = _FetchThreads()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_FETCH_THREADS._after_fork)
