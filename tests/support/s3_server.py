"""A moto S3 server on 127.0.0.1 for tests, with the AWS variables every client reads set before any exists."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

S3_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def moto_s3(*buckets: str, server_class: type | None = None) -> Iterator[str]:
    """Serve S3 on 127.0.0.1 (a free port) with `buckets` created; yields the endpoint URL. `server_class`: a
    subclass of moto's `ThreadedMotoServer` to serve with (benchmarks/shards.py's, which delays and counts
    requests)."""
    from moto.server import ThreadedMotoServer

    server_class = server_class or ThreadedMotoServer

    # s3fs caches filesystem instances with the endpoint they were made with: a second server (another port)
    # must not be reached through an instance cached for the first
    _clear_s3fs_instances()
    server = server_class(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {name: os.environ.get(name) for name in [*S3_ENVIRONMENT, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENVIRONMENT, AWS_ENDPOINT_URL=endpoint)
    try:
        for bucket in buckets:
            create_bucket(bucket)
        yield endpoint
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.stop()
        _clear_s3fs_instances()


def create_bucket(bucket: str) -> None:
    """Create `bucket` on the S3 server that AWS_ENDPOINT_URL names (one `moto_s3` started)."""
    import boto3

    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=bucket)


def _clear_s3fs_instances() -> None:
    try:
        import s3fs
    except ImportError:
        return
    s3fs.S3FileSystem.clear_instance_cache()
