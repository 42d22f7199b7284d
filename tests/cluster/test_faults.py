"""Exactly once across two hosts, under the faults of issue 25.

One cluster per module (`conftest.py`): a head and a worker namespace, one CPU each, moto S3 behind a
fault-injecting proxy. Jobs are submitted as users do (`ray job submit --working-dir`), and each test ends by
reading its output back and finding every manifest row exactly once. The worker host is killed last.
"""

from __future__ import annotations

import uuid

import pytest

from tests.cluster.conftest import ROWS
from tests.cluster.netns_cluster import HEAD_ADDRESS, WORKER_ADDRESS

pytestmark = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.ray]

# The job's resources fit one 1-CPU node once the manifest is read (ASR 0.5 + audio 0.25 + writer 0.25), so it
# can finish on the head alone; with the reader (0.1) they exceed one node, so the worker gets some of them.
# Small windows and parts make parts commit while the job runs, not all at the end.
JOB_FLAGS = ["--device", "cpu", "--asr-actors", "1", "--audio-actors", "1", "--writer-actors", "1",
             "--torch-threads", "1", "--window-rows", "32", "--part-rows", "32", "--max-batch-size", "16"]
# what a user sets for botocore (and so s3fs/aiobotocore) to ride out S3 hiccups: standard retry mode retries
# 500, 502, 503, 504, throttling (SlowDown) and connection errors with exponential backoff and jitter
RETRY_ENV = {"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "10"}


def job_args(cluster, output: str, *extra: str) -> list[str]:
    return ["--manifest", cluster.uris["manifest"], "--model", cluster.uris["model"], "--output", output,
            "--cache-dir", f"/tmp/{cluster.tag}/cache", *JOB_FLAGS, *extra]


def assert_exactly_once(cluster, output: str) -> dict:
    result = cluster.read_output_ids(output)
    assert result["complete"], f"{output} has no _SUCCESS"
    assert len(result["ids"]) == ROWS, f"{len(result['ids'])} rows, expected {ROWS}"
    assert len(set(result["ids"])) == ROWS, f"{ROWS - len(set(result['ids']))} utterance ids repeated"
    assert result["statuses"].count("ok") == ROWS, "rows with status error"
    return result


def new_output(name: str) -> str:
    return f"s3://lsc/out/{name}-{uuid.uuid4().hex[:6]}"


def test_a_two_hosts_baseline(cluster):
    output = new_output("a")
    submit = cluster.submit(job_args(cluster, output), timeout_s=300)
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert_exactly_once(cluster, output)
    nodes = cluster.actor_nodes()
    assert {HEAD_ADDRESS, WORKER_ADDRESS} <= set(nodes), f"actors ran only on {nodes}"
