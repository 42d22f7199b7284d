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
