"""`benchmarks/scale.py` at toy sizes (its jobs take minutes, so CI runs the parts that cost seconds): the corpus it
writes has one distinct utterance per row, spread over manifests as shards are, and its readers comparison writes
outputs through the commit protocol and reads every row back."""

from __future__ import annotations

import glob
import json

from benchmarks.scale import main, parse_args, write_manifests
from pipeline import schema
from pipeline.io import read_manifest


def test_quick_runs_two_sizes_with_twenty_thousand_rows():
    assert parse_args(["--quick"]).rows == [2_000, 20_000]
    assert parse_args([]).rows == [20_000, 1_000_000]


def test_the_corpus_is_one_distinct_utterance_per_row_in_shard_sized_manifests(tmp_path):
    audio = [tmp_path / f"a{i}.wav" for i in range(3)]
    pattern = write_manifests(tmp_path / "manifests", 250, 100, audio, with_text=True)
    manifests = sorted(glob.glob(pattern))
    assert len(manifests) == 3
    rows = [row for manifest in manifests for row in read_manifest(manifest)]
    assert len(rows) == 250
    assert len({row[schema.UTTERANCE_ID] for row in rows}) == 250  # the rerun skips by these: none may collide
    assert {row[schema.AUDIO_FILEPATH] for row in rows} == {str(path) for path in audio}
    assert all(row[schema.REFERENCE_TEXT] for row in rows)


def test_the_readers_comparison_reads_every_row_back(tmp_path, capsys):
    figures = main(["--readers", "3000", "--readers-part-rows", "256", "1024", "--work", str(tmp_path)])
    by_size = {f["part_rows"]: f for f in figures["readers"]}
    assert by_size[256]["parts"] == 12 and by_size[1024]["parts"] == 3  # ceil(3000 / part rows)
    assert all(f["rows_read"] == f["distinct_ids"] == 3000 for f in by_size.values())
    assert all(f[name] > 0 for f in by_size.values() for name in ("pyarrow_read_s", "resume_scan_s", "dedupe_s"))
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == figures
