"""Faults (f) and (b) of issue 25: written, not yet passed in their present form, so skipped.

(c), (d) and (e) passed twice in a row and moved to `test_faults.py`. First runs here (one each): (f) a 96 KiB
tmpfs held the whole output (now 12 KiB, not run since); (b) the job succeeded after the worker was killed, but
the kill came after the last part and the test errored in teardown (not run since). Remove the skip once each
has passed twice in a row.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.cluster.conftest import ROWS
from tests.cluster.netns_cluster import WORKER_ADDRESS
from tests.cluster.test_faults import assert_exactly_once, job_args, new_output

pytestmark = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.ray,
              pytest.mark.skip(reason="not yet seen passing in this form; see the module docstring")]


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
