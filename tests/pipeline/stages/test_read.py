"""The manifest stage (`pipeline/stages/read.py::ReadManifests`) and the driver's `--limit` (`graph.first_rows`):
a manifest's first rows only, committed rows counted among them, and a row whose audio lies outside
`--allowed-roots` leaving as an error row naming the rule. Called as plain functions: no Ray."""

from __future__ import annotations

import json
import os

import pyarrow as pa

from pipeline import schema
from pipeline.graph import first_rows
from pipeline.io import IdSet
from pipeline.io.uris import AudioRoots
from pipeline.stages.read import ReadManifests


def manifest(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def rows_of(reader, uris):
    tables = list(reader(pa.table({schema.MANIFEST: uris})))
    return pa.concat_tables(tables).to_pylist() if tables else []


def test_row_limits_read_only_a_manifests_first_rows_committed_ones_counted(tmp_path):
    lines = [{"audio_filepath": f"a{i}.wav", "duration": 1.0} for i in range(10)]
    uri = manifest(tmp_path / "m.json", lines[:3] + [""] + lines[3:])  # a blank line is no row
    everything = rows_of(ReadManifests(IdSet(), chunk_rows=4), [uri])
    assert len(everything) == 10
    first = rows_of(ReadManifests(IdSet(), chunk_rows=4, row_limits={uri: 5}), [uri])
    assert [row[schema.LINE] for row in first] == [1, 2, 3, 5, 6]
    committed = IdSet(row[schema.UTTERANCE_ID] for row in first[:2])
    rest = rows_of(ReadManifests(committed, chunk_rows=4, row_limits={uri: 5}), [uri])
    assert [row[schema.LINE] for row in rest] == [3, 5, 6]


def test_a_row_outside_the_allowed_roots_is_an_error_row_naming_the_rule(tmp_path):
    audio, elsewhere = tmp_path / "audio", tmp_path / "elsewhere"
    audio.mkdir()
    elsewhere.mkdir()
    (elsewhere / "b.wav").write_bytes(b"RIFF")
    os.symlink(elsewhere / "b.wav", audio / "link.wav")
    uri = manifest(audio / "m.json", [{"audio_filepath": "a.wav", "duration": 1.0},
                                      {"audio_filepath": "../elsewhere/b.wav", "duration": 1.0},
                                      {"audio_filepath": "link.wav", "duration": 1.0},
                                      {"audio_filepath": "/etc/hostname", "duration": 1.0},
                                      "not json"])
    rows = rows_of(ReadManifests(IdSet(), chunk_rows=4, allowed_roots=AudioRoots([str(audio)])), [uri])
    assert [row[schema.STATUS] for row in rows] == ["ok", "error", "error", "error", "error"]
    assert rows[1][schema.ERROR] == (f"{uri}, line 2: {elsewhere / 'b.wav'} lies outside --allowed-roots ({audio})")
    link = f"{uri}, line 3: {audio / 'link.wav'} (a link to {elsewhere / 'b.wav'}) lies outside"
    assert rows[2][schema.ERROR].startswith(link)
    assert "--allowed-roots" in rows[3][schema.ERROR]
    assert "malformed JSON" in rows[4][schema.ERROR]  # a line's own error is kept
    unrestricted = rows_of(ReadManifests(IdSet(), chunk_rows=4), [uri])
    assert [row[schema.STATUS] for row in unrestricted][:4] == ["ok"] * 4


def test_first_rows_cut_the_manifests_in_order(tmp_path):
    one = manifest(tmp_path / "one.json", [{"audio_filepath": f"a{i}.wav", "duration": 1.0} for i in range(3)])
    empty = manifest(tmp_path / "empty.json", [])
    two = manifest(tmp_path / "two.json", ["broken", *({"audio_filepath": f"b{i}.wav", "duration": 1.0}
                                                       for i in range(4))])
    three = manifest(tmp_path / "three.json", [{"audio_filepath": "c.wav", "duration": 1.0}])
    uris = [one, empty, two, three]
    every = first_rows(uris, None)
    assert every.manifest_uris == uris and every.row_limits == {} and not every.rows_beyond
    cut = first_rows(uris, 5)  # an unusable line is a row (an error row), as ReadManifests gives it
    assert cut.manifest_uris == [one, empty, two] and cut.row_limits == {one: 3, empty: 0, two: 2}
    assert cut.rows_beyond
    at_end = first_rows(uris, 3)
    assert at_end.manifest_uris == [one] and at_end.row_limits == {one: 3} and at_end.rows_beyond
    whole = first_rows(uris, 9)
    assert whole.manifest_uris == uris and not whole.rows_beyond
    assert first_rows([one, empty], 3).rows_beyond is False  # what follows the limit holds no row
