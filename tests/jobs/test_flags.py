"""The flags every job shares are one declaration: the same name, help, default and choices in each job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))
from jobs import lm_bias, pseudo_label, transcribe  # noqa: E402

SHARED = ("--model", "--cache-dir", "--ray-address")


def flag(parser, name):
    return next(a for a in parser._actions if name in a.option_strings)


@pytest.mark.parametrize("name", SHARED)
def test_a_shared_flag_reads_the_same_in_every_job(name):
    seen = {(f.help, f.choices, f.metavar) for f in (flag(job.parser(), name)
                                                   for job in (transcribe, lm_bias, pseudo_label))}
    assert len(seen) == 1, seen


def test_device_and_strategy_keep_their_choices_in_pseudo_labelling():
    assert flag(pseudo_label.parser(), "--device").choices == flag(transcribe.parser(), "--device").choices
    assert flag(pseudo_label.parser(), "--decoding").choices == flag(transcribe.parser(), "--decoding").choices


def test_the_jobs_configs_come_from_their_flags():
    config = pseudo_label.config_from_args(pseudo_label.parser().parse_args(
        ["--output", "out", "--audio", "a.flac", "b.flac", "--min-confidence", "0.6", "--device", "cpu"]))
    assert config.audio == ("a.flac", "b.flac") and config.filters.min_confidence == 0.6 and config.device == "cpu"
    assert config.model == transcribe.config_from_args(transcribe.parser().parse_args([])).model.uri
    with pytest.raises(pseudo_label.LabelError, match="min_confidence must be a number from 0 to 1, got 1.5"):
        pseudo_label.config_from_args(pseudo_label.parser().parse_args(["--output", "o", "--min-confidence", "1.5"]))
    bias = lm_bias.config_from_args(lm_bias.parser().parse_args(
        ["--dev", "dev.json", "--output", "o", "--beam-size", "2", "8", "--orders", "3"]))
    assert bias.beam_sizes == (2, 8) and bias.orders == (3,) and bias.text == ()
    with pytest.raises(SystemExit):  # --dev is required
        lm_bias.parser().parse_args(["--output", "o"])
