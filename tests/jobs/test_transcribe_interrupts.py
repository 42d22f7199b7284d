"""Ctrl-C and SIGTERM stop `jobs/transcribe.py` within seconds: one line (the rows committed, and the command that
finishes the rest), exit 130 or 143, no traceback or stack dump, nothing left running; and the same command then
finishes the job with every row exactly once.

The real command in a subprocess that starts its own private local Ray, on the bundled samples repeated 80 times
(1,600 rows, small parts) so that the signal comes mid-job: Ctrl-C as a terminal sends it, to the whole process
group; SIGTERM as `kill` or a scheduler sends it, to the job's own process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPOSITORY = Path(__file__).resolve().parents[2]
COPIES = 80
STOP_S = 60  # the most a stop may take on a loaded 2-core test machine (a few seconds on an idle one)


def corpus(tmp_path: Path) -> Path:
    samples = REPOSITORY / "samples"
    lines = [json.loads(line) for line in (samples / "manifest.json").read_text().splitlines()]
    manifest = tmp_path / "repeated.json"
    with manifest.open("w") as handle:
        for copy in range(COPIES):
            for index, line in enumerate(lines):
                handle.write(json.dumps({**line, "id": f"copy{copy}-{index}",
                                         "audio_filepath": str(samples / line["audio_filepath"])}) + "\n")
    return manifest


def descendants(pid: int) -> list[int]:
    """Every process below `pid` now (from /proc: the job's Ray processes and workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


@pytest.mark.parametrize("signum, to_group, exit_code, name", [
    (signal.SIGINT, True, 130, "Ctrl-C"), (signal.SIGTERM, False, 143, "SIGTERM")])
def test_a_signal_stops_the_job_with_one_line_and_the_same_command_finishes_it(tmp_path, signum, to_group, exit_code,
                                                                            name):
    from pipeline import schema
    from pipeline.io import sink

    manifest, output = corpus(tmp_path), tmp_path / "out"
    command = [sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"), "--manifest", str(manifest), "--output",
               str(output), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--part-rows", "32",
               "--window-rows", "32", "--torch-threads", "1"]
    job = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        progress = 0
        for line in job.stdout:  # bounded: the job ends, or the test's timeout ends it
            progress += re.match(r"loopscribe: \d\d:\d\d:\d\d committed ", line) is not None
            if progress == 2:
                break
        assert progress == 2, job.stderr.read()[-3000:]
        processes = descendants(job.pid)
        assert processes  # the private Ray: its GCS, raylet and workers
        signaled = time.monotonic()
        if to_group:
            os.killpg(job.pid, signum)
        else:
            os.kill(job.pid, signum)
        _, stderr = job.communicate(timeout=STOP_S)
        stop_s = time.monotonic() - signaled
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == exit_code, stderr[-3000:]
    assert stop_s < STOP_S
    for dump in ("Traceback", "KeyboardInterrupt", "SIGTERM received", "***", "logging.cc"):
        assert dump not in stderr, stderr[-3000:]
    stopped = [line for line in stderr.splitlines() if line.startswith("loopscribe: ")]
    assert len(stopped) == 1, stderr[-3000:]
    match = re.fullmatch(rf"loopscribe: stopped \({name}\): ([\d,]+) rows committed in {re.escape(str(output))}; "
                         r"the same command finishes the rest: python (.*)", stopped[0])
    assert match, stopped[0]
    assert match.group(2).split()[1:] == command[2:]  # the arguments as given
    committed = int(match.group(1).replace(",", ""))
    assert committed == len(sink.committed_ids(str(output)))
    assert 0 < committed < 20 * COPIES, "the signal came before the first part or after the last"
    deadline = time.monotonic() + 30
    while any(running(pid) for pid in processes) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in processes if running(pid)], "processes of the job still run after it ended"

    rerun = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    table = sink.read_output(str(output), columns=[schema.UTTERANCE_ID, schema.SOURCE_ID, schema.STATUS])
    assert table.num_rows == 20 * COPIES
    assert len(set(table.column(schema.UTTERANCE_ID).to_pylist())) == 20 * COPIES
    assert sorted(table.column(schema.SOURCE_ID).to_pylist()) == sorted(
        f"copy{copy}-{index}" for copy in range(COPIES) for index in range(20))
    assert set(table.column(schema.STATUS).to_pylist()) == {"ok"}
    summary = json.loads(rerun.stdout[rerun.stdout.index("\n{") + 1: rerun.stdout.index("\n}") + 2])
    assert summary["this_run"]["rows"] == 20 * COPIES - committed  # the rerun did only what was left
