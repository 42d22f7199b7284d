"""`benchmarks/shards.py`'s measuring parts against a real moto S3: every request the clients make is counted (by
method) and answered late by the latency asked, and the loose-file audio stage decodes every utterance it put."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("moto")

from benchmarks.shards import BUCKET, RequestLog, loose_stage, measure, put_loose, slow_s3, utterances  # noqa: E402


def test_each_request_is_counted_and_answered_late(tmp_path):
    import s3fs

    requests = RequestLog(latency_s=0.0)
    with slow_s3(requests):
        filesystem = s3fs.S3FileSystem()
        requests.reset()
        filesystem.pipe(f"s3://{BUCKET}/a", b"x" * 10)
        filesystem.invalidate_cache()
        requests.latency_s = 0.2
        started = time.perf_counter()
        assert filesystem.cat(f"s3://{BUCKET}/a") == b"x" * 10
        seconds = time.perf_counter() - started
    assert requests.counts["PUT"] == 1
    assert requests.counts["GET"] >= 1
    assert seconds >= 0.2 * requests.counts["GET"]


def test_the_loose_stage_decodes_every_utterance_with_a_request_or_more_each(tmp_path):
    requests = RequestLog(latency_s=0.0)
    with slow_s3(requests):
        corpus = utterances(5, tmp_path)
        manifest = put_loose(corpus)
        figures = measure(requests, loose_stage(manifest))
    assert figures["rows_ok"] == 5
    assert figures["requests"] >= 5 + 1  # each file, and the manifest
    assert figures["requests"] == sum(figures["requests_by_method"].values())
