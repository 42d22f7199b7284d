"""Exactly once across two hosts, under the faults of issue 25.

One cluster per module (`conftest.py`): a head and a worker namespace, one CPU each, moto S3 behind a
fault-injecting proxy. Jobs are submitted as users do (`ray job submit --working-dir`), and each test ends by
reading its output back and finding every manifest row exactly once. The tests are named after the issue's faults:
(a) the baseline, (b1) the worker host killed mid-job, (b2) killed and started again, (c) the driver killed,
(d) transient S3 faults, (e) writes denied, (f) a full local disk. Each starts from two hosts (`two_hosts`).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.cluster.conftest import MANIFESTS, ROWS
from tests.cluster.netns_cluster import BUCKET, HEAD_ADDRESS, WORKER_ADDRESS

pytestmark = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.ray]

# The job's actors fit one 1-CPU node (ASR 0.5 + audio 0.25 + writer 0.25; manifest reads ask for no CPU), so it
# can finish on the head alone; Ray Data spreads actors over the nodes, so the worker gets some of them.
# Small windows and parts make parts commit while the job runs, not all at the end.
JOB_FLAGS = ["--device", "cpu", "--asr-actors", "1", "--audio-actors", "1", "--writer-actors", "1",
             "--torch-threads", "1", "--window-rows", "32", "--part-rows", "32", "--max-batch-size", "16"]
# what a user sets for botocore (and so s3fs/aiobotocore) to ride out S3 hiccups: standard retry mode retries
# 500, 502, 503, 504, throttling (SlowDown) and connection errors with exponential backoff and jitter
RETRY_ENV = {"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "10"}


# Mid-job, made certain: the last manifest's read is held by the proxy (its first GET, the driver's look at it,
# passes), so the rows of the other manifests are committed while that one's rows cannot be, until the test lets
# the read through.
HOLD_LAST_MANIFEST = f"hold-gets:1:/{BUCKET}/data/m{MANIFESTS - 1}.json"


@pytest.fixture
def two_hosts(cluster):
    cluster.ensure_two_hosts()
    cluster.set_proxy_mode("pass")
    return cluster


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


def test_a_two_hosts_baseline(two_hosts):
    cluster = two_hosts
    output = new_output("a")
    submit = cluster.submit(job_args(cluster, output), timeout_s=300)
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert_exactly_once(cluster, output)
    nodes = cluster.actor_nodes()
    assert {HEAD_ADDRESS, WORKER_ADDRESS} <= set(nodes), f"actors ran only on {nodes}"


def test_c_driver_killed_and_job_submitted_again(two_hosts):
    cluster = two_hosts
    output = new_output("c")
    first = f"lsc-c1-{uuid.uuid4().hex[:6]}"
    cluster.set_proxy_mode(HOLD_LAST_MANIFEST)  # mid-job for certain: a fast job could otherwise finish first
    try:
        cluster.submit_detached(job_args(cluster, output), first)
        hold_until_parts_committed(cluster, output, first)
        drivers = cluster.driver_pids()
        assert drivers, "no driver process found in the head namespace"
        for pid in drivers:
            os.kill(pid, 9)
        assert cluster.wait_job(first, timeout_s=120) in ("FAILED", "STOPPED")
    finally:
        cluster.set_proxy_mode("pass")
    assert not cluster.read_output_ids(output)["complete"]
    submit = cluster.submit(job_args(cluster, output), timeout_s=300)
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    result = assert_exactly_once(cluster, output)
    summary = json.loads(cluster.s3_script(f"print(fs.cat({output.removeprefix('s3://') + '/_summary.json'!r})"
                                           ".decode())\n"))
    assert summary["this_run"]["rows"] < ROWS, "the rerun did not resume: it transcribed every row again"
    assert result["parts"] >= 2


def test_d_transient_s3_faults_with_retries(two_hosts):
    cluster = two_hosts
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


def test_e_writes_denied_mid_run_then_repaired(two_hosts):
    cluster = two_hosts
    output = new_output("e")
    first = f"lsc-e1-{uuid.uuid4().hex[:6]}"
    cluster.set_proxy_mode(HOLD_LAST_MANIFEST)  # parts committed and rows left for certain when writes are denied
    try:
        cluster.submit_detached(job_args(cluster, output), first, env_vars=RETRY_ENV)
        hold_until_parts_committed(cluster, output, first)
        cluster.set_proxy_mode(f"deny-writes:{output.removeprefix('s3://')}/")  # the held read goes on, its parts fail
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



def hold_until_parts_committed(cluster, output: str, submission_id: str) -> None:
    """Wait until the held manifest read is waiting and some parts of `output` are committed (the job mid-way)."""
    cluster.wait_until("holding the last manifest's read",
                       lambda: any(line.startswith("held ") for line in cluster.proxy_log()), timeout_s=240)
    cluster.wait_until(f"a part of {output} committed", lambda: cluster.parts_written(output), timeout_s=300)
    assert cluster.job_status(submission_id) == "RUNNING"


def actors_alive_on(cluster, node_ids: set[str]) -> set[str]:
    return {actor.get("class_name", "?") for actor in cluster.actors()
            if actor.get("state") == "ALIVE" and actor.get("node_id") in node_ids}


def assert_mid_job(cluster, output: str) -> int:
    """After the kill: some rows committed, not all, and no _SUCCESS; how many."""
    committed = cluster.read_output_ids(output)
    rows = len(committed["ids"])
    assert 0 < rows < ROWS and not committed["complete"], \
        f"the kill did not land mid-job: {rows} rows committed, complete={committed['complete']}"
    return rows


def test_b1_worker_host_killed_mid_job(two_hosts):
    """Every process of the worker host SIGKILLed and its namespace removed while rows remain: Ray restarts the
    actors and retries the tasks it lost on the head, and the job finishes there."""
    cluster = two_hosts
    output = new_output("b1")
    first = f"lsc-b1-{uuid.uuid4().hex[:6]}"
    cluster.set_proxy_mode(HOLD_LAST_MANIFEST)
    try:
        cluster.submit_detached(job_args(cluster, output), first, env_vars=RETRY_ENV)
        hold_until_parts_committed(cluster, output, first)
        on_worker = actors_alive_on(cluster, cluster.node_ids(WORKER_ADDRESS))
        cluster.kill_worker_host()
        assert_mid_job(cluster, output)
    finally:
        cluster.set_proxy_mode("pass")
    status = cluster.wait_job(first, timeout_s=400)
    assert status == "SUCCEEDED", f"{status}: {cluster.job_logs(first)[-3000:]}\n{cluster.describe()}"
    assert_exactly_once(cluster, output)
    assert any(name.startswith("MapWorker") for name in on_worker), \
        f"no stage actor was alive on the worker host when it was killed: {on_worker}"


def test_b2_worker_host_killed_and_started_again_mid_job(two_hosts):
    """As (b1), but the ASR actor takes a whole CPU, so the job's actors do not fit the head alone: it can only
    finish once the worker host is back. The host is started again (a new Ray node at the same address), it
    rejoins, the lost actor is restarted on it, and the job finishes."""
    cluster = two_hosts
    output = new_output("b2")
    first = f"lsc-b2-{uuid.uuid4().hex[:6]}"
    cluster.set_proxy_mode(HOLD_LAST_MANIFEST)
    try:
        cluster.submit_detached(job_args(cluster, output, "--asr-actor-cpus", "1"), first, env_vars=RETRY_ENV)
        hold_until_parts_committed(cluster, output, first)
        cluster.kill_worker_host()
        rows_at_kill = assert_mid_job(cluster, output)
    finally:
        cluster.set_proxy_mode("pass")
    assert cluster.job_status(first) == "RUNNING"
    new_worker = cluster.restart_worker_host()
    status = cluster.wait_job(first, timeout_s=400)
    assert status == "SUCCEEDED", f"{status}: {cluster.job_logs(first)[-3000:]}\n{cluster.describe()}"
    assert_exactly_once(cluster, output)
    rejoined = {actor.get("class_name", "?") for actor in cluster.actors() if actor.get("node_id") == new_worker}
    assert any(name.startswith("MapWorker") for name in rejoined), \
        f"no stage actor ran on the restarted worker host ({rows_at_kill} rows were committed at the kill)"


@pytest.fixture
def small_tmpfs(cluster):
    """The cluster's 12 KiB tmpfs (room for _config.json and a part or so), empty, that both hosts see (mounted
    before they started: `NetnsCluster.mount_small_disk`)."""
    if cluster.small_disk_problem is not None:
        pytest.skip(cluster.small_disk_problem)
    for path in cluster.small_disk.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    cluster.resize_small_disk("12k")
    return cluster.small_disk


def test_f_local_output_on_a_full_tmpfs(two_hosts, small_tmpfs):
    """A part that does not fit: the job fails naming the part and ENOSPC, nothing half-written is left or taken as
    committed; with room made, the same command commits the rest, each row once."""
    from pipeline.io import sink

    cluster = two_hosts
    output = small_tmpfs / "out"
    first = f"lsc-f1-{uuid.uuid4().hex[:6]}"
    cluster.submit_detached(job_args(cluster, str(output)), first)
    status = cluster.wait_job(first, timeout_s=400)
    logs = cluster.job_logs(first)
    assert status == "FAILED", f"{status}: {logs[-3000:]}"
    assert f"loopscribe: cannot commit a part to {output}/part-" in logs, logs[-3000:]
    assert "No space left on device" in logs, logs[-3000:]
    assert not sink.is_complete(str(output))
    assert not [path.name for path in output.iterdir() if path.name.startswith(".tmp-")], "temporary files left"
    committed = sink.read_output(str(output), ["utterance_id"]).column(0).to_pylist()
    assert len(committed) < ROWS
    for path, table in sink.read_parts(str(output), ["utterance_id", "manifest", "line"]):  # whole, named by its rows
        assert Path(path).name == sink.part_name(table.column(0).to_pylist(), sink.part_sources(table))
    cluster.resize_small_disk("8m")
    submit = cluster.submit(job_args(cluster, str(output)), timeout_s=400)
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    table = sink.read_output(str(output), ["utterance_id", "status"])
    ids = table.column(0).to_pylist()
    assert sink.is_complete(str(output))
    assert len(ids) == ROWS and len(set(ids)) == ROWS, f"{len(ids)} rows, {len(set(ids))} distinct"
    assert table.column(1).to_pylist().count("ok") == ROWS
    assert set(committed) <= set(ids)
