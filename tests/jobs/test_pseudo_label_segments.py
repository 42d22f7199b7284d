"""`jobs/pseudo_label.py` on a long recording, into an object store: the recording is cut into segments of at most
`--max-segment-s`, each a training utterance with its offset into the original audio, and the kept ones are written
as NeMo manifests, a NeMo tarred set and a Lhotse Shar (uploaded through the staging folder): the same utterances
in each, lhotse's readers loading the audio of the original file at each segment's offset. (NeMo's readers are run
on the same writer's output in tests/pipeline/labels/test_shards_out.py, where no Ray job needs waiting for.)"""

from __future__ import annotations

import gzip
import json
import tarfile

import numpy as np
import pytest
import soundfile

from pipeline.config import BUNDLED_MODEL, REPOSITORY

pytestmark = [pytest.mark.ray, pytest.mark.nemo, pytest.mark.slow]
SAMPLE_RATE = 16000


def test_a_long_recording_becomes_segments_in_every_format(ray_cluster, s3, tmp_path):
    import s3fs
    from lhotse import CutSet

    from jobs.pseudo_label import main
    from tests.support.s3_server import create_bucket

    pieces = []
    for index in range(6):  # about 23 s: six samples, a second of quiet between them
        samples, rate = soundfile.read(REPOSITORY / "samples" / f"sample{index:02d}.flac", dtype="float32")
        assert rate == SAMPLE_RATE
        pieces += [np.zeros(SAMPLE_RATE, dtype=np.float32), samples]
    recording = np.concatenate([*pieces, np.zeros(SAMPLE_RATE, dtype=np.float32)])
    long_path = tmp_path / "call.flac"
    soundfile.write(long_path, recording, SAMPLE_RATE, subtype="PCM_16")
    recording = soundfile.read(long_path, dtype="float32")[0]
    short_path = REPOSITORY / "samples" / "sample12.flac"
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"audio_filepath": str(long_path), "duration": len(recording) / SAMPLE_RATE})
                        + "\n" + json.dumps({"audio_filepath": str(short_path), "duration": 2.0}) + "\n")
    create_bucket("segments")
    assert main(["--manifest", str(manifest), "--output", "s3://segments/labels", "--model", str(BUNDLED_MODEL),
                 "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--min-confidence", "0",
                 "--max-segment-s", "8", "--output-format", "nemo", "nemo_tarred", "shar",
                 "--shard-utterances", "3"]) == 0

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    (labelled,) = fs.glob("segments/labels/labels-*/runs/*/labelled.txt")
    run = tmp_path / "run"
    fs.get(labelled.rsplit("/", 1)[0] + "/", str(run), recursive=True)
    report = json.loads((run / "report.json").read_text())
    assert report["rows"] == 2 and report["segmented_rows"] == 1
    kept = [json.loads(line) for line in (run / "train.json").read_text().splitlines()]
    segments = [line for line in kept if line["audio_filepath"] == str(long_path)]
    assert len(segments) >= 3 and len(kept) == report["written"] == len(segments) + 1
    assert all(line["duration"] <= 8 for line in segments)
    offsets = [line["offset"] for line in segments]
    assert offsets == sorted(offsets) and all(a["offset"] + a["duration"] <= b["offset"]
                                              for a, b in zip(segments, segments[1:]))
    texts = " ".join(line["text"] for line in segments).split()
    assert len(texts) >= 35  # the six sentences' words (60), not a fragment

    # every format holds the same kept utterances: Lhotse cuts into the original audio, the Shar, the tarred set
    cuts = list(CutSet.from_dicts(json.loads(line) for line in gzip.decompress(
        (run / "train_cuts.jsonl.gz").read_bytes()).decode().splitlines()))
    shar = list(CutSet.from_shar(in_dir=run / "shar"))
    assert [c.id for c in shar] == [c.id for c in cuts] and len(shar) == len(kept)
    tarred = run / "nemo_tarred"
    tars = sorted(str(p) for p in tarred.glob("audio_*.tar"))
    assert len(tars) == -(-len(kept) // 3)
    tarred_lines = [json.loads(line) for line in (tarred / "tarred_audio_manifest.json").read_text().splitlines()]
    assert [line["text"] for line in tarred_lines] == [line["text"] for line in kept]
    members = []
    for tar in tars:
        with tarfile.open(tar) as opened:
            members += opened.getnames()
    assert members == [line["audio_filepath"] for line in tarred_lines]
    by_offset = {round(c.start, 3): c for c in cuts if c.recording.sources[0].source == str(long_path)}
    for cut, shard_cut in zip(cuts, shar):
        assert cut.supervisions[0].text == shard_cut.supervisions[0].text
        direct, from_shard = cut.load_audio()[0], shard_cut.load_audio()[0]
        n = min(len(direct), len(from_shard))
        assert abs(len(direct) - len(from_shard)) <= 1
        np.testing.assert_allclose(from_shard[:n], direct[:n], atol=2 / 32768)
    for line in segments:  # the segment's audio is the original's at its offset
        first = int(round(line["offset"] * SAMPLE_RATE))
        want = recording[first:first + int(round(line["duration"] * SAMPLE_RATE))]
        got = by_offset[round(line["offset"], 3)].load_audio()[0]
        n = min(len(got), len(want))
        np.testing.assert_allclose(got[:n], want[:n], atol=2 / 32768)
