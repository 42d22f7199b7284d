"""Durations checked both ways at the end of a job (`pipeline/graph.py::output_totals`) and what the job prints of
them (`pipeline/reports/summary.py::findings`).

Before, a manifest `duration` shorter than the audio went unseen: the row decoded what the manifest said, and
`audio_duration` recorded that, so a 2.4 s file listed as 0.24 s came out an ok row of one word, uncounted.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from pipeline import schema
from pipeline.graph import output_totals
from pipeline.io.sink import to_output_table, write_part
from pipeline.reports import findings

TOLERANCE_S = 0.25


def row(line: int, audio: str, duration: float, decoded: float, whole: float | None, offset: float = 0.0,
        channel: int | None = None) -> dict:
    return {schema.UTTERANCE_ID: f"u{line}", schema.MANIFEST: "/m.json", schema.LINE: line,
            schema.AUDIO_FILEPATH: audio, schema.CHANNEL: channel, schema.OFFSET: offset, schema.DURATION: duration,
            schema.AUDIO_DURATION: decoded, schema.FILE_DURATION: whole, schema.STATUS: schema.STATUS_OK}


def commit(output: str, rows: list[dict]) -> None:
    write_part(output, to_output_table({name: [r.get(name) for r in rows] for name in schema.OUTPUT_SCHEMA.names}))


def totals(output: str) -> dict:
    summary = output_totals(output, TOLERANCE_S)
    return {**summary, "duplicates_removed": 0}


def test_a_manifest_duration_shorter_than_its_whole_file_is_counted_and_warned(tmp_path):
    output = str(tmp_path / "out")
    commit(output, [
        row(1, "/a/short.wav", 0.24, 0.24, 2.4),  # the case: a whole file listed at a tenth of its length
        row(2, "/a/right.wav", 2.4, 2.4, 2.4),
        row(3, "/a/within.wav", 2.3, 2.3, 2.4),  # within the tolerance
        row(4, "/a/long.wav", 5.0, 2.4, 2.4),  # longer than the audio: as before
        row(5, "/a/recording.wav", 1.0, 1.0, 60.0),  # segments of one recording: not compared with the whole
        row(6, "/a/recording.wav", 1.0, 1.0, 60.0, offset=1.0),
        row(7, "/a/from_offset.wav", 1.0, 1.0, 60.0, offset=5.0),  # a segment from an offset
        row(8, "/a/stereo.wav", 1.0, 1.0, 3.0, channel=0),  # each channel its own whole file
        row(9, "/a/stereo.wav", 3.0, 3.0, 3.0, channel=1),
        row(10, "/a/unknown.flac", 1.0, 1.0, None),  # a header that leaves the length open, a segment: unknown
    ])
    summary = totals(output)
    assert summary["durations_shorter_than_audio"] == 2
    assert summary["durations_shorter_examples"] == [
        "/m.json, line 1: duration 0.24 s, the file 2.400 s (only 0.24 s of it transcribed)",
        "/m.json, line 8: duration 1 s, the file 3.000 s (only 1 s of it transcribed)"]
    assert summary["duration_mismatches"] == 3
    assert summary["duration_mismatch_examples"] == [
        "/m.json, line 1: duration 0.24 s, the file 2.400 s (only 0.24 s of it transcribed)",
        "/m.json, line 4: duration 5 s, measured 2.400 s",
        "/m.json, line 8: duration 1 s, the file 3.000 s (only 1 s of it transcribed)"]
    lines = findings(summary)
    assert any(line.startswith("2 row(s) whose manifest duration is shorter than their audio file: only that much")
               and "file_duration" in line and "line 1: duration 0.24 s" in line for line in lines), lines
    assert any(line.startswith("1 row(s) whose manifest duration is longer than their audio")
               and "line 4: duration 5 s, measured 2.400 s" in line for line in lines), lines


def test_parts_written_before_the_file_length_was_recorded_are_summed_up_as_before(tmp_path):
    """An output resumed from an earlier loopscribe: its parts lack `file_duration`, which reads as null."""
    output = tmp_path / "out"
    output.mkdir()
    old = to_output_table({name: [r.get(name) for r in [row(1, "/a.wav", 5.0, 2.4, None)]]
                           for name in schema.OUTPUT_SCHEMA.names}).drop_columns([schema.FILE_DURATION])
    pq.write_table(old, output / "part-old.parquet")
    commit(str(output), [row(2, "/b.wav", 0.24, 0.24, 2.4)])
    summary = totals(str(output))
    assert (summary["rows"], summary["duration_mismatches"], summary["durations_shorter_than_audio"]) == (2, 2, 1)


def test_totals_count_statuses_and_ids_given_to_several_utterances(tmp_path):
    output = str(tmp_path / "out")
    rows = [row(line, f"/{line}.wav", 1.0, 1.0, 1.0) for line in range(1, 6)]
    rows[1][schema.STATUS] = schema.STATUS_ERROR
    for r, source_id in zip(rows, ["x", "x", "y", None, "z"]):
        r[schema.SOURCE_ID] = source_id
    commit(output, rows)
    summary = totals(output)
    assert {key: summary[key] for key in ("rows", "rows_ok", "rows_error", "ids_given_to_several_utterances",
                                          "ids_given_to_several_examples", "duration_mismatches")} == {
        "rows": 5, "rows_ok": 4, "rows_error": 1, "ids_given_to_several_utterances": 1,
        "ids_given_to_several_examples": ["x"], "duration_mismatches": 0}
    assert findings(summary) == ["1 manifest id(s) name more than one utterance (all kept), e.g. x"]


@pytest.mark.parametrize("count", [0, 1])
def test_an_empty_or_tiny_output_sums_up(tmp_path, count):
    output = str(tmp_path / "out")
    if count:
        commit(output, [row(1, "/a.wav", 1.0, 1.0, 1.0)])
    summary = totals(output)
    assert (summary["rows"], summary["duration_mismatches"], summary["durations_shorter_than_audio"]) == (count, 0, 0)
