"""The audio stage's two lengths (`pipeline/stages/audio.py::LoadAudio`): `audio_duration`, what was decoded, and
`file_duration`, the whole file's. A manifest `duration` shorter than the file used to leave no trace: the row
recorded only the 0.24 s it decoded of a 2.4 s file."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
import soundfile

from pipeline import schema
from pipeline.io.manifest import read_manifest
from pipeline.stages.audio import LoadAudio

RATE = 16000


def test_each_row_records_what_was_decoded_and_the_files_length(tmp_path):
    samples = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(2.4 * RATE)) / RATE)).astype(np.float32)
    soundfile.write(tmp_path / "a.wav", samples, RATE)
    lines = [{"audio_filepath": "a.wav", "duration": 0.24, "text": "six words of the reference here"},
             {"audio_filepath": "a.wav", "duration": 2.4, "offset": 0.0, "id": "whole"},
             {"audio_filepath": "a.wav", "duration": 5.0, "id": "longer"},
             {"audio_filepath": "missing.wav", "duration": 1.0}]
    (tmp_path / "m.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    table = pa.Table.from_pylist(list(read_manifest(str(tmp_path / "m.json"))), schema=schema.INPUT_SCHEMA)
    loaded = LoadAudio(RATE)(table)
    assert loaded.column(schema.STATUS).to_pylist() == ["ok", "ok", "ok", "error"]
    assert loaded.column(schema.AUDIO_DURATION).to_pylist()[:3] == pytest.approx([0.24, 2.4, 2.4])
    assert loaded.column(schema.FILE_DURATION).to_pylist()[:3] == pytest.approx([2.4, 2.4, 2.4])
    assert loaded.column(schema.FILE_DURATION)[3].as_py() is None
    assert len(loaded.column(schema.SAMPLES)[0].values) == round(0.24 * RATE)  # decoded as the manifest says
