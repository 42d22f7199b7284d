"""`--limit`, `--dry-run` and `--allowed-roots` are settings declared once (`pipeline/config.py`): flags and YAML
keys derive from them, and none is part of the output's identity (they choose which rows a run writes, or make rows
error rows, not how a row is transcribed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY))
from jobs import transcribe  # noqa: E402
from pipeline.config import config_from_dict  # noqa: E402


def test_the_flags_come_from_the_settings():
    config = transcribe.config_from_args(transcribe.parser().parse_args(
        ["--limit", "5", "--dry-run", "--allowed-roots", "/data/audio", "s3://bucket/audio/"]))
    assert config.limit == 5 and config.dry_run is True
    assert config.input.allowed_roots == ("/data/audio", "s3://bucket/audio/")
    default = transcribe.config_from_args(transcribe.parser().parse_args([]))
    assert default.limit is None and default.dry_run is False and default.input.allowed_roots == ()
    with pytest.raises(SystemExit, match="limit must be an integer >= 1, got 0"):
        transcribe.config_from_args(transcribe.parser().parse_args(["--limit", "0"]))


def test_yaml_takes_a_list_of_roots_and_refuses_an_empty_one():
    config = config_from_dict({"input": {"allowed_roots": ["/a", "/b"]}, "limit": 3})
    assert config.input.allowed_roots == ("/a", "/b") and config.limit == 3
    assert config_from_dict({"input": {"allowed_roots": "/a"}}).input.allowed_roots == ("/a",)
    with pytest.raises(ValueError, match="allowed_roots must be non-empty"):
        config_from_dict({"input": {"allowed_roots": ["/a", ""]}})


def test_none_of_them_is_part_of_the_outputs_identity():
    plain = config_from_dict({})
    restricted = config_from_dict({"limit": 7, "dry_run": True, "input": {"allowed_roots": ["/a"]}})
    assert plain.results_identity() == restricted.results_identity()
