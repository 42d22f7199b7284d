"""Fetching checkpoints: local paths, sha256 checks, and a node-local cache of S3 objects shared by callers."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline.io.fetch import fetch_file
from tests.support.s3_server import moto_s3


def test_local_path_is_used_in_place_and_sha256_is_checked(tmp_path):
    path = tmp_path / "model.nemo"
    path.write_bytes(b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()
    assert fetch_file(str(path)) == path
    assert fetch_file(f"file://{path}", sha256=digest.upper()) == path
    with pytest.raises(ValueError, match="sha256"):
        fetch_file(str(path), sha256="0" * 64)
    with pytest.raises(FileNotFoundError):
        fetch_file(str(tmp_path / "missing.nemo"))


def test_s3_object_is_downloaded_once_and_shared(tmp_path):
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    payload = bytes(range(256)) * 40_000  # 10 MB: more than one read chunk
    digest = hashlib.sha256(payload).hexdigest()
    cache_dir = tmp_path / "cache"
    with moto_s3("models") as endpoint:
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.put_object(Bucket="models", Key="asr/model.nemo", Body=payload)
        uri = "s3://models/asr/model.nemo"

        with ThreadPoolExecutor(max_workers=4) as pool:  # concurrent callers wait on one download
            paths = list(pool.map(lambda _: fetch_file(uri, cache_dir=cache_dir), range(4)))
        assert len(set(paths)) == 1 and paths[0].read_bytes() == payload
        assert paths[0] == cache_dir / "blobs" / f"{digest}.nemo"
        assert sorted(p.name for p in (cache_dir / "blobs").iterdir()) == [f"{digest}.nemo"]  # no partial files
        modified = paths[0].stat().st_mtime_ns

        assert fetch_file(uri, sha256=digest, cache_dir=cache_dir) == paths[0]
        assert fetch_file(uri, cache_dir=cache_dir).stat().st_mtime_ns == modified  # not downloaded again
        with pytest.raises(ValueError, match="sha256"):
            fetch_file(uri, sha256="f" * 64, cache_dir=cache_dir)

        s3.put_object(Bucket="models", Key="asr/model.nemo", Body=payload[::-1])  # a new version of the object
        changed = fetch_file(uri, cache_dir=cache_dir)
        assert changed != paths[0] and changed.read_bytes() == payload[::-1]

        s3.put_object(Bucket="models", Key="asr/other.nemo", Body=b"other")
        with pytest.raises(ValueError, match="sha256"):  # a mismatch leaves nothing behind in the cache
            fetch_file("s3://models/asr/other.nemo", sha256="0" * 64, cache_dir=cache_dir)
        assert not [p for p in (cache_dir / "blobs").iterdir() if p.name.startswith(".")]


def test_a_local_files_sha256_is_hashed_once_per_version_and_a_replaced_file_is_hashed_again(tmp_path, monkeypatch):
    """The digest is kept keyed by the file's inode, size, mtime and ctime: a file replaced at its path, or rewritten
    in place with its old size and mtime put back, is another file (a nightly `latest.nemo` overwritten)."""
    import os

    from pipeline.io import fetch

    hashed = []
    real_sha256 = fetch.file_sha256
    monkeypatch.setattr(fetch, "file_sha256", lambda path: hashed.append(path) or real_sha256(path))
    store = tmp_path / "cache" / "models"
    model = tmp_path / "latest.nemo"
    model.write_bytes(b"model one")
    one, two = hashlib.sha256(b"model one").hexdigest(), hashlib.sha256(b"model two").hexdigest()
    assert [fetch.cached_sha256(model, store) for _ in range(3)] == [one] * 3
    assert len(hashed) == 1  # hashed once, then read from the store's refs
    assert fetch.fetch_file(str(model), sha256=one, cache_dir=store) == model and len(hashed) == 1

    status = model.stat()
    with open(model, "r+b") as handle:  # rewritten in place: same inode, same size, old mtime put back
        handle.write(b"model two")
    os.utime(model, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert model.stat().st_mtime_ns == status.st_mtime_ns and model.stat().st_size == status.st_size
    assert fetch.cached_sha256(model, store) == two
    replacement = tmp_path / "new.nemo"
    replacement.write_bytes(b"model one")
    os.replace(replacement, model)  # replaced at the same path: a new inode
    assert fetch.cached_sha256(model, store) == one and len(hashed) == 3
    model.write_bytes(b"model two")
    with pytest.raises(ValueError, match=f"sha256 of {model} is {two}, not the expected {one}"):
        fetch.fetch_file(str(model), sha256=one, cache_dir=store)  # an actor pinned to the job's model

    blob = store / "blobs" / f"{two}.nemo"  # a fetched blob is named by its digest: never hashed again
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"model two")
    count = len(hashed)
    assert fetch.cached_sha256(blob, store) == two and len(hashed) == count
    blocked = tmp_path / "a_file"  # a store that cannot be made (its parent is a file) costs only the caching
    blocked.write_text("not a folder")
    assert fetch.cached_sha256(model, blocked / "models") == two


def test_an_object_served_without_a_version_is_fetched_again_when_it_changes_at_one_size(tmp_path):
    """A plain http server gives neither ETag nor Last-Modified: a cached copy of `latest.nemo` could be another
    file of the same size, so it is downloaded again; with an ETag the cached copy serves until the ETag changes."""
    pytest.importorskip("aiohttp")
    from tests.support.file_server import serve_files

    for versioned in (False, True):
        cache_dir = tmp_path / f"cache-{versioned}"
        with serve_files({"/models/latest.nemo": b"model one"}, versioned=versioned) as served:
            uri = f"{served.url}/models/latest.nemo"
            first = fetch_file(uri, cache_dir=cache_dir)
            assert first.read_bytes() == b"model one"
            served.files["/models/latest.nemo"] = b"model two"  # overwritten in place, the same size
            again = fetch_file(uri, cache_dir=cache_dir)
            assert again.read_bytes() == b"model two"
            assert again.name == hashlib.sha256(b"model two").hexdigest() + ".nemo"
            downloads = [r for r in served.requests if r[0] == "GET"]
            served.files["/models/latest.nemo"] = b"model two"
            assert fetch_file(uri, cache_dir=cache_dir) == again
            downloaded_again = len([r for r in served.requests if r[0] == "GET"]) > len(downloads)
            assert downloaded_again is not versioned  # unchanged and versioned: the cached copy serves
