"""Files from local or fsspec storage (checkpoints, LMs), fetched once per node into a content-addressed cache.

A remote file is downloaded once per node into a fetch store's `blobs/<sha256><suffix>` (`pipeline/io/cache.py`),
under a file lock and with an atomic rename, so concurrent actors on one node share one copy and never read a
partial file; a local path or `file://` URI (`pipeline.io.uris.local_path`) is used where it is. An expected
sha256, when given, is checked before the file is handed to anyone (a `.nemo` is unpickled only after that).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from pipeline.io.cache import DEFAULT_MODELS_DIR, file_lock, store_dirs
from pipeline.io.uris import local_path

_CHUNK_BYTES = 8 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _write_atomically(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=".tmp-") as handle:
        handle.write(text)
    os.replace(handle.name, path)


def fetch_file(uri: str, sha256: str | None = None, cache_dir: Path | str = DEFAULT_MODELS_DIR,
               suffix: str = ".nemo") -> Path:
    """A local path holding the file at `uri` (a checkpoint, or an LM): the file itself if local, else a
    node-local cached copy named `<sha256><suffix>` in the fetch store `cache_dir` (`pipeline/io/cache.py`).

    The store is content-addressed: a ref maps a remote object (URI, size and ETag or mtime) to the blob of its
    bytes, so an object that changes is downloaded again.
    A download streams into a temporary file beside the blob while hashing, checks `sha256` if given, and
    renames into place; the per-object lock makes concurrent callers wait for one download.
    """
    expected = sha256.lower() if sha256 else None
    local = local_path(uri)
    if local is not None:
        path = Path(local).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"no file at {uri}")
        if expected is not None and file_sha256(path) != expected:
            raise ValueError(f"sha256 of {uri} is not the expected {expected}")
        return path

    import fsspec

    blobs, refs, locks = store_dirs(cache_dir)
    for folder in (blobs, refs, locks):
        folder.mkdir(parents=True, exist_ok=True)
    if expected is not None and (blobs / f"{expected}{suffix}").is_file():
        return blobs / f"{expected}{suffix}"  # only fully hashed files are ever renamed into blobs/

    # a new filesystem object: a cached one would keep the endpoint and credentials it was made with
    filesystem, remote_path = fsspec.core.url_to_fs(uri, skip_instance_cache=True)
    info = filesystem.info(remote_path)
    version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
    key = hashlib.sha256(f"{uri}\n{info.get('size')}\n{version}".encode()).hexdigest()
    ref = refs / f"{key}.json"
    with file_lock(locks / f"{key}.lock"):
        if ref.is_file():
            digest = json.loads(ref.read_text())["sha256"]
            blob = blobs / f"{digest}{suffix}"
            if blob.is_file():
                if expected is not None and digest != expected:
                    raise ValueError(f"sha256 of {uri} is {digest}, not the expected {expected}")
                return blob
        digest_state = hashlib.sha256()
        with tempfile.NamedTemporaryFile(dir=blobs, delete=False, prefix=".download-") as partial:
            try:
                with filesystem.open(remote_path, "rb") as source:
                    while chunk := source.read(_CHUNK_BYTES):
                        digest_state.update(chunk)
                        partial.write(chunk)
                partial.flush()
                os.fsync(partial.fileno())
            except BaseException:
                os.unlink(partial.name)
                raise
        digest = digest_state.hexdigest()
        if expected is not None and digest != expected:
            os.unlink(partial.name)
            raise ValueError(f"sha256 of {uri} is {digest}, not the expected {expected}")
        blob = blobs / f"{digest}{suffix}"
        os.replace(partial.name, blob)
        _write_atomically(ref, json.dumps({"uri": uri, "sha256": digest, "size": info.get("size")}))
        return blob

