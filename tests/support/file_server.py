"""Files served over plain http on 127.0.0.1 for tests: a model or audio fetched over the network, slowly if asked.

`serve_files(files, bytes_per_s=None, versioned=True)` serves the mapping `files` (URL path -> bytes; the test may
replace a value while it runs, as a nightly job overwrites `models/latest.nemo`) with HEAD, GET and byte ranges
(`Range: bytes=a-b`, answered 206), the `ETag` of the current bytes where `versioned` (a server without one is a
plain file server that says nothing of versions), and at most `bytes_per_s` bytes a second per response where
given, so that a fetch takes seconds as a multi-GB model's does. Yields the base URL; every request is recorded in
`served.requests` as (method, path).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK_BYTES = 64 << 10


@dataclass
class ServedFiles:
    url: str
    files: dict[str, bytes]
    bytes_per_s: float | None = None  # a test may change it while the server runs
    requests: list[tuple[str, str]] = field(default_factory=list)


@contextmanager
def serve_files(files: dict[str, bytes], bytes_per_s: float | None = None,
                versioned: bool = True) -> Iterator[ServedFiles]:
    served = ServedFiles(url="", files=files, bytes_per_s=bytes_per_s)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _body(self) -> bytes | None:
            served.requests.append((self.command, self.path))
            body = served.files.get(self.path)
            if body is None:
                self.send_error(404)
            return body

        def _headers(self, status: int, body: bytes, length: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            if versioned:
                self.send_header("ETag", f'"{hashlib.sha1(body).hexdigest()}"')

        def do_HEAD(self) -> None:  # noqa: N802 (the name http.server calls)
            body = self._body()
            if body is not None:
                self._headers(200, body, len(body))
                self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            body = self._body()
            if body is None:
                return
            start, end = 0, len(body) - 1
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes="):
                first, _, last = ranged[len("bytes="):].partition("-")
                start = int(first) if first else max(len(body) - int(last), 0)
                end = min(int(last), len(body) - 1) if first and last else len(body) - 1
            piece = body[start:end + 1]
            self._headers(206 if ranged else 200, body, len(piece))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
            self.end_headers()
            began = time.monotonic()
            try:
                for offset in range(0, len(piece), CHUNK_BYTES):
                    self.wfile.write(piece[offset:offset + CHUNK_BYTES])
                    if served.bytes_per_s:  # hold each response to the rate
                        time.sleep(max(0.0, began + (offset + CHUNK_BYTES) / served.bytes_per_s - time.monotonic()))
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
