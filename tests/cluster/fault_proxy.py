"""An HTTP proxy in front of the moto S3 server that injects faults, for the multihost tests.

    python fault_proxy.py LISTEN_HOST LISTEN_PORT UPSTREAM_HOST:PORT MODE_FILE

MODE_FILE is read on every request (the test rewrites it while a job runs):
    pass                   forward everything
    flaky:<fraction>       that fraction of requests, at random, gets one of: 500 InternalError, 503 SlowDown,
                           the connection closed before forwarding, or the request forwarded and the connection
                           closed before the answer (the write happened; the client does not know)
    deny-writes:<prefix>   PUT, POST and DELETE of keys under /<prefix> get 403 AccessDenied; the rest is forwarded

Each fault is logged on stdout, one line each, so a test can count them.
"""

from __future__ import annotations

import http.client
import random
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM_HOST, UPSTREAM_PORT = "", 0
MODE_FILE = ""
RANDOM = random.Random(0)
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

    def handle_any(self) -> None:
        body = self.read_body()
        try:
            with open(MODE_FILE) as handle:
                mode = handle.read().strip()
        except OSError:
            mode = "pass"
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


def main() -> None:
    global UPSTREAM_HOST, UPSTREAM_PORT, MODE_FILE
    host, port, upstream, MODE_FILE = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    UPSTREAM_HOST, UPSTREAM_PORT = upstream.rsplit(":", 1)[0], int(upstream.rsplit(":", 1)[1])
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
