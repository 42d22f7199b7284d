"""Files from local or fsspec storage (checkpoints, LMs), fetched once per node into a content-addressed cache.

A remote file is downloaded once per node into a fetch store's `blobs/<sha256><suffix>` (`pipeline/io/cache.py`),
under a file lock and with an atomic rename, so concurrent actors on one node share one copy and never read a
partial file; a local path or `file://` URI (`pipeline.io.uris.local_path`) is used where it is. An expected
sha256, when given, is checked before the file is handed to anyone (a `.nemo` is unpickled only after that).

A download is one request from the file's start over http (`pipeline/io/remote.py::open_from_start`), so a plain
http server without range requests serves it; a transient failure (refused, DNS, timeout, 429, 5xx) is tried again
up to `remote.FETCH_RETRIES` times, and a failure is raised as the `OSError` of its kind naming the URI and what it
was ("access denied (HTTP 403 Forbidden): ...", `remote.fetch_retrying`).

A file's sha256 is its identity (an output's model is its content, `pipeline/graph.py`), hashed once per version:
a fetched blob is named by it, and a local file's is kept in the store's refs keyed by what changes when the file
is replaced or rewritten in place (device, inode, size, mtime and ctime in ns), `cached_sha256`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any

from pipeline.io.cache import DEFAULT_MODELS_DIR, file_lock, store_dirs
from pipeline.io.remote import fetch_retrying, open_from_start
from pipeline.io.uris import local_path

_CHUNK_BYTES = 8 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def cached_sha256(path: Path | str, cache_dir: Path | str = DEFAULT_MODELS_DIR) -> str:
    """The sha256 of the local file `path`, hashed once per version of the file on this node.

    A blob of the fetch store `cache_dir` is named by its sha256 (only fully hashed files are renamed into
    blobs/). Any other file's digest is kept in the store's refs/ under a key of its path, device, inode, size,
    mtime and ctime (ns): a file replaced at the same path (a new inode) or rewritten in place (a new ctime, even
    with its old size and mtime put back) is hashed again. The key is taken before and after hashing, and the
    digest kept only if the file did not change meanwhile; a store that cannot be written to only costs the
    caching. Concurrent callers on a node (a job's actors) wait for one hash.
    """
    path = Path(path).expanduser().resolve()
    blobs, refs, locks = store_dirs(cache_dir)
    name = path.name[:64]
    if path.parent == blobs.resolve() and len(name) == 64 and all(c in "0123456789abcdef" for c in name):
        return name
    key = _version_key(path)
    ref = refs / f"{key}.json"
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(file_lock(locks / f"{key}.lock"))
        except OSError:  # a cache this process cannot write to: hash without keeping the digest
            return file_sha256(path)
        try:
            return json.loads(ref.read_text())["sha256"]
        except (OSError, ValueError, KeyError):
            pass
        digest = file_sha256(path)
        if _version_key(path) == key:  # not kept for a file that changed while it was read
            with contextlib.suppress(OSError):
                refs.mkdir(parents=True, exist_ok=True)
                _write_atomically(ref, json.dumps({"path": str(path), "sha256": digest}))
        return digest


def _version_key(path: Path) -> str:
    status = path.stat()
    return hashlib.sha256(f"local\n{path}\n{status.st_dev}\n{status.st_ino}\n{status.st_size}\n"
                          f"{status.st_mtime_ns}\n{status.st_ctime_ns}".encode()).hexdigest()


def _write_atomically(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=".tmp-") as handle:
        handle.write(text)
    os.replace(handle.name, path)


def fetch_file(uri: str, sha256: str | None = None, cache_dir: Path | str = DEFAULT_MODELS_DIR,
               suffix: str = ".nemo") -> Path:
    """A local path holding the file at `uri` (a checkpoint, or an LM): the file itself if local, else a
    node-local cached copy named `<sha256><suffix>` in the fetch store `cache_dir` (`pipeline/io/cache.py`).

    The store is content-addressed: a ref maps a remote object (URI, size and ETag or mtime) to the blob of its
    bytes, so an object that changes is downloaded again; an object with no version (a plain http server's, with
    neither ETag nor Last-Modified) is downloaded by every call, as it could change and keep its size.
    A download streams into a temporary file beside the blob while hashing, checks `sha256` if given, and
    renames into place; the per-object lock makes concurrent callers wait for one download. A caller killed
    mid-download (SIGKILL, out of memory) releases the lock with its death (flock) and leaves its partial file,
    named after the object's key: the next caller to take the lock removes it and downloads the object again.
    """
    expected = sha256.lower() if sha256 else None
    local = local_path(uri)
    if local is not None:
        path = Path(local).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"no file at {uri}")
        if expected is not None and (digest := cached_sha256(path, cache_dir)) != expected:
            raise ValueError(f"sha256 of {uri} is {digest}, not the expected {expected} (a file replaced or "
                             "rewritten at that path is another file)")
        return path

    import fsspec

    blobs, refs, locks = store_dirs(cache_dir)
    for folder in (blobs, refs, locks):
        folder.mkdir(parents=True, exist_ok=True)
    if expected is not None and (blobs / f"{expected}{suffix}").is_file():
        return blobs / f"{expected}{suffix}"  # only fully hashed files are ever renamed into blobs/

    # a new filesystem object: a cached one would keep the endpoint and credentials it was made with
    filesystem, remote_path = fsspec.core.url_to_fs(uri, skip_instance_cache=True)
    info = fetch_retrying(uri, lambda: filesystem.info(remote_path))
    version = (info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified")
               or info.get("Last-Modified") or "")
    key = hashlib.sha256(f"{uri}\n{info.get('size')}\n{version}".encode()).hexdigest()
    ref = refs / f"{key}.json"
    with file_lock(locks / f"{key}.lock"):
        if ref.is_file() and version:  # an object with no version (a plain http server) may change at one size
            digest = json.loads(ref.read_text())["sha256"]
            blob = blobs / f"{digest}{suffix}"
            if blob.is_file():
                if expected is not None and digest != expected:
                    raise ValueError(f"sha256 of {uri} is {digest}, not the expected {expected}")
                return blob
        for stale in blobs.glob(f".download-{key}-*"):  # a holder killed mid-download (the lock died with it)
            stale.unlink(missing_ok=True)
        with tempfile.NamedTemporaryFile(dir=blobs, delete=False, prefix=f".download-{key}-") as partial:
            try:
                digest = fetch_retrying(uri, lambda: _download(filesystem, remote_path, info.get("size"), partial))
                partial.flush()
                os.fsync(partial.fileno())
            except BaseException:
                os.unlink(partial.name)
                raise
        if expected is not None and digest != expected:
            os.unlink(partial.name)
            raise ValueError(f"sha256 of {uri} is {digest}, not the expected {expected}")
        blob = blobs / f"{digest}{suffix}"
        os.replace(partial.name, blob)
        _write_atomically(ref, json.dumps({"uri": uri, "sha256": digest, "size": info.get("size")}))
        return blob


def _download(filesystem: Any, remote_path: str, size: int | None, partial: IO[bytes]) -> str:
    """The file streamed from its start into `partial` (emptied first: a retry starts over) -> its sha256. One
    request over http (`open_from_start`), which a server without range requests answers too."""
    partial.seek(0)
    partial.truncate()
    digest = hashlib.sha256()
    with open_from_start(filesystem, remote_path, size) as source:
        while chunk := source.read(_CHUNK_BYTES):
            digest.update(chunk)
            partial.write(chunk)
    return digest.hexdigest()
