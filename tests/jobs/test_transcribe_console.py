"""What a user sees on the console from `jobs/transcribe.py`: loopscribe's own lines (its start, a progress line per
committed part, the summary), not Ray's. The real command in a subprocess, starting its own private local Ray."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPOSITORY = Path(__file__).resolve().parents[2]


def test_a_local_run_prints_loopscribes_lines_and_not_rays(tmp_path):
    pytest.importorskip("ray")
    lines = (REPOSITORY / "samples" / "manifest.json").read_text().splitlines()[:4]
    manifest = tmp_path / "four.json"
    manifest.write_text("\n".join(json.dumps({**json.loads(line), "audio_filepath": str(
        REPOSITORY / "samples" / Path(json.loads(line)["audio_filepath"]).name)}) for line in lines) + "\n")
    result = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"), "--manifest", str(manifest),
                             "--output", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    console = result.stdout + result.stderr
    assert result.returncode == 0, console[-3000:]
    # the progress line: the total (counted while the job started), the percentage, the rate, the time left
    assert re.search(r"^loopscribe: \d\d:\d\d:\d\d committed 4 of 4 rows \(100\.0%\), [\d.]+ of [\d.]+ s of audio, "
                     r"0 error rows, [\d.]+x real time, [\d.]+ rows/s, done$", result.stdout, re.MULTILINE), console
    assert "4 transcripts ok" in result.stdout, console[-3000:]
    assert f"loopscribe: report: {tmp_path / 'out' / '_report.md'}" in result.stdout, console[-3000:]
    assert '"report"' not in result.stdout  # its figures are in _report.md and _summary.json, not on the console
    # Ray's INFO lines (its start, Ray Data's per-operator progress), its token-authentication notice, Ray Data's
    # warning about a small input and the core worker's error-level line about Ray Data's actors' constructor
    # arguments (ray-project/ray#57733) are what used to fill the console
    for noise in (" INFO ", "Started a local Ray instance", "Token authentication is enabled", "UserWarning",
                  "Tasks: ", "Running Dataset", "core_worker", "constructor arguments"):
        assert noise not in console, f"{noise!r} on the console:\n{console[-3000:]}"
    assert all(line.startswith("loopscribe:") for line in result.stderr.splitlines()), result.stderr[-3000:]


def test_ray_data_issue_detector_warnings_stay_off_the_console():
    """Ray Data's issue detector warns every 30 s that a stage's workers use more memory than they reserve: the
    console handlers drop those records (they still reach ray-data.log); other Ray Data warnings still show."""
    import logging

    from pipeline.graph import quiet_ray_data

    quiet_ray_data()
    console = [h for h in logging.getLogger("ray.data").handlers
               if not isinstance(h, logging.FileHandler) and type(h).__name__ != "SessionFileHandler"]
    assert console

    def record(path: str) -> logging.LogRecord:
        return logging.LogRecord("ray.data", logging.WARNING, path, 1, "a warning", None, None)

    detector = record("/x/ray/data/_internal/issue_detection/issue_detector_manager.py")
    other = record("/x/ray/data/_internal/execution/streaming_executor.py")
    assert not any(h.filter(detector) for h in console)
    assert all(h.filter(other) for h in console)
