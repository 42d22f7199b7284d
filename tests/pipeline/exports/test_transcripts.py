"""An output read for export (`pipeline/exports/transcripts.py`): rows grouped into recordings in time order with word
times from the recording's start, unique file names, error rows kept apart, and an unfinished output refused or read
with each utterance once. Outputs are written with the real commit protocol (`pipeline/io/sink.py`)."""

from __future__ import annotations

import pytest

from pipeline import schema
from pipeline.exports.transcripts import ExportError, read_transcripts, recording_names, stem_of
from pipeline.io import sink


def row(utterance_id: str, audio: str, text: str, words: list[tuple[str, float, float]] | None = None, *,
        offset: float = 0.0, line: int = 1, channel: int | None = None, status: str = "ok", error: str = "",
        extra: str = "{}", reference: str = "") -> dict:
    return {schema.UTTERANCE_ID: utterance_id, schema.MANIFEST: "/data/m.json", schema.LINE: line,
            schema.AUDIO_FILEPATH: audio, schema.OFFSET: offset, schema.DURATION: 2.0, schema.CHANNEL: channel,
            schema.AUDIO_DURATION: 2.0, schema.REFERENCE_TEXT: reference, schema.EXTRA: extra,
            schema.TEXT: text if status == "ok" else None,
            schema.WORDS: None if status != "ok" else [
                {"word": w, "start": s, "end": e, "confidence": None} for w, s, e in (words or [])],
            schema.STATUS: status, schema.ERROR: error}


def write_output(path, rows: list[dict], parts: int = 1, complete: bool = True) -> str:
    output = str(path)
    for index in range(parts):
        chosen = rows[index::parts]
        sink.write_part(output, sink.to_output_table({name: [r.get(name) for r in chosen]
                                                      for name in schema.OUTPUT_SCHEMA.names}))
    if complete:
        sink.mark_success(output, {})
    return output


def test_segments_of_one_file_are_one_recording_in_time_order_with_times_from_its_start(tmp_path):
    output = write_output(tmp_path / "out", [
        row("b", "/a/talk.wav", "second part", [("second", 0.1, 0.5), ("part", 0.6, 0.9)], offset=10.0, line=1),
        row("a", "/a/talk.wav", "first part", [("first", 0.2, 0.4), ("part", 0.5, 0.8)], offset=0.0, line=2),
        row("c", "/a/other.flac", "hello", [("hello", 0.0, 0.3)], line=3),
        row("d", "/a/gone.wav", "", status="error", error="/data/m.json, line 4: /a/gone.wav: file not found", line=4),
    ], parts=2)
    transcripts = read_transcripts(output)
    recordings = {r.name: r for r in transcripts.recordings()}
    assert list(recordings) == ["other", "talk"]  # in name order; the error row's file has no recording
    talk = recordings["talk"]
    assert [u.text for u in talk.utterances] == ["first part", "second part"]
    assert [(w.text, w.start_s, w.end_s) for u in talk.utterances for w in u.words] == [
        ("first", 0.2, 0.4), ("part", 0.5, 0.8), ("second", 10.1, 10.5), ("part", 10.6, 10.9)]
    assert [(e.line, e.audio_filepath) for e in transcripts.errors] == [(4, "/a/gone.wav")]
    assert transcripts.rows_ok == 3
    assert [u.line for u in transcripts.utterances()] == [1, 2, 3]  # manifest order


def test_names_are_file_stems_made_safe_and_unique_by_a_hash_of_the_path_when_they_collide():
    assert stem_of("/data/talks/intro.flac") == "intro"
    assert stem_of("s3://bucket/a/b c.wav?versionId=7") == "b_c"
    assert stem_of("https://host/x/record.v2.mp3#t=3") == "record.v2"
    assert stem_of("/data/noext") == "noext" and stem_of("/data/.hidden") == ".hidden"
    assert stem_of("/data/:*?.wav") == "recording"
    names = recording_names([("/a/x.wav", None), ("/b/x.flac", None), ("/c/X.wav", None), ("/d/y.wav", None)])
    assert names[("/d/y.wav", None)] == "y"
    colliding = [names[key] for key in [("/a/x.wav", None), ("/b/x.flac", None), ("/c/X.wav", None)]]
    assert len(set(colliding)) == 3 and all(n.lower().startswith("x-") and len(n) == 10 for n in colliding)
    # the same name whatever else is exported with it
    again = recording_names([("/b/x.flac", None), ("/a/x.wav", None)])
    assert again[("/a/x.wav", None)] == names[("/a/x.wav", None)]
    # channels of one file: one recording each, named by channel
    stereo = recording_names([("/call.wav", 0), ("/call.wav", 1), ("/mono.wav", None)])
    assert stereo == {("/call.wav", 0): "call-ch0", ("/call.wav", 1): "call-ch1", ("/mono.wav", None): "mono"}


def test_an_unfinished_output_is_refused_unless_asked_and_then_each_utterance_is_read_once(tmp_path):
    rows = [row("a", "/a/x.wav", "one", [("one", 0.0, 0.2)], line=1),
            row("b", "/a/y.wav", "", status="error", error="m.json, line 2: /a/y.wav: timed out", line=2)]
    output = write_output(tmp_path / "out", rows, complete=False)
    # a retried row in a second part: the ok row of the utterance that failed first
    write_output(tmp_path / "out", [row("b", "/a/y.wav", "two", [("two", 0.0, 0.2)], line=2)], complete=False)
    with pytest.raises(ExportError, match="has no _SUCCESS: its job is running or was stopped.*--incomplete"):
        read_transcripts(output)
    transcripts = read_transcripts(output, incomplete=True)
    assert sorted(u.text for r in transcripts.recordings() for u in r.utterances) == ["one", "two"]
    assert transcripts.errors == []


def test_a_folder_that_is_no_output_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="no loopscribe output at"):
        read_transcripts(str(tmp_path / "empty"), incomplete=True)
