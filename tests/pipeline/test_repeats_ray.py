"""Repeats and short durations end to end on an in-process Ray, where main 5b33f47 gave exit 0 and no warning:

- one manifest passed twice (a copy caught by a glob) with small parts: 16 lines in, 8 rows out and
  `duplicates_removed: 0`, parts of the copy written over the first's, and which copy's reference text survived
  depended on write order. Now every repeat is counted, a repeat whose reference text differs is reported, and the
  first listing's row is kept;
- a whole file listed with a duration a tenth of its length: one ok row of a word or two, uncounted. Now it is
  counted and named, and the row records the file's length.
"""

from __future__ import annotations

import json

import pytest
import soundfile

from pipeline import schema
from pipeline.config import ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.io import sink
from pipeline.reports import findings

pytestmark = [pytest.mark.ray, pytest.mark.nemo, pytest.mark.slow]


def test_a_manifest_passed_twice_counts_every_repeat_and_a_short_duration_is_reported(ray_cluster, nemo_assets,
                                                                                      tmp_path):
    from pipeline.graph import run_transcription

    files = nemo_assets["files"]
    lengths_s = [soundfile.info(str(path)).duration for path in files]
    lines = [{"audio_filepath": str(path), "duration": length_s, "text": f"reference {i}"}
             for i, (path, length_s) in enumerate(zip(files, lengths_s))]
    lines[0]["duration"] = round(lengths_s[0] / 10, 3)  # a whole file listed at a tenth of its length
    (tmp_path / "data").mkdir()
    manifest = tmp_path / "data" / "m.json"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    copy = tmp_path / "data" / "m_copy.json"  # the copy a glob caught, one reference corrected since
    lines[3] = {**lines[3], "text": "reference 3, corrected"}
    copy.write_text("".join(json.dumps(line) + "\n" for line in lines))
    output = tmp_path / "out"
    config = TranscribeJobConfig(
        manifests=(str(tmp_path / "data" / "*.json"),), output=str(output),
        model=ModelConfig(uri=str(nemo_assets["checkpoints"]["rnnt"]), cache_dir=str(tmp_path / "cache")),
        resources=ResourcesConfig(device="cpu", asr_actors=1, audio_actors=1, writer_actors=1, window_rows=8,
                                  part_rows=8, batch_audio_s=40.0, torch_threads=1))
    summary = run_transcription(config, progress=lambda _: None)

    table = sink.read_output(str(output))
    assert summary["this_run"]["rows"] == 16
    assert table.num_rows == summary["rows"] == 8 and len(set(table.column(schema.UTTERANCE_ID).to_pylist())) == 8
    assert summary["duplicates_removed"] == 8  # every repeat, whatever the part layout
    assert summary["repeats_differing"] == 1
    assert summary["repeats_differing_examples"] == [
        f"{manifest}, line 4 and {copy}, line 4: reference_text differs (the first is kept)"]
    assert set(table.column(schema.MANIFEST).to_pylist()) == {str(manifest)}  # the first listing: m.json

    rows = {row[schema.LINE]: row for row in table.to_pylist()}
    assert rows[4][schema.REFERENCE_TEXT] == "reference 3"
    assert rows[1][schema.AUDIO_DURATION] == pytest.approx(lines[0]["duration"], abs=1e-3)
    assert rows[1][schema.FILE_DURATION] == pytest.approx(lengths_s[0], abs=1e-3)
    assert all(rows[line][schema.FILE_DURATION] == pytest.approx(lengths_s[line - 1], abs=1e-3) for line in rows)
    assert summary["durations_shorter_than_audio"] == summary["duration_mismatches"] == 1
    assert summary["durations_shorter_examples"] == [
        f"{manifest}, line 1: duration {lines[0]['duration']:g} s, the file {lengths_s[0]:.3f} s "
        f"(only {lines[0]['duration']:g} s of it transcribed)"]
    warned = findings(summary)
    assert any(line.startswith("8 row(s) named an utterance") for line in warned), warned
    assert any(line.startswith("1 utterance(s) listed more than once with different reference text") for line in warned)
    assert any(line.startswith("1 row(s) whose manifest duration is shorter than their audio file") for line in warned)
    assert json.loads((output / sink.SUMMARY_FILE).read_text())["repeats_differing"] == 1
