"""A file's bytes for `pipeline.io.audio`, within bounds: fetched whole (`read_bytes`), or opened once for the
segments of a batch and read by byte range on demand (`open_source`, `RangeReader`). Decoding is
`pipeline.io.audio`'s; this module does not import it.

Any failure raises `AudioError` whose message names the file (its URI) and the cause:

- missing: "file not found" (over http or S3, with what the backend said: "file not found (HTTP 404 Not Found)").
- remote storage failing: what it was (`pipeline.io.remote`): "access denied (HTTP 403 Forbidden): the credentials
  may be missing, expired ...", "connection refused (host:port)", "host not found", "timed out", "connection lost",
  "throttled (HTTP 429 ...)", "server error (HTTP 503 ...)". The transient ones are tried again, at most
  `input.read_retries` times (`--read-retries`), waiting `input.read_retry_wait_s` and then twice as long each time,
  all within the read's `read_timeout_s` (`call_within`); one that outlasts them says so, and that the same command
  with `--retry-errors` tries the row again.
- a local path that is not a regular file (FIFO, socket, device, directory): "not a regular file (FIFO)",
  found with `os.stat` before the file is opened (opening a FIFO nobody writes to blocks forever).
- larger than `input.max_file_bytes` (`--max-file-bytes`): an error naming the size and the limit. A local
  file's size is checked before it is opened, a remote one's where the backend tells it; no read takes more
  than `max_file_bytes + 1` bytes, so a file that grows or whose size is unknown is refused all the same.
- a fetch taking longer than `input.read_timeout_s` (`--read-timeout-s`): "read timed out after 60 s"; a
  segment's range reads are bounded together, in time and bytes, as one fetch is (below).
Messages never carry an object's repr (`without_object_reprs`, which `pipeline.io.audio` applies to libsndfile's
reasons too).

Paths: a URI without "://" and a `file://` URI are local files, opened with `os.open`, never through fsspec, and
taken literally (`x::y.wav`, `a#b [1].wav`, spaces and non-ASCII names; no chain, glob or fragment parsing, no
percent-decoding, no `~` expansion). Anything else with "://" goes through fsspec (chains included). A whole file
is read from its start in one request where the backend can (`pipeline.io.remote.open_from_start`: a streaming GET
over http), so a plain http server without range requests serves it; a segment of a file on such a server is read
by range until the server answers a range with the whole file, and then from the file read whole (`_Source`).

Segments (a row with an offset or a duration) are read by byte range where libsndfile seeks cheaply: WAV (PCM,
float, u-law, IMA ADPCM), W64, RF64, AIFF, AU and CAF (PCM, ALAC) read the segment and the header, FLAC that plus a
few seek probes, all sample-exact against the whole file decoded (`RANGE_FORMATS`). Other formats are fetched
whole, once for all of a file's rows in a batch: Ogg Vorbis and Opus seek by bisection, reading several times a
short segment's bytes, and MP3 reads most of the file to seek (measured in docs/benchmarks.md, "Reading segments
by byte range"). A remote file whose size the backend does not tell is read whole too (`read_bytes`). The rows of
one batch that name one file share one open of it and are read in order of offset through a cache of what was
fetched (`RangeReader`, sized by what the decoder is about to decode), so neighbouring cuts fetch their common
bytes about once (tests/pipeline/io/test_audio_read.py bounds it at 1.2x). A row's range reads are bounded
together as one fetch is: they wait at most `read_timeout_s` in all and fetch at most `max_file_bytes + 1` bytes (a
FLAC whose seek table lies gets a clear error, "cannot reach offset", having read little); a read that times out or
fails fails its row and the file's rows after it in the batch.

Timeouts: a fetch (a whole file, or one byte range) runs in a daemon worker thread, reused between files
(`_FetchThreads`), and the caller waits at most `read_timeout_s`. A read that outlives it cannot be interrupted:
its thread is abandoned, stops at the next chunk if the read ever returns, and being a daemon never keeps the
process from exiting; a file read by range is closed once that read returns. Decoding runs in the caller's thread
(`pipeline.io.audio`: on bytes already in memory, or asking the range reader for the next bytes).
"""

from __future__ import annotations

import bisect
import io
import math
import os
import re
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, wait
from queue import SimpleQueue
from typing import Any

import fsspec

from pipeline.config import InputConfig
from pipeline.io.remote import (
    RetriesSpent,
    StorageFailure,
    classify_failure,
    host_of,
    is_http,
    is_range_refusal,
    open_from_start,
    retry_transient,
)
from pipeline.io.uris import local_path

DEFAULT_LIMITS = InputConfig()

_READ_CHUNK_BYTES = 8 << 20  # one read call of a fetch; an abandoned fetch stops at the next one
# formats read by range (libsndfile seeks in them reading about what a segment needs: measured, module docstring);
# libsndfile's names (`SoundFile.format`). Others are fetched whole, once for all the rows of the file in a batch.
RANGE_FORMATS = frozenset({"WAV", "WAVEX", "W64", "RF64", "AIFF", "AU", "CAF", "FLAC"})
_MIN_FETCH_BYTES = 16 << 10  # a range read that nothing predicts: a header, a seek probe
_MAX_FETCH_BYTES = _READ_CHUNK_BYTES
_CACHE_BYTES = 3 * _MAX_FETCH_BYTES  # what one open file keeps of what it fetched
_EXPECT_MARGIN = 0.1  # fetch this much more than a chunk of frames takes at the file's average bytes per frame


class AudioError(Exception):
    """Audio that cannot be used, with the reason; the message names the file. `failure` says what a failed read of
    remote storage was (None for anything else), so that a transient one can be tried again."""

    def __init__(self, message: str, failure: StorageFailure | None = None) -> None:
        super().__init__(message)
        self.failure = failure


_OBJECT_REPR = re.compile(r"<[^<>]*\bat 0x[0-9a-fA-F]+>|<_io\.[^<>]*>")


def without_object_reprs(message: str) -> str:
    """`message` without the reprs of objects in it (`<_io.BytesIO object at 0x...>`): what a user reads names the
    file, never a Python object."""
    return _OBJECT_REPR.sub("", message)


def read_bytes(uri: str, limits: InputConfig = DEFAULT_LIMITS) -> bytes:
    """The bytes of one audio file, at most `limits.max_file_bytes` of them, fetched within
    `limits.read_timeout_s` seconds, retries included (see the module docstring for local paths, retries and the
    worker thread)."""
    return call_within(time.monotonic() + limits.read_timeout_s, limits, uri, _fetch, uri, limits.max_file_bytes)

def _fetch(uri: str, max_bytes: int, abandoned: threading.Event) -> bytes:
    """Runs in a fetch thread: the file's bytes, or AudioError naming it."""
    local = local_path(uri)
    try:
        if local is not None:
            return _read_local(local, uri, max_bytes, abandoned)
        return _read_remote(uri, max_bytes, abandoned)
    except Exception as error:
        raise _read_error(uri, error) from None


def _read_error(uri: str, error: Exception) -> AudioError:
    """What a failed open or read says, naming the file: for remote storage, what the failure was
    (`pipeline.io.remote.classify_failure`)."""
    if isinstance(error, AudioError):
        return error
    if local_path(uri) is None:
        failure = classify_failure(error)
        if failure is not None:
            return AudioError(f"{uri}: {without_object_reprs(failure.describe())}", failure)
    if isinstance(error, (FileNotFoundError, NotADirectoryError)):
        return AudioError(f"{uri}: file not found")
    if isinstance(error, IsADirectoryError):
        return AudioError(f"{uri}: not a regular file (directory)")
    if isinstance(error, OSError):
        return AudioError(f"{uri}: cannot read ({type(error).__name__}: {error.strerror or error})")
    # fsspec backends raise their own types (botocore, gcsfs, aiohttp ...)
    return AudioError(f"{uri}: cannot read ({type(error).__name__}: {without_object_reprs(str(error))})")


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
    with _open_local(path, uri, max_bytes) as handle:
        return _read_capped(handle, uri, max_bytes, abandoned)


def _open_local(path: str, uri: str, max_bytes: int) -> io.FileIO:
    """A regular local file within the size cap, opened unbuffered; anything else refused before it is opened."""
    status = os.stat(path)
    _check_regular(status.st_mode, status.st_size, uri, max_bytes)  # before open: opening a FIFO can block
    # O_NONBLOCK: were the path swapped for a FIFO since the stat, opening it still returns at once
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    handle = open(descriptor, "rb", buffering=0)
    try:
        status = os.fstat(descriptor)
        _check_regular(status.st_mode, status.st_size, uri, max_bytes)
    except BaseException:
        handle.close()
        raise
    return handle


def _read_remote(uri: str, max_bytes: int, abandoned: threading.Event) -> bytes:
    filesystem, path = fsspec.core.url_to_fs(uri)
    return _read_from_start(filesystem, path, uri, max_bytes, abandoned,
                            _remote_size(filesystem, path, uri, max_bytes)[0])


def _read_from_start(filesystem: fsspec.AbstractFileSystem, path: str, uri: str, max_bytes: int,
                     abandoned: threading.Event, size: int | None = None) -> bytes:
    with open_from_start(filesystem, path, size) as handle:
        return _read_capped(handle, uri, max_bytes, abandoned)


def _remote_size(filesystem: fsspec.AbstractFileSystem, path: str, uri: str, max_bytes: int
                 ) -> tuple[int | None, bool]:
    """A remote file's size where the backend tells it (checked against the cap), else None, and whether it can be
    read by range (not where an http server says `Accept-Ranges: none`); a directory is refused. A failure of the
    storage (`classify_failure`: missing, denied, unreachable) is raised."""
    try:
        info = filesystem.info(path)
    except Exception as error:
        if isinstance(error, FileNotFoundError) or classify_failure(error) is not None:
            raise
        info = {}  # some backends cannot tell: the capped read still holds
    if info.get("type") == "directory":
        raise AudioError(f"{uri}: not a regular file (directory)")
    size = info.get("size")
    if isinstance(size, int) and not isinstance(size, bool):
        _check_size(size, uri, max_bytes)
        return size, info.get("partial", True) is not False
    return None, False


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


# ---- range reads: a file opened once for the rows of a batch, read by byte range on demand


def open_source(uri: str, max_bytes: int, abandoned: threading.Event) -> _Source | bytes:
    """Runs in a fetch thread: the file opened for range reads, or, where a remote backend cannot tell its size,
    its bytes (read whole, capped). Refuses what `read_bytes` refuses, before opening it."""
    try:
        local = local_path(uri)
        if local is not None:
            handle = _open_local(local, uri, max_bytes)
            source = _Source(handle, os.fstat(handle.fileno()).st_size)
        else:
            filesystem, path = fsspec.core.url_to_fs(uri)
            size, ranges = _remote_size(filesystem, path, uri, max_bytes)
            if size is None or not ranges:
                return _read_from_start(filesystem, path, uri, max_bytes, abandoned, size)
            try:  # each read one ranged request: `RangeReader` decides what to fetch and keeps it
                # (over http the size given, or fsspec asks the server for it again)
                handle = filesystem.open(path, "rb", cache_type="none", **({"size": size} if is_http(filesystem)
                                                                             else {}))
            except TypeError:  # a backend whose open takes no cache options
                handle = filesystem.open(path, "rb")
            source = _Source(handle, size, lambda abandoned: _read_from_start(filesystem, path, uri, max_bytes,
                                                                               abandoned, size))
    except Exception as error:
        raise _read_error(uri, error) from None
    if abandoned.is_set():  # the caller stopped waiting: nobody will close it
        source.close()
    return source


class _Source:
    """One open file read by byte range, one read at a time (`lock`), in the fetch threads. A close waits for a
    read still under way (one the caller gave up on) instead of closing the file under it.

    A server that answers a range with the whole file (a plain http server) cannot be read by range: then the file
    is read whole from its start (`read_whole`, capped like any read) and the ranges are served from its bytes."""

    def __init__(self, handle: Any, size: int,
                 read_whole: Callable[[threading.Event], bytes] | None = None) -> None:
        self.handle, self.size, self.read_whole = handle, size, read_whole
        self.lock = threading.Lock()
        self.closed = False
        self.whole: bytes | None = None  # the file's bytes, once ranges were refused

    def read(self, start: int, stop: int, abandoned: threading.Event) -> bytes:
        """Bytes `start` to `stop` (fewer only at the end of the file)."""
        with self.lock:
            if self.closed or abandoned.is_set():
                return b""
            if self.whole is None:
                try:
                    return self._read_range(start, stop, abandoned)
                except Exception as error:
                    if self.read_whole is None or not is_range_refusal(error):
                        raise
                    self.whole = self.read_whole(abandoned)
            return self.whole[start:stop]

    def _read_range(self, start: int, stop: int, abandoned: threading.Event) -> bytes:
        self.handle.seek(start)
        parts: list[bytes] = []
        wanted = stop - start
        while wanted > 0 and not abandoned.is_set():
            part = self.handle.read(wanted)
            if not part:
                break
            parts.append(part)
            wanted -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        if self.lock.acquire(blocking=False):
            try:
                self._close()
            finally:
                self.lock.release()
        else:  # a read outlived its caller's wait: close once it returns, without waiting for it here
            _FETCH_THREADS.submit(self._close_after_read)

    def _close_after_read(self) -> None:
        with self.lock:
            self._close()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.handle.close()
            except Exception:  # nothing was written: a failed close loses nothing
                pass


class RangeReader(io.RawIOBase):
    """A seekable, read-only view of a `_Source` that libsndfile reads through: what it reads is fetched by byte
    range on demand, in the fetch threads, and kept in a small cache of extents (at most `_CACHE_BYTES`), so that
    the next cut of the same file finds its start (and libFLAC its seek probes) already there.

    How much one fetch takes: the decoder says how many frames it is about to decode (`expect`), turned into
    bytes at the file's average bytes per frame plus `_EXPECT_MARGIN`; past that, a run of sequential reads
    doubles its fetches; a read elsewhere (a header, a seek probe) fetches `_MIN_FETCH_BYTES`. Fetches never
    exceed `_MAX_FETCH_BYTES` and never fetch bytes already cached.

    Bounds, per row (`begin_row`): its fetches together wait at most `read_timeout_s`, and take at most
    `max_file_bytes + 1` bytes (a FLAC whose seek points lie cannot make a row fetch a file many times over).
    A failed or timed-out fetch is kept in `failure` (the reader then reads as at the end of the file, and
    libsndfile stops), and the rows after it fail with it: the file cannot be read.
    """

    def __init__(self, source: _Source, uri: str, limits: InputConfig) -> None:
        super().__init__()
        self.source, self.uri, self.limits, self.size = source, uri, limits, source.size
        self.failure: AudioError | None = None
        self.bytes_fetched = 0  # all rows together: what the backend sent
        self.fetches = 0
        self._broken: AudioError | None = None  # a failed or timed-out fetch: every later row fails with it
        self._position = 0
        self._starts: list[int] = []  # sorted starts of the cached extents, which never overlap
        self._extents: OrderedDict[int, memoryview] = OrderedDict()  # start -> bytes, least recently used first
        self._cached_bytes = 0
        self._whole = False
        self._bytes_per_frame: float | None = None
        self._expected_end = 0  # the byte the decoder's current chunk is expected to end at
        self._last_stop, self._last_size, self._last_grows = -1, 0, False  # the last fetch: a sequential run?
        self._deadline = math.inf
        self._row_bytes = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(view) and self._position < self.size and self.failure is None:
            extent = self._extent_at(self._position)
            if extent is None:
                self._fetch_at(self._position)
                continue
            start, data = extent
            at = self._position - start
            count = min(len(data) - at, len(view) - filled)
            view[filled:filled + count] = data[at:at + count]
            filled += count
            self._position += count
        return filled

    # -- what the rows and the decoder tell it

    def begin_row(self) -> None:
        """A new row: its own time and byte budgets; the failure of a fetch stays."""
        self._deadline = time.monotonic() + self.limits.read_timeout_s
        self._row_bytes = 0
        self._expected_end = 0
        self._position = 0
        self.failure = self._broken

    def plan(self, frames: int | None) -> None:
        """The file's frame count as its header declares it (None: unknown), for `expect`."""
        self._bytes_per_frame = self.size / frames if frames else None

    def expect(self, frames: int) -> None:
        """The decoder is about to decode `frames` frames from here."""
        if self._bytes_per_frame is not None and not self._whole:
            self._expected_end = self._position + math.ceil(frames * self._bytes_per_frame * (1 + _EXPECT_MARGIN))

    def fetch_whole(self) -> None:
        """Fetch the rest of the file (what is cached is not fetched again) and keep all of it for all rows: a
        format whose seeks read much of the file."""
        if self._whole:
            return
        data = bytearray(self.size)
        at = 0
        while at < self.size:
            extent = self._extent_at(at)
            if extent is not None:
                start, part = extent
                part = part[at - start:]
            else:
                index = bisect.bisect_right(self._starts, at)
                stop = min(at + _MAX_FETCH_BYTES, self._starts[index] if index < len(self._starts) else self.size)
                part = self._fetch(at, stop)
                if part is None:
                    raise self.failure  # type: ignore[misc]  # `_fetch` sets it
            data[at:at + len(part)] = part
            at += len(part)
        self._starts, self._extents = [0], OrderedDict({0: memoryview(data)})
        self._cached_bytes, self._whole = self.size, True

    def release(self) -> None:
        """Drop the cache and close the file (after a read still under way, if one is)."""
        self._starts, self._extents, self._cached_bytes = [], OrderedDict(), 0
        self.source.close()
        self.close()

    # -- the cache

    def _extent_at(self, position: int) -> tuple[int, memoryview] | None:
        index = bisect.bisect_right(self._starts, position) - 1
        if index < 0:
            return None
        start = self._starts[index]
        data = self._extents[start]
        if position >= start + len(data):
            return None
        self._extents.move_to_end(start)
        return start, data

    def _fetch_at(self, position: int) -> None:
        if self._expected_end > position:
            size, grows = self._expected_end - position, False
        elif position == self._last_stop and self._last_grows:  # a sequential run nothing predicted: grow
            size, grows = 2 * self._last_size, True
        else:  # a header, a seek probe, or just past what was expected (the estimate was a little short)
            size, grows = _MIN_FETCH_BYTES, position == self._last_stop
        size = min(max(size, _MIN_FETCH_BYTES), _MAX_FETCH_BYTES)
        index = bisect.bisect_right(self._starts, position)
        stop = min(position + size, self._starts[index] if index < len(self._starts) else self.size)
        data = self._fetch(position, stop)
        if data is None:
            return
        self._last_stop, self._last_size, self._last_grows = position + len(data), len(data), grows
        self._starts.insert(index, position)
        self._extents[position] = memoryview(data)
        self._cached_bytes += len(data)
        while self._cached_bytes > _CACHE_BYTES and len(self._extents) > 1:
            start, evicted = self._extents.popitem(last=False)
            self._starts.pop(bisect.bisect_left(self._starts, start))
            self._cached_bytes -= len(evicted)

    def _fetch(self, start: int, stop: int) -> bytes | None:
        """Bytes `start` to `stop` (at least one) from the source within the row's budgets, or None with
        `failure` set."""
        stop = min(stop, start + self.limits.max_file_bytes + 1 - self._row_bytes)
        try:
            data = call_within(self._deadline, self.limits, self.uri, self.source.read, start, stop)
        except AudioError as error:
            self.failure = self._broken = error
            return None
        self.bytes_fetched += len(data)
        self.fetches += 1
        self._row_bytes += len(data)
        if self._row_bytes > self.limits.max_file_bytes:
            self.failure = AudioError(f"{self.uri}: reading this row took more than input.max_file_bytes "
                                      f"({self.limits.max_file_bytes} bytes, --max-file-bytes)")
            return None
        if not data:  # the size said there was more
            self.failure = self._broken = AudioError(
                f"{self.uri}: the file ends at byte {start}, before the {self.size} bytes its size said (it "
                f"shrank while being read)")
            return None
        return data


def call_within(deadline: float, limits: InputConfig, uri: str, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args, abandoned)` in a fetch thread, waited on until `deadline` (`time.monotonic()`); its
    exception, or "read timed out" (the thread abandoned, `abandoned` set), is raised as AudioError. A transient
    failure of remote storage is tried again (`pipeline.io.remote.retry_transient`: `limits.read_retries` times at
    most, from `limits.read_retry_wait_s` doubling, all before `deadline`); one that outlasts the retries says so."""
    if local_path(uri) is not None:  # a local file's failures are not transient
        return _call_once(deadline, limits, uri, function, *args)
    try:
        return retry_transient(lambda: _call_once(deadline, limits, uri, function, *args),
                               lambda error: error.failure if isinstance(error, AudioError) else None,
                               host_of(uri), limits.read_retries, limits.read_retry_wait_s, deadline,
                               "input.read_retries, --read-retries",
                               "the same command with --retry-errors tries this row again")
    except RetriesSpent as spent:
        raise AudioError(f"{spent.error}{spent.note}", spent.failure) from None


def _call_once(deadline: float, limits: InputConfig, uri: str, function: Callable[..., Any], *args: Any) -> Any:
    abandoned = threading.Event()
    timeout_s = deadline - time.monotonic()
    done = set()
    if timeout_s > 0:
        future = _FETCH_THREADS.submit(function, *args, abandoned)
        done, _ = wait([future], timeout=timeout_s)
    if not done:
        abandoned.set()
        raise AudioError(f"{uri}: read timed out after {limits.read_timeout_s:g} s (input.read_timeout_s, "
                         f"--read-timeout-s)")
    try:
        return future.result()
    except Exception as error:
        raise _read_error(uri, error) from None


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
