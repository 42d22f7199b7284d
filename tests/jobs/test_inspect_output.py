"""`jobs/inspect_output.py` on real outputs: a finished job's, and the same job cut short as a killed job leaves it
(parts committed, no `_SUCCESS`). It must say which it is, the rows (ok, error rows by cause), the model (its file's
sha256) and decoding, how far the cut job got against its manifest, and a command that, run, finishes it: the
finished rows are then those of the uninterrupted job."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))
SAMPLES = REPOSITORY / "samples"
BUNDLED_MODEL = REPOSITORY / "models" / "demo_hybrid_rnnt_ctc.nemo"
JOB_FLAGS = ("--device", "cpu", "--asr-actors", "1", "--audio-actors", "1", "--writer-actors", "1", "--torch-threads",
             "1", "--part-rows", "2", "--max-batch-size", "4")


def inspect_lines(*args: str) -> list[str]:
    result = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "inspect_output.py"), *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout.splitlines()


def transcribe(args: list[str]) -> str:
    from jobs.transcribe import main

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        assert main(args) == 0
    return stdout.getvalue()


@pytest.fixture(scope="module")
def finished(tmp_path_factory, ray_cluster):
    """A finished output of 8 rows: 6 samples, a missing file and a file that is not audio (two error causes)."""
    root = tmp_path_factory.mktemp("inspect_job")
    rows = [dict(json.loads(line), audio_filepath=str(SAMPLES / json.loads(line)["audio_filepath"]))
            for line in (SAMPLES / "manifest.json").read_text().splitlines()[:6]]
    (root / "noise.wav").write_bytes(b"RIFF not really audio" * 10)
    rows += [{"audio_filepath": str(root / "missing.flac"), "duration": 1.0},
             {"audio_filepath": str(root / "noise.wav"), "duration": 1.0}]
    manifest = root / "manifest.json"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = root / "out"
    transcribe(["--manifest", str(manifest), "--output", str(output), "--model", str(BUNDLED_MODEL), "--cache-dir",
                str(root / "cache"), *JOB_FLAGS])
    return {"output": output, "manifest": manifest, "root": root}


def test_a_finished_output_says_its_rows_model_decoding_and_how_to_retry_its_errors(finished):
    from pipeline.io import file_sha256

    lines = inspect_lines(str(finished["output"]))
    text = "\n".join(lines)
    assert lines[0].startswith(f"{finished['output']}: complete (")
    assert "rows: 8 (6 ok, 2 error), 8 utterances" in text
    causes = [line for line in lines if line.startswith("  errors: ")]
    assert len(causes) == 2 and any("1 x file not found" in line for line in causes), causes
    assert any("noise.wav" in line for line in causes)
    assert f"model: {BUNDLED_MODEL} (sha256 {file_sha256(BUNDLED_MODEL)})" in text
    assert "decoding: greedy" in text
    (command,) = [line for line in lines if line.startswith("to transcribe the 2 error rows again")]
    assert command.endswith("--retry-errors") and f"--output {finished['output']}" in command
    report = json.loads(subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "inspect_output.py"),
                                        str(finished["output"]), "--json"], capture_output=True, text=True,
                                       timeout=120).stdout)
    assert report["complete"] is True and report["rows_ok"] == 6 and report["rows_error"] == 2
    assert report["summary"]["rows"] == 8


@pytest.mark.slow  # a second job
def test_a_cut_short_output_says_how_far_it_got_and_its_command_finishes_it(finished, tmp_path):
    from pipeline.io import sink

    cut = tmp_path / "cut"
    shutil.copytree(finished["output"], cut)
    (cut / "_SUCCESS").unlink()
    parts = sorted(cut.glob("part-*.parquet"))
    assert len(parts) >= 3
    for part in parts[1:]:  # as a job killed after its first part leaves it
        part.unlink()
    kept = sink.read_output(str(cut), every_part=True).num_rows
    lines = inspect_lines(str(cut))
    text = "\n".join(lines)
    assert lines[0].startswith(f"{cut}: not finished (no _SUCCESS): its job is running, or stopped; the last part "
                               "was committed")
    assert f"progress: {kept} rows committed of 8 manifest rows ({kept / 8:.0%}) in 1 parts" in text
    (line,) = [line for line in lines if line.startswith("to finish it")]
    command = shlex.split(line.split(": ", 1)[1])
    assert command[:2] == ["python", "jobs/transcribe.py"] and "--retry-errors" not in command
    assert command[command.index("--output") + 1] == str(cut)  # the folder inspected, wherever the job wrote
    transcribe(command[2:])
    assert inspect_lines(str(cut))[0].startswith(f"{cut}: complete")

    def rows(output: Path) -> dict[str, tuple]:
        return {r["utterance_id"]: (r["status"], r["text"]) for r in sink.read_output(str(output)).to_pylist()}

    assert rows(cut) == rows(finished["output"])


def test_the_command_rebuilt_from_a_config_gives_that_config_back():
    from jobs import transcribe
    from pipeline.reports.inspection import job_command

    args = ["--manifest", "a.json", "s3://b/m/*.json", "--output", "s3://b/out", "--model", "m.nemo",
            "--decoding", "alsd", "--beam-size", "8", "--lm", "x.lm", "--lm-weight", "0.4", "--no-cuda-graphs",
            "--confidence", "--ctc-collapse-threshold", "weak", "--allowed-roots", "/data", "--asr-actors", "3",
            "--chunk-s", "0", "--limit", "10", "--retry-errors", "--export", "srt", "ctm"]
    config = transcribe.config_from_args(transcribe.parser().parse_args(args))
    recorded = json.loads(json.dumps(config.to_dict()))  # as _config.json holds it
    command = job_command(recorded)
    assert command[:2] == ["python", "jobs/transcribe.py"]
    again = transcribe.config_from_args(transcribe.parser().parse_args(command[2:]))
    assert json.loads(json.dumps(again.to_dict())) == recorded
    default = transcribe.config_from_args(transcribe.parser().parse_args([]))
    assert job_command(json.loads(json.dumps(default.to_dict())))[2:] == [
        "--manifest", default.manifests[0], "--output", default.output, "--model", default.model.uri]


def test_error_causes_are_counted_without_where_and_details():
    from pipeline.reports.inspection import error_cause

    assert error_cause("s3://b/m.json, line 12: s3://b/a/x.wav: not decodable audio (Format not recognised)") == \
        "not decodable audio"
    assert error_cause("m.json, line 3: not UTF-8 (byte 0xff at column 17)") == "not UTF-8"
    assert error_cause("m.json, line 4: /a/y.flac: offset 12.5 s is past the end (3.0 s)") == \
        "offset N s is past the end"
    assert error_cause("m.json, line 5: missing key 'audio_filepath'") == "missing key 'audio_filepath'"
    assert error_cause("") == "(no cause recorded)"


def test_a_folder_that_is_no_output_is_named_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "inspect_output.py"), str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"loopscribe: no loopscribe output at {tmp_path}: no _identity.json, "
                                     "_config.json or parts")


def test_no_job_is_named_like_a_standard_module():
    """A script's folder is first on `sys.path`: jobs/inspect.py would stand in for `inspect` in every job."""
    clashes = [p.name for p in (REPOSITORY / "jobs").glob("*.py") if p.stem in sys.stdlib_module_names]
    assert clashes == []
