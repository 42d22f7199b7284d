"""`recipes/production_shapes/build.py` writes a `.nemo` file the pipeline reads like any other, and the text
its tokenizers learn from is the same on every run.

The command runs as users run it, in a subprocess, at one encoder layer of the parakeet-rnnt-1.1b shape (every
width and the vocabulary kept; about 40 M parameters, 20 s). Its model's decoding is compared with NeMo's in
tests/pipeline/model/test_production_shapes.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.mark.nemo
def test_the_command_builds_a_model_the_pipeline_reads(tmp_path):
    from pipeline.model.nemo_file import read_model_facts, read_model_layout

    result = subprocess.run([sys.executable, str(REPOSITORY / "recipes" / "production_shapes" / "build.py"),
                             "--shape", "parakeet-rnnt-1.1b", "--layers", "1", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    built = json.loads(result.stdout.strip().splitlines()[-1])
    path = tmp_path / "parakeet-rnnt-1.1b-1layers.nemo"
    assert built["path"] == str(path) and built["bytes"] == path.stat().st_size
    assert built["layers"] == 1 and 1.05e9 < built["parameters_at_full_depth"] < 1.15e9
    assert built["tokenizer"] == {"vocab_size": 1024, "cased": False, "punctuation": "'"}
    assert set(built["biases"]) == {"transducer", "transducer_punctuation"}
    facts, layout = read_model_facts(path), read_model_layout(path)
    assert (facts.kind, facts.durations, facts.sample_rate) == ("rnnt", (), 16000)
    assert layout.tokenizer.vocab_size == 1024 and layout.frame_shift_s == pytest.approx(0.08)


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    command = [sys.executable, str(REPOSITORY / "recipes" / "production_shapes" / "build.py"), "--out", str(tmp_path)]
    unknown = subprocess.run([*command, "--shape", "canary-1b"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "invalid choice: 'canary-1b'" in unknown.stderr
    shallow = subprocess.run([*command, "--shape", "parakeet-tdt-0.6b", "--layers", "0"], capture_output=True,
                             text=True, timeout=60)
    assert shallow.returncode == 2 and "--layers must be at least 1" in shallow.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("style", ["cased", "lower", "multilingual"])
def test_the_training_text_is_the_same_on_every_run(style):
    from recipes.production_shapes.text import TEXTS

    lines = TEXTS[style](300, seed=4)
    assert lines == TEXTS[style](300, seed=4) and lines != TEXTS[style](300, seed=5)
    text = " ".join(lines)
    if style == "lower":
        assert text == text.lower() and set(text) - set("abcdefghijklmnopqrstuvwxyz' ") == set()
    else:
        assert any(c.isupper() for c in text) and all(mark in text for mark in ",.?'")
    if style == "multilingual":
        assert "¿" in text and any(c in text for c in "äöüéèñçąęł")
