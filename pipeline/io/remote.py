"""Remote storage read through fsspec, as a user needs it read: what a failed read was, in words a user acts on
(`classify_failure`), whether trying again may help and how long to wait (`retry_transient`), and a file opened to
be read from its start to its end in one request (`open_from_start`), which is how a plain http server without
range requests can be read at all.

What a failure is called (`StorageFailure.kind`), and whether it is retried (transient) or final:

| kind | from | transient |
| --- | --- | --- |
| file not found | HTTP 404 or 410, S3 NoSuchKey / NoSuchBucket, FileNotFoundError | no |
| access denied (a hint: expired credentials, presigned URLs) | HTTP 401 or 403, S3 AccessDenied, ExpiredToken | no |
| refused by the server | any other HTTP 4xx (400, 405, ...) | no |
| TLS failed | a certificate not trusted, a TLS handshake that fails | no |
| connection refused | nothing listening at the host and port | yes |
| host not found | DNS gives no address for the host (a typo, or a resolver hiccup: retried all the same) | yes |
| cannot connect | any other failure to connect (an unreachable network, an S3 endpoint botocore cannot reach) | yes |
| timed out | a backend's own connect or read timeout, HTTP 408, S3 RequestTimeout | yes |
| connection lost | the server closed the connection, a body cut short | yes |
| throttled | HTTP 429, S3 SlowDown and other throttling codes | yes |
| server error | HTTP 5xx | yes |

Each backend wraps its errors its own way: fsspec's HTTP filesystem raises `FileNotFoundError(url)` for every
failure of its size request, with the aiohttp error as the cause; s3fs turns a botocore `ClientError` into an
`OSError` subclass with the `ClientError` as the cause, and lets connection errors through. So the chain of causes
is read, the deepest recognised error first (the most precise: a `ConnectionRefusedError` under botocore's
`EndpointConnectionError`).

Retries (`retry_transient`): a transient failure is tried again after a wait that starts at `first_wait_s` and
doubles (times a random 0.8 to 1.2, so that actors do not retry in step), at most `retries` times and never past a
deadline. botocore retries its own transient errors (settings: `AWS_MAX_ATTEMPTS`, `AWS_RETRY_MODE`; see
docs/reliability.md), so a failure that went through botocore is not retried again here. A host whose last read
failed every retry (an outage) is not retried for `FAILING_HOST_S` seconds after that, or until a read from it
succeeds: each row of an outage then fails at once, with its cause, instead of waiting out the whole back-off. A
transient failure that outlasts its retries is `RetriesSpent`, whose `note` says what was tried and that the same
command with `--retry-errors` tries such rows again.
"""

from __future__ import annotations

import math
import random
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

FAILING_HOST_S = 30.0  # after a read gave up on a host, its next reads are not retried for this long
_CHAIN_DEPTH = 8  # causes followed at most
_ACCESS_HINT = ("the credentials may be missing, expired or lack access to it; a presigned URL stops working when it "
                "expires: sign it again")

_S3_NOT_FOUND = {"NoSuchKey", "NoSuchBucket", "NotFound", "404"}
_S3_DENIED = {"AccessDenied", "AllAccessDisabled", "AccountProblem", "ExpiredToken", "InvalidAccessKeyId",
              "InvalidToken", "SignatureDoesNotMatch", "TokenRefreshRequired", "InvalidObjectState", "401", "403"}
_S3_THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
                 "RequestThrottled", "429"}


@dataclass(frozen=True)
class StorageFailure:
    """What a failed read of storage was: `kind` (the table of the module docstring), what the backend said
    (`detail`: "HTTP 403 Forbidden", "127.0.0.1:1"), whether trying again may help, and whether the backend itself
    retried it already (botocore)."""

    kind: str
    detail: str = ""
    transient: bool = False
    retried_by_backend: bool = False

    def describe(self) -> str:
        """"access denied (HTTP 403 Forbidden): the credentials may be ...": what an error row or a job says."""
        text = f"{self.kind} ({self.detail})" if self.detail else self.kind
        return f"{text}: {_ACCESS_HINT}" if self.kind == "access denied" else text


def classify_failure(error: BaseException) -> StorageFailure | None:
    """What `error` (raised by an fsspec backend, or wrapping what one raised) says about the storage, or None
    where it says nothing this module knows (the caller then quotes it as it is)."""
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and len(chain) < _CHAIN_DEPTH and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    through_botocore = any(type(link).__module__.startswith("botocore") for link in chain)
    # the deepest first, as the most precise; a library's error before a builtin one, as it names the host
    for classify in (_library_failure, _builtin_failure):
        for link in reversed(chain):
            failure = classify(link)
            if failure is not None:
                if through_botocore and failure.transient:
                    return StorageFailure(failure.kind, failure.detail, True, retried_by_backend=True)
                return failure
    return None


def _by_status(status: int, reason: str) -> StorageFailure:
    detail = f"HTTP {status} {reason}".rstrip()
    if status in (404, 410):
        return StorageFailure("file not found", detail)
    if status in (401, 403):
        return StorageFailure("access denied", detail)
    if status == 408:
        return StorageFailure("timed out", detail, transient=True)
    if status == 429:
        return StorageFailure("throttled", detail, transient=True)
    if status >= 500:
        return StorageFailure("server error", detail, transient=True)
    return StorageFailure("refused by the server", detail)


def _library_failure(error: BaseException) -> StorageFailure | None:
    return _aiohttp_failure(error) or _botocore_failure(error)


def _aiohttp_failure(error: BaseException) -> StorageFailure | None:
    aiohttp = sys.modules.get("aiohttp")  # not imported: the error cannot be one of its
    if aiohttp is None:
        return None
    if isinstance(error, aiohttp.ClientResponseError):
        return _by_status(int(error.status), str(error.message or ""))
    if isinstance(error, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return StorageFailure("TLS failed", _reason(error))
    if isinstance(error, aiohttp.ClientConnectorError):
        where = f"{error.host}:{error.port}"
        cause = error.os_error
        if isinstance(error, getattr(aiohttp, "ClientConnectorDNSError", ())) or isinstance(cause, socket.gaierror):
            return StorageFailure("host not found", f"{error.host}: {cause.strerror or cause}", transient=True)
        if isinstance(cause, ConnectionRefusedError):
            return StorageFailure("connection refused", where, transient=True)
        if isinstance(cause, TimeoutError):
            return StorageFailure("timed out", f"connecting to {where}", transient=True)
        return StorageFailure("cannot connect", f"{where}: {cause.strerror or cause}", transient=True)
    if isinstance(error, aiohttp.ServerTimeoutError):
        return StorageFailure("timed out", _reason(error), transient=True)
    if isinstance(error, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError)):
        return StorageFailure("connection lost", _reason(error), transient=True)
    return None


def _botocore_failure(error: BaseException) -> StorageFailure | None:
    exceptions = sys.modules.get("botocore.exceptions")
    if exceptions is None:
        return None
    if isinstance(error, exceptions.ClientError):
        response: dict[str, Any] = getattr(error, "response", None) or {}
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        message = str(response.get("Error", {}).get("Message", "") or "")
        if code.isdigit():  # an answer without a body (to a HEAD) has only its status
            detail = f"HTTP {code} {message}".rstrip()
        else:
            detail = f"{code}: {message}" if message and message != code else code
        if code in _S3_NOT_FOUND:
            return StorageFailure("file not found", detail)
        if code in _S3_DENIED:
            return StorageFailure("access denied", detail)
        if code in _S3_THROTTLED or status in (429, 503):
            return StorageFailure("throttled", detail, transient=True)
        if code == "RequestTimeout":
            return StorageFailure("timed out", detail, transient=True)
        if status:
            failure = _by_status(status, "")
            return StorageFailure(failure.kind, detail, failure.transient)
        return None
    if isinstance(error, exceptions.NoCredentialsError):
        return StorageFailure("access denied", "no credentials found")
    if isinstance(error, (exceptions.ConnectTimeoutError, exceptions.ReadTimeoutError)):
        return StorageFailure("timed out", _reason(error), transient=True)
    if isinstance(error, exceptions.EndpointConnectionError):
        return StorageFailure("cannot connect", _reason(error), transient=True)
    if isinstance(error, exceptions.ConnectionClosedError):
        return StorageFailure("connection lost", _reason(error), transient=True)
    return None


def _builtin_failure(error: BaseException) -> StorageFailure | None:
    if isinstance(error, ConnectionRefusedError):
        return StorageFailure("connection refused", _reason(error), transient=True)
    if isinstance(error, socket.gaierror):
        return StorageFailure("host not found", _reason(error), transient=True)
    if isinstance(error, TimeoutError):  # socket.timeout and asyncio.TimeoutError are this one
        return StorageFailure("timed out", _reason(error), transient=True)
    if isinstance(error, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return StorageFailure("connection lost", _reason(error), transient=True)
    if isinstance(error, PermissionError):
        return StorageFailure("access denied", _reason(error))
    if isinstance(error, FileNotFoundError):
        return StorageFailure("file not found")
    return None


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error).strip() or type(error).__name__


# ---- retries


class RetriesSpent(Exception):
    """A transient failure that outlasted its retries: `error` is the last one, `failure` what it was, `note` what
    was tried ("; transient: tried 5 times in 7.6 s ...")."""

    def __init__(self, error: BaseException, failure: StorageFailure, note: str) -> None:
        super().__init__(f"{error}{note}")
        self.error, self.failure, self.note = error, failure, note


class _FailingHosts:
    """Hosts whose last read gave up after every retry, and when: their next reads are not retried for a while."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gave_up_at: dict[str, float] = {}

    def failing(self, host: str) -> bool:
        with self._lock:
            gave_up_at = self._gave_up_at.get(host)
            return gave_up_at is not None and time.monotonic() - gave_up_at < FAILING_HOST_S

    def gave_up(self, host: str) -> None:
        with self._lock:
            self._gave_up_at[host] = time.monotonic()

    def succeeded(self, host: str) -> None:
        if self._gave_up_at:  # the common case takes no lock
            with self._lock:
                self._gave_up_at.pop(host, None)


FAILING_HOSTS = _FailingHosts()


def host_of(uri: str) -> str:
    """The scheme and host (or bucket) of a URI: what an outage is shared by."""
    for part in uri.split("::"):
        if "://" in part:
            split = urlsplit(part)
            return f"{split.scheme}://{split.hostname or ''}:{split.port or ''}"
    return uri


def retry_transient(attempt: Callable[[], T], failure_of: Callable[[BaseException], StorageFailure | None],
                    host: str, retries: int, first_wait_s: float, deadline: float = math.inf,
                    retry_setting: str = "", advice: str = "") -> T:
    """`attempt()`'s result, trying again after a transient failure (module docstring) at most `retries` times,
    the waits starting at `first_wait_s` and doubling, never waiting past `deadline` (`time.monotonic()`).

    A failure that is not transient, or whose backend retried it already, is raised as it is; a transient one that
    outlasts the retries (their count, the deadline, or a host failing lately) is raised as `RetriesSpent`.
    `retry_setting` names the setting of `retries` in the note ("input.read_retries, --read-retries"), and `advice`
    ends it (what a user does next: "the same command with --retry-errors tries this row again")."""
    started = time.monotonic()
    tries = 0
    while True:
        try:
            result = attempt()
        except Exception as error:
            tries += 1
            failure = failure_of(error)
            if failure is None or not failure.transient:
                raise
            rerun = f"; {advice}" if advice else ""
            if failure.retried_by_backend:
                raise RetriesSpent(error, failure, f"; transient, retried by botocore (AWS_MAX_ATTEMPTS, "
                                                   f"AWS_RETRY_MODE){rerun}") from error
            if tries == 1 and FAILING_HOSTS.failing(host):
                raise RetriesSpent(error, failure, f"; transient, not retried: the last read from this host failed "
                                                   f"every retry less than {FAILING_HOST_S:g} s ago{rerun}") from error
            wait_s = first_wait_s * 2 ** (tries - 1) * random.uniform(0.8, 1.2)
            if tries > retries or time.monotonic() + wait_s >= deadline:
                FAILING_HOSTS.gave_up(host)
                setting = f" ({retry_setting})" if retry_setting else ""
                raise RetriesSpent(error, failure, f"; transient: tried {tries} time{'s' * (tries > 1)} in "
                                                   f"{time.monotonic() - started:.1f} s{setting}{rerun}") from error
            time.sleep(wait_s)
        else:
            FAILING_HOSTS.succeeded(host)
            return result


# ---- reading from the start


def is_http(filesystem: Any) -> bool:
    """Whether `filesystem` is fsspec's HTTP filesystem (http or https)."""
    protocols = filesystem.protocol if isinstance(filesystem.protocol, (tuple, list)) else (filesystem.protocol,)
    return any(protocol in ("http", "https") for protocol in protocols)


def open_from_start(filesystem: Any, path: str, size: int | None = None) -> Any:
    """`path` opened to be read from its start to its end. Over http(s) that is one streaming GET (fsspec's
    `block_size=0`), which any server answers, ranges or not; fsspec's default file asks for blocks by range and
    cannot read past the first block from a server without range requests. Other backends open as they do."""
    if is_http(filesystem):
        return filesystem.open(path, "rb", block_size=0, size=size)
    return filesystem.open(path, "rb")


def is_range_refusal(error: BaseException) -> bool:
    """Whether `error` is fsspec's refusal to read a byte range that a server answered with the whole file ("The HTTP
    server doesn't appear to support range requests")."""
    return isinstance(error, ValueError) and "support range requests" in str(error)


# ---- whole files (models, LMs, phrase lists): retried, and failures raised as the OSError of their kind

FETCH_RETRIES = 4  # a model's or LM's fetch: transient failures tried again this many times, waits from 1 s doubling
FETCH_RETRY_WAIT_S = 1.0


def fetch_retrying(uri: str, attempt: Callable[[], T], retries: int | None = None,
                   first_wait_s: float | None = None) -> T:
    """`attempt()` (a read of `uri`), a transient failure tried again (`retry_transient`); a failure of the storage
    is raised as the `OSError` of its kind (`FileNotFoundError`, `PermissionError`, `ConnectionError`, else
    `OSError`) with a message naming `uri` and what it was; any other exception as it is. `retries` and
    `first_wait_s` default to `FETCH_RETRIES` and `FETCH_RETRY_WAIT_S`."""
    retries = FETCH_RETRIES if retries is None else retries
    first_wait_s = FETCH_RETRY_WAIT_S if first_wait_s is None else first_wait_s
    try:
        return retry_transient(attempt, classify_failure, host_of(uri), retries, first_wait_s,
                               advice="the same command tries it again")
    except RetriesSpent as spent:
        raise _os_error(spent.failure, f"{uri}: {spent.failure.describe()}{spent.note}") from spent.error
    except Exception as error:
        failure = classify_failure(error)
        if failure is None:
            raise
        raise _os_error(failure, f"{uri}: {failure.describe()}") from error


def _os_error(failure: StorageFailure, message: str) -> OSError:
    if failure.kind == "file not found":
        return FileNotFoundError(message)
    if failure.kind == "access denied":
        return PermissionError(message)
    return ConnectionError(message) if failure.transient else OSError(message)
