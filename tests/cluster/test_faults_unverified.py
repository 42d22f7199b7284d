"""Faults (b)-(f) of issue 25: written, not yet passed several times in their present form, so skipped.

(d) transient S3 faults passed its one run (77 faults injected, every row once).

First run (one each): (c) the driver was killed only after every part was committed (parts came in one burst
at the end of the job; the manifests are now split in 8 so parts commit while it runs); (e) the job failed with
`PermissionError: Access Denied` as intended, but the test failed on a check not yet pinned down; (f) a 96 KiB
tmpfs held the whole output (now 12 KiB); (b) the job succeeded after the worker was killed, but the kill came
after the last part and the test errored in teardown. Remove the skip once each has passed several times.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.cluster.conftest import ROWS
from tests.cluster.netns_cluster import WORKER_ADDRESS
from tests.cluster.test_faults import RETRY_ENV, assert_exactly_once, job_args, new_output

pytestmark = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.ray,
              pytest.mark.skip(reason="not yet seen passing in this form; see the module docstring")]


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
    # the writer's error names the cause; the job's last line does not name the part's URI (the driver prints
    # "loopscribe: the job failed: RayTaskError(...)"): only its first line names the output
    assert "PermissionError: Access Denied" in logs, logs[-3000:]
    assert not cluster.read_output_ids(output)["complete"]
    submit = cluster.submit(job_args(cluster, output), env_vars=RETRY_ENV, timeout_s=300)
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert_exactly_once(cluster, output)


@pytest.fixture
def small_tmpfs(cluster):
    """A 12 KiB tmpfs (room for _config.json and a part or two) that both hosts see; unmounted after."""
    mount_point = Path(f"/tmp/{cluster.tag}/full")
    mount_point.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k,mode=0777", "lsc-tmpfs", str(mount_point)],
                   check=True, timeout=30)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False, timeout=30)
        mount_point.rmdir()


def test_f_local_output_on_a_full_tmpfs(cluster, small_tmpfs):
    from pipeline import sink

    output = small_tmpfs / "out"
    first = f"lsc-f1-{uuid.uuid4().hex[:6]}"
    cluster.submit_detached(job_args(cluster, str(output)), first)
    status = cluster.wait_job(first, timeout_s=300)
    logs = cluster.job_logs(first)
    assert status == "FAILED", f"{status}: {logs[-3000:]}"
    assert "No space left on device" in logs, logs[-3000:]
    assert not sink.is_complete(str(output))
    committed = sink.read_output(str(output), ["utterance_id"]).column(0).to_pylist()
    assert len(committed) < ROWS
    for path, table in sink.read_parts(str(output), ["utterance_id"]):  # every part whole, named by its rows
        assert Path(path).name == sink.part_name(table.column(0).to_pylist())
    # repair: more room; the rerun commits the rest, each row once
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_tmpfs)], check=True, timeout=30)
    submit = cluster.submit(job_args(cluster, str(output)), timeout_s=300)
    assert submit.returncode == 0 and "succeeded" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-3000:]
    table = sink.read_output(str(output), ["utterance_id", "status"])
    ids = table.column(0).to_pylist()
    assert sink.is_complete(str(output)) and len(ids) == ROWS and len(set(ids)) == ROWS
    assert set(committed) <= set(ids)


def test_b_worker_host_killed_mid_job(cluster):
    output = new_output("b")
    first = f"lsc-b1-{uuid.uuid4().hex[:6]}"
    cluster.submit_detached(job_args(cluster, output), first)
    cluster.wait_for_parts(output, 1, timeout_s=240)
    on_worker = cluster.actor_nodes().get(WORKER_ADDRESS, set())
    cluster.kill_worker_host()
    status = cluster.wait_job(first, timeout_s=300)
    assert status == "SUCCEEDED", f"{status}: {cluster.job_logs(first)[-3000:]}"
    assert_exactly_once(cluster, output)
    assert on_worker, "no actor ran on the worker before it was killed"
