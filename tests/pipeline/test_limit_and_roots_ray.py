"""`--limit` and `--allowed-roots` end to end on the session's in-process Ray, with the bundled model and samples.

- `--limit 6` writes the manifests' first 6 rows; a dry run with `--limit 14` then counts the 6 as committed and 8
  to transcribe; the run with `--limit 14` writes those 8, and every row is there once.
- `--allowed-roots`: a row whose audio is reached by ".." or through a link out of the root is an error row naming
  the rule; the row inside is transcribed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from pipeline import schema
from pipeline.config import InputConfig, ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.io import sink

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPOSITORY = Path(__file__).resolve().parents[2]
SAMPLES = REPOSITORY / "samples"
RESOURCES = ResourcesConfig(device="cpu", asr_actors=1, audio_actors=1, writer_actors=1, window_rows=8, part_rows=4,
                            batch_audio_s=40.0, torch_threads=1)


def sample_lines() -> list[dict]:
    lines = [json.loads(line) for line in (SAMPLES / "manifest.json").read_text().splitlines()]
    return [{**line, "audio_filepath": str(SAMPLES / line["audio_filepath"])} for line in lines]


def config_for(manifests, output, cache_dir, **changes) -> TranscribeJobConfig:
    return TranscribeJobConfig(manifests=tuple(map(str, manifests)), output=str(output), resources=RESOURCES,
                               model=ModelConfig(cache_dir=str(cache_dir)), **changes)


def lines_written(output) -> list[int]:
    table = sink.read_output(str(output), columns=[schema.UTTERANCE_ID, schema.LINE, schema.STATUS])
    assert len(set(table.column(schema.UTTERANCE_ID).to_pylist())) == table.num_rows  # every row once
    return sorted(table.column(schema.LINE).to_pylist())


def test_a_limit_writes_the_first_rows_and_a_larger_one_continues(ray_cluster, tmp_path):
    from pipeline.dry_run import dry_run
    from pipeline.graph import run_transcription

    lines = sample_lines()
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text("".join(json.dumps(line) + "\n" for line in lines[:4]))
    second.write_text("".join(json.dumps(line) + "\n" for line in lines[4:]))
    output = tmp_path / "out"
    summary = run_transcription(config_for([first, second], output, tmp_path / "cache", limit=6),
                                progress=lambda _: None)
    assert summary["rows"] == 6 and summary["this_run"]["rows"] == 6 and summary["rows_beyond_limit"]
    table = sink.read_output(str(output), columns=[schema.MANIFEST, schema.LINE])
    assert sorted(zip(*table.to_pydict().values())) == [(str(first), n) for n in (1, 2, 3, 4)] + [
        (str(second), 1), (str(second), 2)]

    planned = dry_run(config_for([first, second], output, tmp_path / "cache", limit=14), [str(first), str(second)])
    assert planned["rows"] == 14 and planned["rows_committed"] == 6 and planned["rows_to_transcribe"] == 8

    again = run_transcription(config_for([first, second], output, tmp_path / "cache", limit=14),
                              progress=lambda _: None)
    assert again["this_run"]["rows"] == 8 and again["rows"] == 14 and again["duplicates_removed"] == 0
    assert lines_written(output) == sorted([1, 2, 3, 4] + list(range(1, 11)))
    rest = run_transcription(config_for([first, second], output, tmp_path / "cache"), progress=lambda _: None)
    assert rest["this_run"]["rows"] == 6 and rest["rows"] == 20 and not rest["rows_beyond_limit"]


def test_audio_outside_the_allowed_roots_is_an_error_row(ray_cluster, tmp_path):
    from pipeline.graph import run_transcription

    audio, outside = tmp_path / "audio", tmp_path / "outside"
    audio.mkdir()
    outside.mkdir()
    shutil.copy(SAMPLES / "sample00.flac", audio / "a.flac")
    shutil.copy(SAMPLES / "sample01.flac", outside / "b.flac")
    os.symlink(outside / "b.flac", audio / "link.flac")
    manifest = audio / "m.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": path, "duration": 2.0}) + "\n"
                                for path in ("a.flac", "../outside/b.flac", "link.flac")))
    output = tmp_path / "out"
    config = config_for([manifest], output, tmp_path / "cache")
    config = dataclasses.replace(config, input=InputConfig(allowed_roots=(str(audio),)))
    summary = run_transcription(config, progress=lambda _: None)
    assert summary["rows_ok"] == 1 and summary["rows_error"] == 2
    rows = {row[schema.LINE]: row for row in sink.read_output(str(output)).to_pylist()}
    assert rows[1][schema.STATUS] == "ok" and rows[1][schema.TEXT]
    assert rows[2][schema.ERROR] == f"{manifest}, line 2: {outside / 'b.flac'} lies outside --allowed-roots ({audio})"
    assert rows[3][schema.ERROR].startswith(f"{manifest}, line 3: {audio / 'link.flac'} (a link to ")
