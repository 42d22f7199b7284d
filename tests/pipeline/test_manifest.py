from __future__ import annotations

import gzip
import json

import pytest

from pipeline import schema
from pipeline.manifest import expand_manifest_uris, read_manifest


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_nemo_rows_resolve_relative_audio_and_keep_extra_keys(tmp_path):
    uri = write_lines(tmp_path / "m.json", [
        json.dumps({"audio_filepath": "a/1.wav", "duration": 2.5, "text": "hello", "speaker": 7}),
        json.dumps({"audio_filepath": "/abs/2.flac", "duration": 1, "offset": 0.5}),
        json.dumps({"audio_filepath": "s3://bucket/3.wav", "duration": 3.0}),
    ])
    rows = list(read_manifest(uri))
    assert [r[schema.AUDIO_FILEPATH] for r in rows] == [f"{tmp_path}/a/1.wav", "/abs/2.flac", "s3://bucket/3.wav"]
    assert rows[0][schema.REFERENCE_TEXT] == "hello" and json.loads(rows[0][schema.EXTRA]) == {"speaker": 7}
    assert rows[1][schema.OFFSET] == 0.5 and rows[1][schema.DURATION] == 1.0
    assert all(r[schema.STATUS] == schema.STATUS_OK for r in rows)
    assert [r[schema.LINE] for r in rows] == [1, 2, 3]
    assert len({r[schema.UTTERANCE_ID] for r in rows}) == 3
    # stable across reruns
    assert [r[schema.UTTERANCE_ID] for r in read_manifest(uri)] == [r[schema.UTTERANCE_ID] for r in rows]


@pytest.mark.parametrize("line, message", [
    ('{"audio_filepath": "x.wav", "duration": 1', "malformed JSON"),
    ('{"duration": 1.0}', "missing key 'audio_filepath'"),
    ('{"audio_filepath": "x.wav"}', "missing key 'duration'"),
    ('{"audio_filepath": "x.wav", "duration": -2}', "must not be negative"),
    ('{"audio_filepath": "x.wav", "duration": "long"}', "number of seconds"),
    ('{"audio_filepath": "x.wav", "duration": 1, "offset": -1}', "'offset' must not be negative"),
    ('{"audio_filepath": 5, "duration": 1}', "non-empty string"),
    ('[1, 2]', "expected a JSON object"),
    ('{"id": "c1", "duration": 1, "recording": {"sources": [{"type": "memory"}]}}', "no file or url audio source"),
])
def test_bad_lines_become_error_rows_naming_file_and_line(tmp_path, line, message):
    uri = write_lines(tmp_path / "bad.json", [json.dumps({"audio_filepath": "ok.wav", "duration": 1.0}), line])
    rows = list(read_manifest(uri))
    assert len(rows) == 2 and rows[0][schema.STATUS] == schema.STATUS_OK
    assert rows[1][schema.STATUS] == schema.STATUS_ERROR
    assert message in rows[1][schema.ERROR]
    assert rows[1][schema.ERROR].startswith(f"{uri}, line 2:")
    assert rows[1][schema.UTTERANCE_ID]


def test_lhotse_cuts_gzip(tmp_path):
    cut = {
        "id": "cut-1", "start": 1.5, "duration": 2.0, "channel": 0, "type": "MonoCut",
        "supervisions": [{"id": "s1", "text": "good"}, {"id": "s2", "text": "morning"}],
        "recording": {"id": "r1", "sampling_rate": 16000, "num_samples": 160000, "duration": 10.0,
                      "sources": [{"type": "file", "channels": [0], "source": "audio/r1.wav"}]},
    }
    path = tmp_path / "cuts.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(json.dumps(cut) + "\n")
    (row,) = read_manifest(str(path))
    assert row[schema.UTTERANCE_ID] == "cut-1"
    assert row[schema.AUDIO_FILEPATH] == f"{tmp_path}/audio/r1.wav"
    assert (row[schema.OFFSET], row[schema.DURATION]) == (1.5, 2.0)
    assert row[schema.REFERENCE_TEXT] == "good morning"
    assert json.loads(row[schema.EXTRA]) == {"channel": 0, "type": "MonoCut"}


def test_globs_expand_in_order_and_missing_is_an_error(tmp_path):
    for name in ("b.json", "a.json"):
        write_lines(tmp_path / name, [json.dumps({"audio_filepath": "x.wav", "duration": 1})])
    assert expand_manifest_uris([str(tmp_path / "*.json")]) == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert expand_manifest_uris([str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == [str(tmp_path / "a.json")]
    with pytest.raises(FileNotFoundError, match="no manifest matches"):
        expand_manifest_uris([str(tmp_path / "nope*.json")])
