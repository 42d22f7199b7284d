"""10,000 manifest lines, 2,000 of them bad in 20 ways (a FIFO and a lying-header WAV among them), through the
Ray job: 10,000 rows out, each bad line an error row with its cause, no hang, and no row allowed to decode
past the bounds (the lying header would be 1.7 GB of samples per row).
"""

from __future__ import annotations

import time

import pytest

from pipeline import schema
from pipeline.config import InputConfig, ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.io import sink
from tests.support.hostile_corpus import PeakRss, write_hostile_corpus

pytestmark = [pytest.mark.ray, pytest.mark.nemo, pytest.mark.slow]

LINES = 10_000
RSS_LIMIT_BYTES = 6 << 30  # what every process of the job adds together; decoding one lying header alone: 1.7 GB


def test_ten_thousand_hostile_lines_give_ten_thousand_rows(ray_cluster, nemo_assets, tmp_path):
    corpus = write_hostile_corpus(tmp_path / "corpus", LINES, nemo_assets["files"])
    memory = PeakRss()
    try:
        from pipeline.graph import run_transcription

        config = TranscribeJobConfig(
            manifests=(str(corpus.manifest),), output=str(tmp_path / "out"),
            model=ModelConfig(uri=str(nemo_assets["checkpoints"]["rnnt"]), cache_dir=str(tmp_path / "cache")),
            input=InputConfig(read_timeout_s=10.0),
            resources=ResourcesConfig(device="cpu", asr_actors=1, audio_actors=2, writer_actors=1, window_rows=512,
                                      part_rows=1000, batch_audio_s=60.0, torch_threads=1))
        started = time.monotonic()
        summary = run_transcription(config, progress=lambda _: None)
        wall_s = time.monotonic() - started
    finally:
        memory.stop()

    table = sink.read_output(str(tmp_path / "out"), columns=[schema.UTTERANCE_ID, schema.LINE, schema.STATUS,
                                                              schema.ERROR])
    assert table.num_rows == summary["rows"] == LINES, summary
    assert len(set(table.column(schema.UTTERANCE_ID).to_pylist())) == LINES
    assert sorted(table.column(schema.LINE).to_pylist()) == list(range(1, LINES + 1))
    assert summary["rows_error"] == len(corpus.bad) == LINES // 5
    errors = {row[schema.LINE]: row[schema.ERROR] for row in table.to_pylist() if row[schema.STATUS] == "error"}
    assert set(errors) == set(corpus.bad)
    for line, piece in corpus.bad.items():
        assert errors[line].startswith(f"{corpus.manifest}, line {line}: ") and piece in errors[line], errors[line]
    assert memory.added_bytes < RSS_LIMIT_BYTES, f"peak RSS added {memory.added_bytes / 2**30:.1f} GiB"
    print(f"\n{LINES} lines in {wall_s:.0f} s, peak RSS the job's processes added {memory.added_bytes / 2**30:.2f} GiB"
          f" (over {memory.start_bytes / 2**30:.2f} GiB before)")
