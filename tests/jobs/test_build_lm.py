"""`jobs/build_lm.py` on the command line: a JSON report, and none of the trainer's own output (the builder itself:
tests/pipeline/lm/test_build.py)."""

from __future__ import annotations

import json

import pytest

from decoders.ngram.lm import NgramLm
from tests.pipeline.lm import test_build

domain = test_build.domain  # the fixture: a banking-command text and a SentencePiece model of it


def test_command_line_prints_json_and_no_trainer_noise(domain, capfd):
    pytest.importorskip("varikn")
    from jobs.build_lm import main

    folder, text, _, tokenizer = domain
    output = folder / "new" / "folder" / "cli.lm"  # folders that do not exist yet are made
    assert main(["--text", str(text), "--tokenizer", str(tokenizer), "--output", str(output), "--order", "3",
                 "--heldout-every", "10", "--tool", "varikn", "--json"]) == 0
    printed = capfd.readouterr()  # file descriptors, not only sys.stdout: varikn's C++ writes to them directly
    assert "Creating unigram" not in printed.out + printed.err and "allocation" not in printed.out + printed.err
    report = json.loads(printed.out.strip().splitlines()[-1])
    assert report["order"] == 3 and report["heldout_sentences"] == 150 and report["training_sentences"] == 1350
    assert NgramLm.load(output).max_order == 3
