"""`ray job submit` of jobs/transcribe.py to a local head started by infra/start_local_head.sh.

The head gets its own state dir and free ports, runs the job on the CPU, and is stopped by
infra/stop_local_head.sh, which ends only that head's processes. The job's output must hold every row of the
manifest once, with the transcripts that decoding in-process gives.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from pipeline import schema
from pipeline.io import sink

pytestmark = [pytest.mark.ray, pytest.mark.nemo, pytest.mark.slow]

REPOSITORY = Path(__file__).resolve().parents[2]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture
def local_head():
    state = Path("/tmp") / f"lsj-{uuid.uuid4().hex[:8]}"
    gcs, dashboard, client, agent = free_ports(4)
    start = subprocess.run(
        [str(REPOSITORY / "infra" / "start_local_head.sh"), "--state-dir", str(state), "--port", str(gcs),
         "--dashboard-port", str(dashboard), "--client-port", str(client), "--agent-port", str(agent),
         "--worker-ports", "21000-21999", "--num-cpus", "2"],
        capture_output=True, text=True, timeout=240)
    try:
        assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
        yield state
    finally:
        stop = subprocess.run([str(REPOSITORY / "infra" / "stop_local_head.sh"), "--state-dir", str(state),
                               "--clean"], capture_output=True, text=True, timeout=180)
        assert stop.returncode == 0, stop.stdout[-2000:] + stop.stderr[-2000:]


def test_ray_job_submit_transcribes_a_manifest(local_head, nemo_assets, tmp_path):
    from pipeline.decoding.recognize import recognize
    from pipeline.model.nemo import load_asr_model

    manifest = tmp_path / "manifest.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(path), "duration": 5.0}) + "\n"
                                for path in nemo_assets["files"]) + '{"audio_filepath": "gone.wav"}\n')
    output = tmp_path / "out"
    environment = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(local_head / "auth_token"))
    environment.pop("RAY_ADDRESS", None)
    submit = subprocess.run(
        [str(REPOSITORY / ".venv" / "bin" / "ray"), "job", "submit", "--address",
         (local_head / "dashboard_url").read_text().strip(), "--",
         "python", "jobs/transcribe.py", "--manifest", str(manifest), "--output", str(output),
         "--model", str(nemo_assets["checkpoints"]["rnnt"]), "--cache-dir", str(tmp_path / "cache"),
         "--device", "cpu", "--audio-actors", "1", "--torch-threads", "1"],
        capture_output=True, text=True, timeout=600, env=environment)
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert "succeeded" in submit.stdout
    assert sink.is_complete(str(output))
    rows = {r[schema.LINE]: r for r in sink.read_output(str(output)).to_pylist()}
    assert sorted(rows) == list(range(1, 10))
    assert rows[9][schema.STATUS] == schema.STATUS_ERROR and "missing key 'duration'" in rows[9][schema.ERROR]
    model = load_asr_model(str(nemo_assets["checkpoints"]["rnnt"]))
    for line, waveform in enumerate(nemo_assets["waveforms"], start=1):
        assert rows[line][schema.TEXT] == recognize(model, [waveform])[0].text
