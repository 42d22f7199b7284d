"""Sharded corpora end to end on the session's in-process Ray, with the bundled model and its 20 samples.

One job reads the samples as a NeMo tarred set (3 shards), a Lhotse Shar (2 shards, written by lhotse's SharWriter)
and WebDataset tars (2), all in the session's moto S3 bucket, into an output where a job killed mid-shard committed
some rows of two shards already. It must transcribe exactly the other rows, end with every row once, and give each
the transcript of its loose file decoded in-process (the NeMo set's rows the manifest's durations, Shar and WebDataset
rows whole files). One Ray run: each costs a fresh ASR actor importing NeMo (tens of seconds on a busy 2-core
machine); the committed rows' skipping per shard is tested without Ray in tests/pipeline/io/test_shards.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import schema
from pipeline.config import ModelConfig, ResourcesConfig, TranscribeJobConfig
from pipeline.io import sink
from tests.support.shard_corpora import write_nemo_tarred, write_shar, write_webdataset

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPOSITORY = Path(__file__).resolve().parents[2]
SAMPLES = REPOSITORY / "samples"
BUCKET = "shards"
RESOURCES = ResourcesConfig(device="cpu", asr_actors=1, audio_actors=1, writer_actors=1, window_rows=16, part_rows=4,
                            batch_audio_s=40.0, torch_threads=1)


def config_for(manifests, output, cache_dir) -> TranscribeJobConfig:
    return TranscribeJobConfig(manifests=tuple(map(str, manifests)), output=str(output), resources=RESOURCES,
                               model=ModelConfig(cache_dir=str(cache_dir)))


def texts(output) -> dict[tuple[str, str | None], str]:
    table = sink.read_output(str(output), columns=[schema.UTTERANCE_ID, schema.AUDIO_FILEPATH, schema.SHARD_MEMBER,
                                                   schema.STATUS, schema.TEXT, schema.ERROR])
    rows = table.to_pylist()
    assert len({row[schema.UTTERANCE_ID] for row in rows}) == len(rows)  # every row once
    assert all(row[schema.STATUS] == schema.STATUS_OK for row in rows), [row[schema.ERROR] for row in rows]
    return {(row[schema.AUDIO_FILEPATH], row[schema.SHARD_MEMBER]): row[schema.TEXT] for row in rows}


@pytest.fixture(scope="module")
def reference():
    """Each sample's transcript decoded in-process, one utterance at a time: of its manifest duration (NeMo set) and
    of the whole file (Shar, WebDataset)."""
    from pipeline.config import BUNDLED_MODEL
    from pipeline.decoding.recognize import recognize
    from pipeline.io.audio import load_audio
    from pipeline.model.nemo import load_asr_model

    model = load_asr_model(str(BUNDLED_MODEL))
    lines = [json.loads(line) for line in (SAMPLES / "manifest.json").read_text().splitlines()]
    texts = {}
    for line in lines:
        path = str(SAMPLES / line["audio_filepath"])
        for kind, duration in (("listed", line["duration"]), ("whole", None)):
            waveform = load_audio(path, 16000, 0.0, duration).samples
            texts[(line["audio_filepath"], kind)] = recognize(model, [waveform])[0].text
    return lines, texts


def test_sharded_corpora_transcribe_as_their_loose_files_and_resume(ray_cluster, s3, tmp_path, reference):
    import s3fs

    from pipeline.graph import run_transcription
    from pipeline.io.shards import sharded_corpus
    from pipeline.stages.read import ReadShards
    from tests.support.s3_server import create_bucket

    lines, expected = reference
    corpus = tmp_path / "corpus"
    write_nemo_tarred(lines, SAMPLES, corpus / "tarred", num_shards=3)
    write_shar([SAMPLES / line["audio_filepath"] for line in lines[:8]], [line["text"] for line in lines[:8]],
               corpus / "shar", shard_size=4)
    for shard in range(2):
        write_webdataset([(f"u{i}", SAMPLES / lines[i]["audio_filepath"], lines[i]["text"])
                          for i in range(8 + 6 * shard, 14 + 6 * shard)], corpus / "wds" / f"part-{shard}.tar")
    create_bucket(BUCKET)
    s3fs.S3FileSystem(skip_instance_cache=True).put(str(corpus) + "/", f"{BUCKET}/corpus/", recursive=True)
    root = f"s3://{BUCKET}/corpus"
    manifests = [f"{root}/tarred", f"{root}/shar", f"{root}/wds/part-{{0..1}}.tar"]

    # what a job killed mid-shard leaves: a part committed for some rows of the NeMo set's second shard and of the
    # first Shar shard (their ids as the reader makes them; a text no decoding gives, so a rerun of them shows)
    listed = [row for listing in sharded_corpus(manifests) if listing.listing
              for task in ReadShards(sink.IdSet()).tasks(listing) for row in task.column("shard_rows")[0].as_py()]
    done = [row for row in listed if row[schema.AUDIO_FILEPATH].endswith(("audio_1.tar", "recording.000000.tar"))][::2]
    assert len(done) == 5
    output = tmp_path / "out"
    output.mkdir()
    sink.write_part(str(output), sink.to_output_table({
        **{name: [row[name] for row in done] for name in schema.INPUT_COLUMNS if name != schema.PHRASES},
        schema.TEXT: ["committed before"] * len(done)}))

    summary = run_transcription(config_for(manifests, output, tmp_path / "cache"), progress=lambda _: None)
    assert summary["this_run"]["rows"] == 40 - len(done) and summary["rows"] == 40
    assert summary["duplicates_removed"] == 0
    got = texts(output)
    assert len(got) == 40
    for (tar, member), text in got.items():
        assert tar.startswith(root) and tar.endswith(".tar")
        kind = tar.split("/")[-2]
        if (tar, member) in {(row[schema.AUDIO_FILEPATH], row[schema.SHARD_MEMBER]) for row in done}:
            assert text == "committed before"
        elif kind == "tarred":  # audio_N.tar member <flattened path>_sampleNN.flac: the manifest's durations
            assert text == expected[("sample" + member.rsplit("_sample", 1)[-1], "listed")], member
        elif kind == "shar":  # member: the cut id
            assert text == expected[(f"{member}.flac", "whole")], member
        else:  # uNN.flac
            assert text == expected[(lines[int(member.split(".")[0][1:])]["audio_filepath"], "whole")], member
