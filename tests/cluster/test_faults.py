"""Exactly once across two hosts, under the faults of issue 25.

One cluster per module (`conftest.py`): a head and a worker namespace, one CPU each, moto S3 behind a
fault-injecting proxy. Jobs are submitted as users do (`ray job submit --working-dir`), and each test ends by
reading its output back and finding every manifest row exactly once.
"""

from __future__ import annotations

import json
import os
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


def test_c_driver_killed_and_job_submitted_again(cluster):
    output = new_output("c")
    first = f"lsc-c1-{uuid.uuid4().hex[:6]}"
    cluster.submit_detached(job_args(cluster, output), first)
    cluster.wait_for_parts(output, 1, timeout_s=240)
    drivers = cluster.driver_pids()
    assert drivers, "no driver process found in the head namespace"
    for pid in drivers:
        os.kill(pid, 9)
    assert cluster.wait_job(first, timeout_s=120) in ("FAILED", "STOPPED")
    assert not cluster.read_output_ids(output)["complete"]
    submit = cluster.submit(job_args(cluster, output), timeout_s=300)
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    result = assert_exactly_once(cluster, output)
    summary = json.loads(cluster.s3_script(f"print(fs.cat({output.removeprefix('s3://') + '/_summary.json'!r})"
                                           ".decode())\n"))
    assert summary["this_run"]["rows"] < ROWS, "the rerun did not resume: it transcribed every row again"
    assert result["parts"] >= 2


def test_d_transient_s3_faults_with_retries(cluster):
    output = new_output("d")
    cluster.set_proxy_mode("flaky:0.1")
    try:
        submit = cluster.submit(job_args(cluster, output), env_vars=RETRY_ENV, timeout_s=300)
    finally:
        cluster.set_proxy_mode("pass")
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    faults = (cluster.log_dir / "proxy.log").read_text().count("fault ")
    assert faults >= 5, f"only {faults} faults injected"
    assert_exactly_once(cluster, output)


def test_e_writes_denied_mid_run_then_repaired(cluster):
    output = new_output("e")
    first = f"lsc-e1-{uuid.uuid4().hex[:6]}"
    cluster.submit_detached(job_args(cluster, output), first, env_vars=RETRY_ENV)
    try:
        cluster.wait_for_parts(output, 1, timeout_s=240)
        cluster.set_proxy_mode(f"deny-writes:{output.removeprefix('s3://')}/")
        status = cluster.wait_job(first, timeout_s=240)
    finally:
        cluster.set_proxy_mode("pass")
    logs = cluster.job_logs(first)
    assert status == "FAILED", f"{status}: {logs[-3000:]}"
    # the driver's one line names the part it could not commit and the cause (sink.PartWriteError)
    assert f"loopscribe: cannot commit a part to {output}/part-" in logs, logs[-3000:]
    assert "PermissionError" in logs, logs[-3000:]
    assert not cluster.read_output_ids(output)["complete"]
    submit = cluster.submit(job_args(cluster, output), env_vars=RETRY_ENV, timeout_s=300)
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert_exactly_once(cluster, output)
