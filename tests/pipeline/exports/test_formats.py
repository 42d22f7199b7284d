"""The export formats (`pipeline/exports/formats.py`, `export.py`) read back by real readers: SRT by `srt`, WebVTT
by `webvtt-py` (text with `&`, `<` and `-->` in it too), CTM line by line as NIST's format says, the NeMo manifest
as JSON; the whole export written to a local folder and to S3 (moto)."""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re

import pytest

from pipeline.exports import ExportConfig, export_output
from pipeline.exports.cues import Cue, TimedWord
from pipeline.exports.formats import ctm_lines, nemo_line, srt_text, vtt_text
from pipeline.exports.transcripts import Recording, Utterance
from tests.pipeline.exports.test_transcripts import row, write_output

CTM_LINE = re.compile(r"^(\S+) (\S+) (\d+\.\d{3}) (\d+\.\d{3}) (\S+)( (0(\.\d+)?|1(\.0+)?))?$")
CUES = [Cue(0.0004, 1.2, ("call luis phillips",)), Cue(61.25, 63.0, ("fish & chips <b> -->", "second line")),
        Cue(3725.5, 3727.0, ("an hour in",))]


def utterance(text: str, words: list[TimedWord], **changes) -> Utterance:
    values = dict(manifest="m.json", line=1, source_id=None, audio_filepath="/a/x.wav", offset_s=0.0, duration_s=2.0,
                  audio_duration_s=2.0, channel=None, reference_text="", extra={}, text=text, words=tuple(words),
                  confidence=None)
    return Utterance(**{**values, **changes})


def test_srt_reads_back_with_the_srt_library():
    import srt

    parsed = list(srt.parse(srt_text(CUES)))
    assert [(s.index, s.start.total_seconds(), s.end.total_seconds(), s.content) for s in parsed] == [
        (1, 0.0, 1.2, "call luis phillips"), (2, 61.25, 63.0, "fish & chips <b> -->\nsecond line"),
        (3, 3725.5, 3727.0, "an hour in")]


def test_webvtt_reads_back_with_webvtt_py_and_its_text_is_escaped():
    import webvtt

    text = vtt_text(CUES)
    assert text.startswith("WEBVTT\n") and "-->" not in text.split("\n\n")[2].split("\n", 1)[1]
    captions = webvtt.from_buffer(io.StringIO(text)).captions
    assert [(c.start_in_seconds, c.end_in_seconds, html.unescape(c.raw_text)) for c in captions] == [
        (0, 1, "call luis phillips"), (61, 63, "fish & chips <b> -->\nsecond line"), (3725, 3727, "an hour in")]
    assert [c.start for c in captions] == ["00:00:00.000", "00:01:01.250", "01:02:05.500"]
    assert vtt_text([]) == "WEBVTT\n"


def test_ctm_lines_follow_nists_format_sorted_with_the_recording_and_channel():
    words = [TimedWord("world", 10.5, 10.9, 0.25), TimedWord("hello", 10.0, 10.4, 1.2)]
    recording = Recording("call-ch1", "/a/call.wav", 1, (utterance("hello world", words, channel=1),))
    lines = ctm_lines(recording).splitlines()
    assert lines == ["call-ch1 2 10.000 0.400 hello 1.0000", "call-ch1 2 10.500 0.400 world 0.2500"]
    assert all(CTM_LINE.match(line) for line in lines)
    mono = Recording("x", "/a/x.wav", None, (utterance("hi", [TimedWord("hi", 0.0, 0.3)]),))
    assert ctm_lines(mono) == "x 1 0.000 0.300 hi\n"  # no confidence recorded: none written


def test_a_nemo_line_keeps_the_manifests_keys_and_adds_pred_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = json.loads(nemo_line(utterance("the ice", [], audio_filepath="audio/x.wav", offset_s=1.5, duration_s=3.0,
                                          reference_text="the roof", source_id="utt7",
                                          extra={"speaker": "a", "lang": "en"})))
    assert line == {"audio_filepath": os.path.join(str(tmp_path), "audio", "x.wav"), "duration": 3.0, "offset": 1.5,
                    "text": "the roof", "id": "utt7", "speaker": "a", "lang": "en", "pred_text": "the ice"}
    plain = json.loads(nemo_line(utterance("", [], audio_filepath="s3://b/x.wav")))
    assert plain == {"audio_filepath": "s3://b/x.wav", "duration": 2.0, "pred_text": ""}


def sample_output(path) -> str:
    return write_output(path, [
        row("a", "/a/talk.wav", "call luis", [("call", 0.1, 0.4), ("luis", 0.5, 0.9)], offset=0.0, line=1,
            reference="call luis", extra='{"speaker": "s1"}'),
        row("b", "/a/talk.wav", "and anna", [("and", 0.0, 0.2), ("anna", 0.3, 0.7)], offset=5.0, line=2),
        row("c", "/b/talk.wav", "", [], line=3),  # silence, and a stem shared with /a/talk.wav
        row("d", "/a/gone.wav", "", status="error", error="m.json, line 4: /a/gone.wav: file not found", line=4),
    ])


def test_an_export_writes_every_format_and_lists_the_error_rows(tmp_path):
    import srt

    output = sample_output(tmp_path / "out")
    report = export_output(output, ExportConfig(formats=("srt", "vtt", "txt", "nemo", "ctm")))
    exports = tmp_path / "out" / "_exports"
    assert report.to == str(exports) and report.recordings == 2 and report.rows_ok == 3 and len(report.errors) == 1
    names = sorted(p.stem for p in (exports / "srt").iterdir())
    assert len(names) == 2 and all(name.startswith("talk-") for name in names)  # a stem two files share
    subtitles = {name: list(srt.parse((exports / "srt" / f"{name}.srt").read_text())) for name in names}
    spoken = [cues for cues in subtitles.values() if cues]
    assert len(spoken) == 1 and [(c.start.total_seconds(), c.content) for c in spoken[0]] == [
        (0.1, "call luis"), (5.0, "and anna")]  # the second segment at its offset
    assert sorted((exports / "txt" / f"{name}.txt").read_text() for name in names) == ["", "call luis\nand anna\n"]
    lines = [json.loads(line) for line in (exports / "nemo" / "transcripts.json").read_text().splitlines()]
    assert [(line["pred_text"], line.get("offset")) for line in lines] == [("call luis", None), ("and anna", 5.0),
                                                                          ("", None)]
    assert lines[0]["speaker"] == "s1" and lines[0]["text"] == "call luis"
    ctm = (exports / "ctm" / "transcripts.ctm").read_text().splitlines()
    assert [line.split()[2:5] for line in ctm] == [["0.100", "0.300", "call"], ["0.500", "0.400", "luis"],
                                                   ["5.000", "0.200", "and"], ["5.300", "0.400", "anna"]]
    with open(exports / "_errors.tsv", newline="") as handle:
        errors = list(csv.DictReader(handle, dialect=csv.excel_tab))
    assert [(e["line"], e["audio_filepath"], e["error"]) for e in errors] == [
        ("4", "/a/gone.wav", "m.json, line 4: /a/gone.wav: file not found")]
    assert not any("gone" in p.name for p in exports.rglob("*") if p.is_file() and p.name != "_errors.tsv")


def test_an_export_to_s3_writes_the_same_files(tmp_path):
    pytest.importorskip("moto")
    import fsspec

    from tests.support.s3_server import moto_s3

    output = sample_output(tmp_path / "out")
    with moto_s3("exports"):
        report = export_output(output, ExportConfig(formats=("vtt", "ctm"), to="s3://exports/run1"))
        filesystem = fsspec.filesystem("s3")
        files = sorted(filesystem.find("exports/run1"))
        ctm = filesystem.cat_file("exports/run1/ctm/transcripts.ctm").decode()
    local = export_output(output, ExportConfig(formats=("vtt", "ctm"), to=str(tmp_path / "local")))
    assert report.to == "s3://exports/run1" and report.recordings == local.recordings == 2
    assert [f.split("run1/", 1)[1] for f in files] == sorted(
        str(p.relative_to(tmp_path / "local")) for p in (tmp_path / "local").rglob("*") if p.is_file())
    assert ctm == (tmp_path / "local" / "ctm" / "transcripts.ctm").read_text()


def test_the_export_settings_are_checked():
    with pytest.raises(ValueError, match="give at least one format"):
        ExportConfig()
    with pytest.raises(ValueError, match="unknown export format 'docx'"):
        ExportConfig(formats=("srt", "docx"))
    assert ExportConfig(formats="srt").formats == ("srt",)
    assert ExportConfig(formats=("srt", "vtt", "srt")).formats == ("srt", "vtt")
    with pytest.raises(ValueError, match="cues.max_lines must be an integer >= 1"):
        from pipeline.exports import CueRules

        CueRules(max_lines=0)
