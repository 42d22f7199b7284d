"""`jobs/transcribe.py` refuses what it can see is wrong before Ray starts: one line naming the file, no traceback.

Each case runs the real command in a subprocess; none may start Ray (a Ray start prints its own lines and takes
seconds), so each must end well within the time a cluster start would take.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
BUNDLED_MODEL = REPOSITORY / "models" / "demo_hybrid_rnnt_ctc.nemo"
SAMPLE = REPOSITORY / "samples" / "sample00.flac"


def refused(*args: str, cwd: Path = REPOSITORY) -> str:
    """Runs the job; asserts it failed with one `loopscribe:` line and no traceback; returns that line."""
    result = subprocess.run([sys.executable, str(REPOSITORY / "jobs" / "transcribe.py"), *args], cwd=cwd,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "ray" not in result.stderr.lower(), result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("loopscribe: ")
             and not line.startswith("loopscribe: warning")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_empty_manifest_is_refused_before_the_cluster(tmp_path):
    empty, blank = tmp_path / "empty.json", tmp_path / "blank.json"
    empty.write_bytes(b"")
    blank.write_text("\n   \n\t\n")
    line = refused("--manifest", str(empty), str(blank), "--output", str(tmp_path / "out"))
    assert "nothing to transcribe" in line
    assert not (tmp_path / "out").exists()


def test_an_audio_file_given_as_the_manifest_is_refused_naming_it(tmp_path):
    line = refused("--manifest", str(SAMPLE), "--output", str(tmp_path / "out"))
    assert "nothing to transcribe" in line


def test_a_glob_matching_nothing_and_a_missing_model_are_one_line(tmp_path):
    assert "no manifest matches" in refused("--manifest", str(tmp_path / "nope*.json"),
                                           "--output", str(tmp_path / "out"))
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"audio_filepath": str(SAMPLE), "duration": 1.0}) + "\n")
    assert f"no model at {tmp_path / 'missing.nemo'}" in refused(
        "--manifest", str(manifest), "--model", str(tmp_path / "missing.nemo"), "--output", str(tmp_path / "out"))


@pytest.mark.parametrize("strategy", ["greedy", "ctc_beam"])
def test_a_word_level_arpa_read_as_tokens_is_refused_before_the_cluster(tmp_path, strategy):
    """A word-level ARPA is converted (tests/decoders/ngram/test_word_lm.py); forced to be read as tokens
    (`--lm-level token`), its words are not the model's tokens: refused in one line, naming it."""
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"audio_filepath": str(SAMPLE), "duration": 1.0}) + "\n")
    arpa = tmp_path / "words.arpa"
    arpa.write_text("\\data\\\nngram 1=3\nngram 2=1\n\n\\1-grams:\n-1.0\t<s>\t-0.3\n-0.5\thello\t-0.2\n"
                    "-0.5\tworld\n\n\\2-grams:\n-0.1\thello world\n\n\\end\\\n")
    line = refused("--manifest", str(manifest), "--output", str(tmp_path / "out"), "--model", str(BUNDLED_MODEL),
                   "--decoding", strategy, "--lm", str(arpa), "--lm-weight", "0.5", "--lm-level", "token")
    assert str(arpa) in line and "word" in line
