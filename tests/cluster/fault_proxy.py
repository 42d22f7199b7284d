"""An HTTP proxy in front of the moto S3 server that injects faults, for the multihost tests.

    python fault_proxy.py LISTEN_HOST LISTEN_PORT UPSTREAM_HOST:PORT MODE_FILE

MODE_FILE is read on every request (the test rewrites it while a job runs):
    pass                   forward everything
    flaky:<fraction>       that fraction of requests, at random, gets one of: 500 InternalError, 503 SlowDown,
                           the connection closed before forwarding, or the request forwarded and the connection
                           closed before the answer (the write happened; the client does not know)
    deny-writes:<prefix>   PUT, POST and DELETE of keys under /<prefix> get 403 AccessDenied; the rest is forwarded
    hold-gets:<n>:<glob>   the first n GETs of paths matching <glob> (fnmatch, e.g. /lsc/data/*.flac) are forwarded,
                           later ones wait until the mode changes (a storage that stops answering: the job stays
                           mid-way, with rows still to read, for as long as the test wants); the rest is forwarded

Each fault and each held request is logged on stdout, one line each, so a test can count them; so is every
write that succeeded (`wrote 200 PUT /path`), so a test can watch parts being committed without listing S3.
"""

from __future__ import annotations

import fnmatch
import http.client
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM_HOST, UPSTREAM_PORT = "", 0
MODE_FILE = ""
RANDOM = random.Random(0)
HOLD_LOCK = threading.Lock()
HOLD_COUNTS: dict[tuple[str, int], int] = {}  # (mode, the mode file's mtime) -> GETs matched so far: each time the
                                              # test sets a hold mode, even the same one again, it counts from 0
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade", "trailer"}


def error_body(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>fault-proxy</RequestId></Error>").encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: only faults are logged
        pass

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length", 0) or 0)
        return self.rfile.read(length) if length else b""

    def fault(self, status: int, code: str, message: str) -> None:
        body = error_body(code, message)
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        print(f"fault {status} {code} {self.command} {self.path}", flush=True)

    def drop(self, what: str) -> None:
        print(f"fault drop-{what} {self.command} {self.path}", flush=True)
        self.close_connection = True
        self.connection.shutdown(2)

    def hold(self, mode: str) -> None:
        """Wait while `mode` is in force and this GET is past its first n matches (`hold-gets:<n>:<glob>`)."""
        count, pattern = mode.split(":", 2)[1:]
        if self.command != "GET" or not fnmatch.fnmatchcase(self.path.split("?", 1)[0], pattern):
            return
        try:
            key = (mode, os.stat(MODE_FILE).st_mtime_ns)
        except OSError:
            return
        with HOLD_LOCK:
            HOLD_COUNTS[key] = HOLD_COUNTS.get(key, 0) + 1
            if HOLD_COUNTS[key] <= int(count):
                return
        print(f"held {self.command} {self.path}", flush=True)
        while read_mode() == mode:
            time.sleep(0.1)

    def handle_any(self) -> None:
        body = self.read_body()
        mode = read_mode()
        if mode.startswith("hold-gets:"):
            self.hold(mode)
        drop_after = False
        if mode.startswith("flaky:") and RANDOM.random() < float(mode.split(":", 1)[1]):
            kind = RANDOM.choice(["500", "503", "drop-before", "drop-after"])
            if kind == "500":
                return self.fault(500, "InternalError", "injected by fault_proxy")
            if kind == "503":
                return self.fault(503, "SlowDown", "Please reduce your request rate.")
            if kind == "drop-before":
                return self.drop("before")
            drop_after = True
        if mode.startswith("deny-writes:") and self.command in ("PUT", "POST", "DELETE"):
            prefix = "/" + mode.split(":", 1)[1].lstrip("/")
            if self.path.startswith(prefix):
                return self.fault(403, "AccessDenied", "Access Denied (injected by fault_proxy)")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection(UPSTREAM_HOST, UPSTREAM_PORT, timeout=60)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
        finally:
            upstream.close()
        if drop_after:
            return self.drop("after")
        if self.command in ("PUT", "POST", "DELETE") and response.status < 300:
            print(f"wrote {response.status} {self.command} {self.path}", flush=True)
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in HOP_HEADERS and key.lower() != "content-length":
                self.send_header(key, value)
        # a HEAD answer's length is the object's, with no body
        self.send_header("Content-Length", response.getheader("Content-Length", "0") if self.command == "HEAD"
                         else str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def read_mode() -> str:
    try:
        with open(MODE_FILE) as handle:
            return handle.read().strip()
    except OSError:
        return "pass"


def main() -> None:
    global UPSTREAM_HOST, UPSTREAM_PORT, MODE_FILE
    host, port, upstream, MODE_FILE = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    UPSTREAM_HOST, UPSTREAM_PORT = upstream.rsplit(":", 1)[0], int(upstream.rsplit(":", 1)[1])
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
