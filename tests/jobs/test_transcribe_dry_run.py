"""`jobs/transcribe.py --dry-run`: the job checked without running it (`pipeline/dry_run.py`). It counts rows and
audio seconds, reads every manifest line and the start of a sample of the audio, names what it cannot use, writes
nothing, starts no Ray, and refuses an output of another decoding as the run would. The real command, in a
subprocess that reports whether it imported Ray."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
SAMPLES = REPOSITORY / "samples"

# the job's main() in a subprocess; then one line saying whether Ray was imported
RUN = ("import sys; sys.path.insert(0, {repo!r}); from jobs.transcribe import main; code = main(sys.argv[1:]); "
       "print('RAY IMPORTED' if 'ray' in sys.modules else 'NO RAY'); sys.exit(code)")


def job(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN.format(repo=str(REPOSITORY)), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=240)


def report_of(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("\n{") + 1: stdout.index("\n}") + 2])


def corpus(tmp_path: Path) -> tuple[Path, Path, float]:
    lines = [json.loads(line) for line in (SAMPLES / "manifest.json").read_text().splitlines()]
    good = tmp_path / "good.json"
    good.write_text("".join(json.dumps({**line, "audio_filepath": str(SAMPLES / line["audio_filepath"])}) + "\n"
                            for line in lines) + '{"audio_filepath": "x.flac", "duration": \n')
    (tmp_path / "notes.wav").write_text("not audio at all\n" * 100)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"audio_filepath": "notes.wav", "duration": 1.5}) + "\n")
    return good, bad, sum(line["duration"] for line in lines) + 1.5


def test_a_dry_run_counts_checks_and_writes_nothing(tmp_path):
    good, bad, audio_s = corpus(tmp_path)
    result = job("--manifest", str(good), str(bad), "--output", str(tmp_path / "out"), "--dry-run",
                 "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    console = result.stdout + result.stderr
    assert result.returncode == 0, console[-3000:]
    assert "NO RAY" in result.stdout, console[-3000:]
    report = report_of(result.stdout)
    assert report["rows"] == 22 and report["rows_error"] == 1 and report["rows_to_transcribe"] == 21
    assert abs(report["audio_hours"] * 3600 - audio_s) < 1e-6 and report["rows_committed"] == 0
    # the start of 16 rows read, the one of the second manifest among them (manifests are sampled in turn)
    assert report["audio_checked"] == 16 and report["audio_unreadable"] == 1 and report["sample_rates"] == {"16000": 15}
    assert f"{bad}, line 1: {tmp_path / 'notes.wav'}: not decodable audio" in report["audio_problem_examples"][0]
    assert f"{good}, line 21: malformed JSON" in report["row_problem_examples"][0]
    assert "loopscribe: warning: " + report["audio_problem_examples"][0] in result.stderr
    assert "loopscribe: dry run: 21 rows to transcribe" in result.stdout and "nothing was transcribed" in result.stdout
    assert not (tmp_path / "out").exists()


def test_a_dry_run_with_a_limit_counts_the_first_rows(tmp_path):
    good, bad, _ = corpus(tmp_path)
    result = job("--manifest", str(good), str(bad), "--output", str(tmp_path / "out"), "--dry-run", "--limit", "5",
                 "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    report = report_of(result.stdout)
    assert report["rows"] == 5 and report["rows_to_transcribe"] == 5 and report["rows_beyond_limit"]
    assert report["manifests"] == 1 and report["audio_checked"] == 5 and report["audio_unreadable"] == 0
    assert "--limit 5: the first 5 rows of the manifests; more rows follow" in result.stdout


def test_a_dry_run_refuses_an_output_of_another_decoding_as_the_run_would(tmp_path):
    from pipeline.config import DecodingConfig, TranscribeJobConfig
    from pipeline.graph import output_identity
    from pipeline.io import claim, file_sha256

    good, _, _ = corpus(tmp_path)
    output = tmp_path / "out"
    other = TranscribeJobConfig(output=str(output), decoding=DecodingConfig(strategy="ctc_greedy"))
    claim.claim_output(str(output), output_identity(other, file_sha256(other.model.uri)))
    before = sorted(path.name for path in output.iterdir())
    result = job("--manifest", str(good), "--output", str(output), "--dry-run", "--cache-dir",
                 str(tmp_path / "cache"), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    refusal = [line for line in result.stderr.splitlines() if line.startswith("loopscribe: ")]
    assert len(refusal) == 1 and "holds results of another model or decoding" in refusal[0], result.stderr
    assert "ctc_greedy" in refusal[0]
    assert sorted(path.name for path in output.iterdir()) == before
