"""Exactly once, end to end on an in-process Ray, where old versions lost rows with exit 0.

- Lhotse cuts sharing an id: part files were named from the ids, so parts overwrote each other (7 cuts gave 5
  rows with one row per part). Ids are now made from content: every cut comes out, and the shared ids are
  reported.
- An edited manifest: a row was (manifest, line), so a line inserted at the top made the rerun skip the new
  line and transcribe the old last line again. A rerun now transcribes exactly the new line.
- One bad manifest (binary, broken gzip, a non-UTF-8 line) failed the whole job and lost every other
  manifest's rows. Now each bad thing is one error row, and every good line comes out.

Rows in = rows out is checked against the manifests' lines in each case.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from pipeline import schema
from pipeline.config import ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.io import sink

pytestmark = [pytest.mark.ray, pytest.mark.nemo, pytest.mark.slow]

RESOURCES = ResourcesConfig(device="cpu", asr_actors=1, audio_actors=1, writer_actors=1, window_rows=16, part_rows=16,
                            batch_audio_s=40.0, torch_threads=1)


def transcribe(manifests, output, nemo_assets, cache_dir, part_rows=16, retry_errors=False):
    from pipeline.graph import run_transcription

    config = TranscribeJobConfig(
        manifests=tuple(str(m) for m in manifests), output=str(output),
        model=ModelConfig(uri=str(nemo_assets["checkpoints"]["rnnt"]), cache_dir=str(cache_dir)),
        resources=ResourcesConfig(**{**RESOURCES.__dict__, "part_rows": part_rows}), retry_errors=retry_errors)
    return run_transcription(config, progress=lambda _: None)


def write_lines(path, entries):
    path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in entries))
    return path


def cut(cut_id, audio, start):
    return {"id": cut_id, "start": start, "duration": 0.5, "channel": 0,
            "recording": {"id": f"rec-{cut_id}", "sources": [{"type": "file", "channels": [0], "source": str(audio)}],
                          "sampling_rate": 16000, "num_samples": 48000, "duration": 3.0},
            "supervisions": [{"id": f"sup-{cut_id}", "text": "words"}]}


def test_cuts_sharing_an_id_are_all_kept_and_reported(ray_cluster, nemo_assets, tmp_path):
    files = nemo_assets["files"]
    cuts = [cut("a", files[0], 0.0), cut("a", files[0], 0.5), cut("a", files[1], 0.0), cut("b", files[2], 0.0),
            cut("b", files[3], 0.0), cut("c", files[4], 0.0), cut("d", files[5], 0.0)]
    manifest = tmp_path / "cuts.jsonl.gz"
    manifest.write_bytes(gzip.compress("".join(json.dumps(c) + "\n" for c in cuts).encode()))
    summary = transcribe([manifest], tmp_path / "out", nemo_assets, tmp_path / "cache", part_rows=1)
    table = sink.read_output(str(tmp_path / "out"))
    assert table.num_rows == summary["rows"] == summary["rows_ok"] == 7
    assert len(set(table.column(schema.UTTERANCE_ID).to_pylist())) == 7
    assert len(sink.list_parts(str(tmp_path / "out"))) == 7
    assert sorted(table.column(schema.SOURCE_ID).to_pylist()) == ["a", "a", "a", "b", "b", "c", "d"]
    assert summary["ids_given_to_several_utterances"] == 2
    assert summary["ids_given_to_several_examples"] == ["a", "b"]
    assert summary["duplicates_removed"] == 0


def test_an_edited_and_resorted_manifest_resumes_by_content(ray_cluster, nemo_assets, tmp_path):
    files = nemo_assets["files"]
    lines = [{"audio_filepath": str(path), "duration": 1.0, "text": f"line {i}"} for i, path in enumerate(files[:3])]
    manifest = write_lines(tmp_path / "nightly.json", lines + [lines[0]])  # the last line repeats the first
    first = transcribe([manifest], tmp_path / "out", nemo_assets, tmp_path / "cache")
    assert first["rows"] == 3 and first["duplicates_removed"] == 1  # one utterance, listed twice: one row
    before = {r[schema.UTTERANCE_ID]: r for r in sink.read_output(str(tmp_path / "out")).to_pylist()}

    added = {"audio_filepath": str(files[3]), "duration": 1.0, "text": "the new line"}
    write_lines(manifest, [added] + lines[::-1])  # regenerated: a new line at the top, the rest re-sorted
    again = transcribe([manifest], tmp_path / "out", nemo_assets, tmp_path / "cache")
    assert again["this_run"]["rows"] == 1  # only the new utterance is transcribed
    table = sink.read_output(str(tmp_path / "out"))
    assert table.num_rows == again["rows"] == 4
    rows = {r[schema.UTTERANCE_ID]: r for r in table.to_pylist()}
    assert len(rows) == 4 and set(before) < set(rows)
    (new,) = [r for i, r in rows.items() if i not in before]
    assert new[schema.AUDIO_FILEPATH] == str(files[3]) and new[schema.REFERENCE_TEXT] == "the new line"
    assert new[schema.LINE] == 1 and new[schema.STATUS] == schema.STATUS_OK and new[schema.TEXT]
    for utterance_id, row in before.items():  # the committed rows are untouched
        assert rows[utterance_id] == row


def test_one_bad_manifest_costs_only_its_own_rows(ray_cluster, nemo_assets, tmp_path):
    files = nemo_assets["files"]
    line = {"audio_filepath": str(files[0]), "duration": 1.0}
    good = write_lines(tmp_path / "good.json", [{**line, "offset": 0.1 * i} for i in range(3)])
    binary = tmp_path / "binary.json"
    binary.write_bytes(files[1].read_bytes())  # an audio file given as a manifest
    whole = gzip.compress("".join(json.dumps({**line, "offset": 0.31 + 0.001 * i}) + "\n"  # all distinct
                                  for i in range(40)).encode())
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(whole[: len(whole) * 2 // 3])  # a cut download
    mixed = tmp_path / "latin1.json"
    mixed.write_bytes(json.dumps({**line, "offset": 0.5}).encode() + b"\n"
                      + b'{"audio_filepath": "caf\xe9.wav", "duration": 1.0}\n'
                      + "\ufeff".encode() + json.dumps({**line, "offset": 0.7}).encode() + b"\n")
    bom = tmp_path / "bom.json"
    bom.write_bytes("\ufeff".encode() + json.dumps({**line, "offset": 0.9}).encode() + b"\n")
    summary = transcribe([good, binary, broken, mixed, bom], tmp_path / "out", nemo_assets, tmp_path / "cache")

    table = sink.read_output(str(tmp_path / "out")).to_pylist()
    by_manifest = {}
    for row in table:
        by_manifest.setdefault(Path(row[schema.MANIFEST]).name, []).append(row)
    assert [r[schema.STATUS] for r in by_manifest["good.json"]] == ["ok"] * 3
    assert [r[schema.STATUS] for r in by_manifest["bom.json"]] == ["ok"]  # a UTF-8 BOM is not an error
    (binary_row,) = by_manifest["binary.json"]
    assert binary_row[schema.STATUS] == "error" and str(binary) in binary_row[schema.ERROR]
    broken_rows = sorted(by_manifest["broken.jsonl.gz"], key=lambda r: r[schema.LINE])
    complete = [r for r in broken_rows if r[schema.STATUS] == "ok"]
    assert 5 < len(complete) < 40 and [r[schema.LINE] for r in complete] == list(range(1, len(complete) + 1))
    assert [r[schema.STATUS] for r in broken_rows[len(complete):]] == ["error"]  # one row says where it broke
    assert str(broken) in broken_rows[-1][schema.ERROR]
    latin1 = sorted(by_manifest["latin1.json"], key=lambda r: r[schema.LINE])
    assert [r[schema.STATUS] for r in latin1] == ["ok", "error", "ok"]  # a BOM of a concatenated file: skipped
    assert latin1[1][schema.ERROR].startswith(f"{mixed}, line 2: ") and "UTF-8" in latin1[1][schema.ERROR]
    rows_in = 3 + 1 + len(broken_rows) + 3 + 1
    assert len(table) == summary["rows"] == rows_in
    assert len({r[schema.UTTERANCE_ID] for r in table}) == rows_in


def test_error_rows_are_transcribed_again_only_when_asked(ray_cluster, nemo_assets, tmp_path):
    """A file missing when the job ran is an error row; once it is there, a plain rerun leaves the row as it is
    (resume skips committed rows, error rows too), and `--retry-errors` transcribes it again: its ok row
    replaces the error row, and every utterance is still in exactly one row."""
    files = nemo_assets["files"]
    late = tmp_path / "late.wav"
    manifest = write_lines(tmp_path / "m.json", [{"audio_filepath": str(files[0]), "duration": 1.0},
                                                 {"audio_filepath": str(late), "duration": 1.0},
                                                 {"audio_filepath": str(files[1]), "duration": 1.0}])
    output = tmp_path / "out"

    def statuses():
        table = sink.read_output(str(output)).to_pylist()
        assert len({r[schema.UTTERANCE_ID] for r in table}) == len(table) == 3
        return {Path(r[schema.AUDIO_FILEPATH]).name: r[schema.STATUS] for r in table}

    first = transcribe([manifest], output, nemo_assets, tmp_path / "cache")
    assert first["rows_error"] == 1 and statuses()["late.wav"] == schema.STATUS_ERROR
    shutil.copy(files[2], late)
    plain = transcribe([manifest], output, nemo_assets, tmp_path / "cache")
    assert plain["this_run"]["rows"] == 0 and statuses()["late.wav"] == schema.STATUS_ERROR
    retried = transcribe([manifest], output, nemo_assets, tmp_path / "cache", retry_errors=True)
    assert retried["this_run"]["rows"] == 1 and retried["rows_error"] == 0
    assert retried["error_rows_replaced"] == 1 and retried["duplicates_removed"] == 0
    assert set(statuses().values()) == {schema.STATUS_OK}
