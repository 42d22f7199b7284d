"""Remote audio and models that fail: each failure named (`pipeline/io/remote.py`), transient ones retried (the
requests a real server on 127.0.0.1 saw are counted), and a plain http server without range requests read from the
start (`pipeline/io/audio_read.py`, `pipeline/io/fetch.py`)."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import soundfile

from pipeline.config import InputConfig
from pipeline.io import remote
from pipeline.io.audio import AudioError, LoadedAudio, load_audio_batch
from pipeline.io.fetch import fetch_file
from tests.support.s3_server import moto_s3

RATE = 16000
FAST_RETRIES = InputConfig(read_retries=2, read_retry_wait_s=0.01, read_timeout_s=20.0)
ACCESS_HINT = "a presigned URL stops working when it expires: sign it again"
TRIED_3 = re.compile(r"; transient: tried 3 times in [0-9.]+ s \(input\.read_retries, --read-retries\); the same "
                     r"command with --retry-errors tries this row again$")


def tone_wav(seconds: float) -> bytes:
    """A WAV of a 440 Hz tone at 16 kHz, 16-bit."""
    samples = 0.3 * np.sin(2 * np.pi * 440 * np.arange(round(seconds * RATE)) / RATE)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples.astype(np.float32), RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # a client that hangs up mid-body: not a failure here
        pass


@contextmanager
def serving(handler) -> Iterator[str]:
    """`handler` on 127.0.0.1 (a free port), for the block; yields its base URL."""
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def scripted_handler(files: dict[str, bytes], seen: Counter, failures: dict[str, list[int]]):
    """A handler serving `files` (HEAD, GET, GET with a byte range), counting each request in `seen` as
    (method, path), and answering a path's requests with the statuses queued in `failures[path]` first (each
    request takes one; a status listed under "HEAD" or "GET" + path only for that method)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def answer(self, body: bool) -> None:
            seen[(self.command, self.path)] += 1
            for key in (self.command + " " + self.path, self.path):
                queued = failures.get(key)
                if queued:
                    status = queued.pop(0)
                    text = b"no"
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    if body:
                        self.wfile.write(text)
                    return
            data = files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            start, stop = 0, len(data)
            ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if ranged:
                start = int(ranged[1])
                stop = min(stop, int(ranged[2]) + 1) if ranged[2] else stop
            self.send_response(206 if ranged else 200)
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(stop - start))
            self.end_headers()
            if body:
                self.wfile.write(data[start:stop])

        def do_HEAD(self) -> None:
            self.answer(False)

        def do_GET(self) -> None:
            self.answer(True)

    return Handler


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def load(uri: str, offset_s: float | None = None, duration_s: float | None = None,
         limits: InputConfig = FAST_RETRIES) -> LoadedAudio | AudioError:
    return load_audio_batch([uri], RATE, [offset_s], [duration_s], [None], limits)[0]


# ---- http: each failure named; the transient ones retried


@pytest.mark.parametrize(("status", "named"), [
    (404, "file not found (HTTP 404 Not Found)"),
    (410, "file not found (HTTP 410 Gone)"),
    (401, f"access denied (HTTP 401 Unauthorized): the credentials may be missing, expired or lack access to it; "
          f"{ACCESS_HINT}"),
    (403, f"access denied (HTTP 403 Forbidden): the credentials may be missing, expired or lack access to it; "
          f"{ACCESS_HINT}"),
    (400, "refused by the server (HTTP 400 Bad Request)"),
])
@pytest.mark.parametrize("segment", [False, True], ids=["whole", "segment"])
def test_a_final_http_failure_is_named_and_tried_once(status, named, segment):
    seen: Counter = Counter()
    failures = {"/x.wav": [status] * 10}
    with serving(scripted_handler({"/x.wav": tone_wav(2.0)}, seen, failures)) as base:
        outcome = load(f"{base}/x.wav", *((0.5, 1.0) if segment else ()))
    assert str(outcome) == f"{base}/x.wav: {named}"
    assert seen[("HEAD", "/x.wav")] == 1  # not retried


@pytest.mark.parametrize(("status", "named"), [
    (500, "server error (HTTP 500 Internal Server Error)"),
    (502, "server error (HTTP 502 Bad Gateway)"),
    (503, "server error (HTTP 503 Service Unavailable)"),
    (429, "throttled (HTTP 429 Too Many Requests)"),
    (408, "timed out (HTTP 408 Request Timeout)"),
])
def test_a_transient_http_failure_is_named_retried_and_then_an_error_row_that_says_so(status, named):
    """Tried 1 + read_retries times; the next row from the same host, while it is failing, is not retried."""
    seen: Counter = Counter()
    failures = {"/x.wav": [status] * 100, "/y.wav": [status] * 100}
    with serving(scripted_handler({"/x.wav": tone_wav(2.0), "/y.wav": tone_wav(2.0)}, seen, failures)) as base:
        outcome = load(f"{base}/x.wav")
        assert str(outcome).startswith(f"{base}/x.wav: {named}; transient: tried 3 times")
        assert TRIED_3.search(str(outcome)), outcome
        assert seen[("HEAD", "/x.wav")] == 3
        later = load(f"{base}/y.wav", 0.5, 1.0)  # the host failed every retry just now: once, then an error row
        assert str(later) == (f"{base}/y.wav: {named}; transient, not retried: the last read from this host failed "
                              f"every retry less than {remote.FAILING_HOST_S:g} s ago; the same command with "
                              f"--retry-errors tries this row again")
        assert seen[("HEAD", "/y.wav")] == 1


@pytest.mark.parametrize("segment", [False, True], ids=["whole", "segment"])
def test_a_transient_http_failure_that_passes_is_retried_and_the_row_is_read(segment):
    data = tone_wav(3.0)
    seen: Counter = Counter()
    failures = {"/x.wav": [503, 503, 503, 503]}  # the first two attempts: HEAD and fsspec's GET for the size, twice
    with serving(scripted_handler({"/x.wav": data}, seen, failures)) as base:
        outcome = load(f"{base}/x.wav", *((1.0, 1.0) if segment else ()))
    assert isinstance(outcome, LoadedAudio), outcome
    assert len(outcome.samples) == (RATE if segment else 3 * RATE)
    assert seen[("HEAD", "/x.wav")] == 3


def test_a_range_read_that_fails_once_is_retried_within_the_row():
    """The file opened, a byte range of a segment answered 503 once: the range is asked again, the row is read."""
    data = tone_wav(3.0)
    seen: Counter = Counter()
    failures = {"GET /x.wav": [503]}
    with serving(scripted_handler({"/x.wav": data}, seen, failures)) as base:
        outcome = load(f"{base}/x.wav", 1.0, 1.0, InputConfig(read_retries=1, read_retry_wait_s=0.01))
    assert isinstance(outcome, LoadedAudio), outcome
    expected, _ = soundfile.read(io.BytesIO(data), dtype="float32")
    np.testing.assert_array_equal(outcome.samples, expected[RATE:2 * RATE])
    assert seen[("GET", "/x.wav")] >= 2 and seen[("HEAD", "/x.wav")] == 1


def test_no_retries_when_read_retries_is_0():
    seen: Counter = Counter()
    with serving(scripted_handler({}, seen, {"/x.wav": [503] * 10})) as base:
        outcome = load(f"{base}/x.wav", limits=InputConfig(read_retries=0))
    assert "server error (HTTP 503 Service Unavailable); transient: tried 1 time in" in str(outcome)
    assert seen[("HEAD", "/x.wav")] == 1


def test_connection_refused_is_named_and_retried():
    uri = f"http://127.0.0.1:{free_port()}/x.wav"
    outcome = load(uri)
    assert str(outcome).startswith(f"{uri}: connection refused (127.0.0.1:{uri.split(':')[2].split('/')[0]})")
    assert TRIED_3.search(str(outcome)), outcome


def test_a_host_that_does_not_resolve_is_named():
    uri = "http://no-such-host.invalid/x.wav"  # .invalid never resolves (RFC 6761)
    outcome = load(uri, limits=InputConfig(read_retries=0, read_timeout_s=20.0))
    assert str(outcome).startswith(f"{uri}: host not found (no-such-host.invalid: "), outcome
    assert "transient: tried 1 time" in str(outcome)


def test_a_host_that_recovers_is_retried_again():
    """A read that succeeds clears the host's failing mark: the next failure is retried again."""
    seen: Counter = Counter()
    files = {"/a.wav": tone_wav(1.0), "/b.wav": tone_wav(1.0)}
    failures = {"/x.wav": [503] * 100, "/y.wav": [503] * 100}
    with serving(scripted_handler(files, seen, failures)) as base:
        assert "tried 3 times" in str(load(f"{base}/x.wav"))
        assert isinstance(load(f"{base}/a.wav"), LoadedAudio)
        assert "tried 3 times" in str(load(f"{base}/y.wav"))


# ---- a plain http server without range requests (Python's own: it ignores Range)


class _PlainHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("plain")
    # 21 MB each: fsspec's default file reads up to a read plus a block (8 + 5 MiB) from the start of a whole-file
    # answer, and refuses the next range
    (folder / "long.wav").write_bytes(tone_wav(660.0))
    (folder / "model.nemo").write_bytes(np.random.default_rng(0).bytes(20 << 20))
    with serving(functools.partial(_PlainHandler, directory=str(folder))) as base:
        yield base, folder


def test_a_whole_audio_file_from_a_server_without_range_requests_is_read(plain_server):
    base, folder = plain_server
    assert (folder / "long.wav").stat().st_size > 20 << 20
    whole = load(f"{base}/long.wav")
    assert isinstance(whole, LoadedAudio), whole
    np.testing.assert_array_equal(whole.samples, soundfile.read(folder / "long.wav", dtype="float32")[0])


def test_segments_of_audio_from_a_server_without_range_requests_are_read(plain_server):
    base, folder = plain_server
    expected, _ = soundfile.read(folder / "long.wav", dtype="float32")
    offsets, durations = [200.0, 12.5, 600.0], [2.0, 1.5, 3.0]  # one batch: one open, read whole once refused
    segments = load_audio_batch([f"{base}/long.wav"] * 3, RATE, offsets, durations, [None] * 3, FAST_RETRIES)
    for offset_s, duration_s, segment in zip(offsets, durations, segments):
        assert isinstance(segment, LoadedAudio), segment
        start = round(offset_s * RATE)
        np.testing.assert_array_equal(segment.samples, expected[start:start + round(duration_s * RATE)])


def test_a_model_from_a_server_without_range_requests_is_fetched(plain_server, tmp_path):
    base, folder = plain_server
    payload = (folder / "model.nemo").read_bytes()
    path = fetch_file(f"{base}/model.nemo", cache_dir=tmp_path / "cache")
    assert path.read_bytes() == payload
    assert path.name == f"{hashlib.sha256(payload).hexdigest()}.nemo"


# ---- models: named as the OSError of their kind, transient failures retried


def test_a_model_fetch_failure_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "FETCH_RETRY_WAIT_S", 0.01)
    seen: Counter = Counter()
    payload = b"weights" * 1000
    failures = {"/denied.nemo": [403] * 10, "/flaky.nemo": [503] * 4, "/down.nemo": [503] * 100}
    with serving(scripted_handler({"/flaky.nemo": payload}, seen, failures)) as base:
        with pytest.raises(PermissionError, match=re.escape(f"{base}/denied.nemo: access denied (HTTP 403 "
                                                            f"Forbidden)")):
            fetch_file(f"{base}/denied.nemo", cache_dir=tmp_path)
        with pytest.raises(FileNotFoundError, match=re.escape(f"{base}/none.nemo: file not found (HTTP 404")):
            fetch_file(f"{base}/none.nemo", cache_dir=tmp_path)
        assert fetch_file(f"{base}/flaky.nemo", cache_dir=tmp_path).read_bytes() == payload
        assert seen[("HEAD", "/flaky.nemo")] == 3
        with pytest.raises(ConnectionError, match=r"server error \(HTTP 503 Service Unavailable\); transient: tried "
                                                  r"5 times in [0-9.]+ s; the same command tries it again"):
            fetch_file(f"{base}/down.nemo", cache_dir=tmp_path)
        assert seen[("HEAD", "/down.nemo")] == 1 + remote.FETCH_RETRIES
    assert not [p for p in (tmp_path / "blobs").iterdir() if p.name.startswith(".")]  # no partial download left


# ---- S3 (s3fs and botocore): the same names


S3_ERRORS = {"denied": (403, "AccessDenied", "Access Denied")}


class _S3ErrorHandler(BaseHTTPRequestHandler):
    """An S3 endpoint that answers every request naming <name>.wav (a HEAD, a GET, a listing) with the error
    S3_ERRORS[name]: a HEAD without a body, as S3 does."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        status, code, message = next(error for name, error in S3_ERRORS.items() if f"{name}.wav" in self.path)
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
                f"</Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body) if self.command == "GET" else 0))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    do_HEAD = do_GET


def test_s3_failures_are_named(monkeypatch):
    pytest.importorskip("moto")
    s3fs = pytest.importorskip("s3fs")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries, which ours do not repeat
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    with moto_s3("audio"):
        outcome = load("s3://audio/missing.wav", 0.5, 1.0)
        assert str(outcome).startswith("s3://audio/missing.wav: file not found"), outcome  # s3fs: after a list
        assert outcome.failure is not None and not outcome.failure.transient
        with serving(_S3ErrorHandler) as endpoint:
            os.environ["AWS_ENDPOINT_URL"] = endpoint  # moto_s3 puts back what was there before it
            s3fs.S3FileSystem.clear_instance_cache()
            denied = load("s3://bucket/denied.wav")
            assert str(denied).startswith("s3://bucket/denied.wav: access denied (HTTP 403 Forbidden): the "
                                          "credentials may be missing"), denied
        port = free_port()
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
        s3fs.S3FileSystem.clear_instance_cache()
        unreachable = load("s3://bucket/x.wav")
        assert str(unreachable) == (
            f"s3://bucket/x.wav: connection refused (127.0.0.1:{port}); transient, retried by botocore "
            f"(AWS_MAX_ATTEMPTS, AWS_RETRY_MODE); the same command with --retry-errors tries this row again")
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize(("code", "status", "named", "transient"), [
    ("NoSuchKey", 404, "file not found (NoSuchKey: m)", False),
    ("ExpiredToken", 400, "access denied (ExpiredToken: m): the credentials may be missing", False),
    ("SignatureDoesNotMatch", 403, "access denied (SignatureDoesNotMatch: m)", False),
    ("SlowDown", 503, "throttled (SlowDown: m)", True),
    ("InternalError", 500, "server error (InternalError: m)", True),
    ("RequestTimeout", 400, "timed out (RequestTimeout: m)", True),
    ("InvalidArgument", 400, "refused by the server (InvalidArgument: m)", False),
])
def test_s3_error_codes_are_named(code, status, named, transient):
    """What s3fs raises for botocore's error (the `ClientError` as its cause) is named by S3's code."""
    botocore_exceptions = pytest.importorskip("botocore.exceptions")
    s3fs_errors = pytest.importorskip("s3fs.errors")
    error = botocore_exceptions.ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")
    failure = remote.classify_failure(s3fs_errors.translate_boto_error(error))
    assert failure.describe().startswith(named)
    assert (failure.transient, failure.retried_by_backend) == (transient, transient)
