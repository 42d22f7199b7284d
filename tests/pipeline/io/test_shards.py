"""Sharded corpora read without Ray (`pipeline/io/shards.py`, `ReadShards`, `LoadShards`): a NeMo tarred set in the
layout NeMo's conversion writes (and NeMo's own tarred dataset reads it), a Shar written by lhotse's SharWriter (and
`CutSet.from_shar` reads it), WebDataset tars, locally and in moto S3; every row once with the audio of the loose
file it came from; the broken cases as error rows; committed rows skipped and their shards never opened."""

from __future__ import annotations

import json
import logging
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline import schema
from pipeline.io import IdSet, read_manifest
from pipeline.io.shards import ShardsError, expand_braces, sharded_corpus
from pipeline.stages.audio import LoadAudio
from pipeline.stages.read import ReadShards
from pipeline.stages.shards import LoadShards
from tests.support.shard_corpora import add_member, write_nemo_tarred, write_shar, write_webdataset

SAMPLES = Path(__file__).resolve().parents[3] / "samples"
RATE = 16000


@pytest.fixture(scope="module")
def loose():
    """The bundled samples' manifest lines and each whole file's samples as the loose-file audio stage decodes them."""
    lines = [json.loads(line) for line in (SAMPLES / "manifest.json").read_text().splitlines()]
    table = pa.Table.from_pylist(list(read_manifest(str(SAMPLES / "manifest.json"))), schema=schema.INPUT_SCHEMA)
    table = table.set_column(table.schema.get_field_index(schema.DURATION), schema.DURATION,
                             pa.array([0.0] * table.num_rows))  # whole files
    out = LoadAudio(RATE)(table)
    audio = {Path(uri).name: np.asarray(samples, np.float32) for uri, samples in
             zip(out.column(schema.AUDIO_FILEPATH).to_pylist(), out.column(schema.SAMPLES).to_pylist())}
    return lines, audio


def read_all(listings, committed: IdSet | None = None) -> list[dict]:
    committed = committed or IdSet()
    reader, loader = ReadShards(committed), LoadShards(RATE, committed=committed)
    rows = []
    for listing in listings:
        for task in reader.tasks(listing):
            for table in loader(task):
                assert table.num_rows <= LoadShards.BATCH_ROWS
                rows += table.to_pylist()
    return rows


def test_both_brace_syntaxes_expand_alike():
    assert expand_braces("s3://b/audio_{0..2}.tar") == expand_braces("s3://b/audio__OP_0..2_CL_.tar") == [
        "s3://b/audio_0.tar", "s3://b/audio_1.tar", "s3://b/audio_2.tar"]


@pytest.fixture
def nemo_set(tmp_path, loose):
    lines, _ = loose
    entries = [lines[0], dict(lines[0], offset=0.5, duration=1.0), *lines[1:]]  # a repeat of one file: -sub1
    write_nemo_tarred(entries, SAMPLES, tmp_path / "tarred", num_shards=3)
    return tmp_path / "tarred", entries


@pytest.mark.parametrize("named_by", ["folder", "metadata", "manifest_and_tarred_audio"])
def test_a_nemo_tarred_set_reads_every_line_once_with_its_files_audio(nemo_set, loose, named_by):
    folder, entries = nemo_set
    _, audio = loose
    if named_by == "folder":
        listings = sharded_corpus([str(folder)])
        assert len(listings) == 3 and all("sharded_manifests" in listing.listing for listing in listings)
    elif named_by == "metadata":
        listings = sharded_corpus([str(folder / "metadata.yaml")])
    else:
        (folder / "sharded_manifests").rename(folder / "elsewhere")  # the whole manifest, grouped by shard
        listings = sharded_corpus([str(folder / "tarred_audio_manifest.json")], [f"{folder}/audio__OP_0..2_CL_.tar"])
        assert len(listings) == 1
    rows = read_all(listings)
    assert len(rows) == len(entries) == len({row[schema.UTTERANCE_ID] for row in rows})
    assert all(row[schema.STATUS] == schema.STATUS_OK for row in rows), [row[schema.ERROR] for row in rows]
    assert sum(row[schema.SHARD_MEMBER].endswith("_sample00.flac") for row in rows) == 2  # the -sub1 line's member
    for row in rows:
        assert row[schema.AUDIO_FILEPATH].startswith(str(folder / "audio_")) and row[schema.MANIFEST].endswith(".json")
        original = "sample" + row[schema.SHARD_MEMBER].split("_sample")[-1]
        start = round(row[schema.OFFSET] * RATE)  # the -sub1 line: the same member, its own offset and duration
        expected = audio[original][start: start + round(row[schema.DURATION] * RATE)]
        np.testing.assert_array_equal(np.asarray(row[schema.SAMPLES], np.float32), expected)
        assert json.loads(row[schema.EXTRA])["shard_id"] in (0, 1, 2)
    # ids are stable: read again, the same
    assert {r[schema.UTTERANCE_ID] for r in read_all(listings)} == {r[schema.UTTERANCE_ID] for r in rows}


@pytest.mark.nemo
def test_the_nemo_fixture_reads_back_with_nemos_own_tarred_dataset(nemo_set):
    from nemo.collections.asr.data.audio_to_text import TarredAudioToCharDataset

    _, entries = nemo_set
    entries = entries[:1] + entries[2:]  # without the -sub repeat, which NeMo's dataset reads its own way
    folder = nemo_set[0].parent / "plain"
    write_nemo_tarred(entries, SAMPLES, folder, num_shards=3)
    dataset = TarredAudioToCharDataset(
        audio_tar_filepaths=f"{folder}/audio__OP_0..2_CL_.tar",
        manifest_filepath=str(folder / "tarred_audio_manifest.json"),
        labels=list(" abcdefghijklmnopqrstuvwxyz'"), sample_rate=RATE, shuffle_n=0)
    lengths = sorted(int(item[1]) for item in dataset)  # NeMo decodes each line's duration of its member
    # (or the member to its end, where the manifest's duration is a few samples longer than the file)
    np.testing.assert_allclose(lengths, sorted(round(entry["duration"] * RATE) for entry in entries), atol=8)


def test_a_shar_written_by_lhotse_reads_as_from_shar_does(tmp_path, loose):
    from lhotse import CutSet

    lines, audio = loose
    files = [SAMPLES / line["audio_filepath"] for line in lines[:7]]
    ids = write_shar(files, [line["text"] for line in lines[:7]], tmp_path / "shar", shard_size=3)
    assert [cut.id for cut in CutSet.from_shar(in_dir=str(tmp_path / "shar"))] == ids
    rows = read_all(sharded_corpus([str(tmp_path / "shar")]))
    assert sorted(row[schema.SOURCE_ID] for row in rows) == sorted(ids)
    for row in rows:
        assert row[schema.STATUS] == schema.STATUS_OK, row[schema.ERROR]
        assert row[schema.AUDIO_FILEPATH].endswith(".tar") and row[schema.SHARD_MEMBER] == row[schema.SOURCE_ID]
        assert row[schema.REFERENCE_TEXT] == lines[int(row[schema.SOURCE_ID][-2:])]["text"]
        np.testing.assert_array_equal(np.asarray(row[schema.SAMPLES], np.float32),
                                      audio[f"{row[schema.SOURCE_ID]}.flac"])
    # the cuts files named directly (a store that cannot be listed): the same rows
    named = read_all(sharded_corpus([f"{tmp_path}/shar/cuts.{{000000..000002}}.jsonl.gz"]))
    assert {r[schema.UTTERANCE_ID] for r in named} == {r[schema.UTTERANCE_ID] for r in rows}


def test_webdataset_every_audio_member_is_a_row_with_its_json_or_txt(tmp_path, loose):
    lines, audio = loose
    samples = [(f"utt{i}", SAMPLES / lines[i]["audio_filepath"],
                {"text": lines[i]["text"], "speaker": i} if i % 2 else lines[i]["text"]) for i in range(5)]
    write_webdataset(samples[:3], tmp_path / "wds" / "shard-000.tar")
    write_webdataset(samples[3:], tmp_path / "wds" / "shard-001.tar")
    rows = read_all(sharded_corpus([f"{tmp_path}/wds/shard-{{000..001}}.tar"]))
    assert sorted(row[schema.SHARD_MEMBER] for row in rows) == [f"utt{i}.flac" for i in range(5)]
    for row in rows:
        i = int(row[schema.SOURCE_ID][3:])
        assert row[schema.STATUS] == schema.STATUS_OK and row[schema.REFERENCE_TEXT] == lines[i]["text"]
        np.testing.assert_array_equal(np.asarray(row[schema.SAMPLES], np.float32), audio[lines[i]["audio_filepath"]])
        assert row[schema.AUDIO_DURATION] == pytest.approx(len(audio[lines[i]["audio_filepath"]]) / RATE)
    assert json.loads([r for r in rows if r[schema.SOURCE_ID] == "utt1"][0][schema.EXTRA]) == {"speaker": 1}
    # committed members are skipped (a WebDataset tar is read again: nothing lists its rows elsewhere)
    listings = sharded_corpus([f"{tmp_path}/wds/shard-{{000..001}}.tar"])
    ids = [row[schema.UTTERANCE_ID] for row in rows]
    assert [row[schema.UTTERANCE_ID] for row in read_all(listings, IdSet(ids[:4]))] == ids[4:]


def test_broken_shards_give_error_rows_naming_shard_and_member(tmp_path, loose, caplog):
    lines, _ = loose
    folder = tmp_path / "tarred"
    write_nemo_tarred(lines[:12], SAMPLES, folder, num_shards=3)
    manifest = folder / "tarred_audio_manifest.json"
    entries = [json.loads(line) for line in manifest.read_text().splitlines()]
    entries.append(dict(entries[0], audio_filepath="not_there.flac"))  # a listed member missing from its shard
    entries.append(dict(entries[1], shard_id=9))  # a shard that does not exist
    manifest.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    shutil.rmtree(folder / "sharded_manifests")
    # shard 1: cut inside its third member; shard 2: a corrupt member and a member nobody lists
    data = (folder / "audio_1.tar").read_bytes()
    with tarfile.open(folder / "audio_1.tar") as tar:
        third = tar.getmembers()[2]
    (folder / "audio_1.tar").write_bytes(data[: third.offset_data + 100])
    with tarfile.open(folder / "audio_2.tar", "a") as tar:
        add_member(tar, "extra.flac", b"fLaC not really")
    corrupt = entries[8]["audio_filepath"]
    names = [m.name for m in tarfile.open(folder / "audio_2.tar").getmembers()]
    rebuilt = {name: tarfile.open(folder / "audio_2.tar").extractfile(name).read() for name in names}
    rebuilt[corrupt] = rebuilt[corrupt][:60]
    with tarfile.open(folder / "audio_2.tar", "w") as tar:
        for name in names:
            add_member(tar, name, rebuilt[name])
    with caplog.at_level(logging.WARNING):
        rows = read_all(sharded_corpus([str(folder)]))
    assert len(rows) == len(entries) == len({row[schema.UTTERANCE_ID] for row in rows})
    errors = {row[schema.SHARD_MEMBER] or row[schema.LINE]: row[schema.ERROR] for row in rows
              if row[schema.STATUS] == schema.STATUS_ERROR}
    assert "not_there.flac is not in the shard" in errors["not_there.flac"]
    assert "shard_id 9: no such shard" in errors[len(entries)]
    cut_after = entries[5]["audio_filepath"]
    for entry in entries[6:8]:  # the cut member and the one after it
        assert f"shard truncated or corrupt after member {cut_after}" in errors[entry["audio_filepath"]]
    assert corrupt in errors[corrupt] and "audio_2.tar member" in errors[corrupt]
    assert len(errors) == 5, errors
    assert any("1 member(s) no line lists" in record.getMessage() for record in caplog.records)


def test_committed_rows_are_skipped_and_their_shards_never_opened(tmp_path, loose):
    lines, _ = loose
    folder = tmp_path / "tarred"
    write_nemo_tarred(lines[:9], SAMPLES, folder, num_shards=3)
    listings = sharded_corpus([str(folder)])
    first = read_all(listings)
    shard0 = [row for row in first if row[schema.AUDIO_FILEPATH].endswith("audio_0.tar")]
    partly = [row for row in first if row[schema.AUDIO_FILEPATH].endswith("audio_1.tar")][:1]
    committed = IdSet(row[schema.UTTERANCE_ID] for row in shard0 + partly)
    (folder / "audio_0.tar").unlink()  # opened, it would give error rows
    again = read_all(listings, committed)
    assert {row[schema.UTTERANCE_ID] for row in again} == {row[schema.UTTERANCE_ID] for row in first} - {
        row[schema.UTTERANCE_ID] for row in shard0 + partly}
    assert all(row[schema.STATUS] == schema.STATUS_OK for row in again)
    assert not list(ReadShards(IdSet(row[schema.UTTERANCE_ID] for row in first)).tasks(listings[1]))


def test_a_truncated_webdataset_tar_gives_one_error_row_for_what_was_not_read(tmp_path, loose):
    lines, _ = loose
    write_webdataset([(f"u{i}", SAMPLES / lines[i]["audio_filepath"], None) for i in range(3)], tmp_path / "w.tar")
    data = (tmp_path / "w.tar").read_bytes()
    (tmp_path / "w.tar").write_bytes(data[: len(data) // 2])
    rows = read_all(sharded_corpus([str(tmp_path / "w.tar")]))
    errors = [row for row in rows if row[schema.STATUS] == schema.STATUS_ERROR]
    assert len(errors) == 1 and "the members after it were not read" in errors[0][schema.ERROR]
    assert 1 <= len(rows) - 1 <= 2
    missing = read_all(sharded_corpus([str(tmp_path / "none.tar")]))
    assert len(missing) == 1 and "cannot open the shard" in missing[0][schema.ERROR]


def test_loose_manifests_beside_shards_are_refused(tmp_path):
    write_webdataset([("u0", SAMPLES / "sample00.flac", None)], tmp_path / "w.tar")
    assert sharded_corpus([str(SAMPLES / "manifest.json")]) is None
    with pytest.raises(ShardsError, match="loose manifests .* and sharded corpora"):
        sharded_corpus([str(SAMPLES / "manifest.json"), str(tmp_path / "w.tar")])


def test_shards_in_s3_read_as_local_ones(tmp_path, loose):
    pytest.importorskip("moto")
    import s3fs

    from tests.support.s3_server import moto_s3

    lines, _ = loose
    write_nemo_tarred(lines[:6], SAMPLES, tmp_path / "tarred", num_shards=2)
    write_shar([SAMPLES / line["audio_filepath"] for line in lines[:4]], ["x"] * 4, tmp_path / "shar", shard_size=2)
    write_webdataset([(f"u{i}", SAMPLES / lines[i]["audio_filepath"], None) for i in range(3)], tmp_path / "w.tar")
    local = [read_all(sharded_corpus([str(tmp_path / name)])) for name in ("tarred", "shar", "w.tar")]
    with moto_s3("corpus"):
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.put(str(tmp_path) + "/", "corpus/data/", recursive=True)
        remote = [read_all(sharded_corpus([f"s3://corpus/data/{name}"])) for name in ("tarred", "shar", "w.tar")]
    for here, there in zip(local, remote):
        assert len(here) == len(there) > 0 and all(row[schema.STATUS] == schema.STATUS_OK for row in there)
        key = schema.SHARD_MEMBER
        for a, b in zip(sorted(here, key=lambda r: r[key]), sorted(there, key=lambda r: r[key])):
            assert b[schema.AUDIO_FILEPATH].startswith("s3://corpus/data/")
            np.testing.assert_array_equal(np.asarray(a[schema.SAMPLES]), np.asarray(b[schema.SAMPLES]))


def test_dry_run_and_the_progress_total_count_listed_shard_rows(tmp_path, loose):
    from pipeline.config import ModelConfig, TranscribeJobConfig
    from pipeline.dry_run import dry_run
    from pipeline.graph import shard_listings
    from pipeline.io.uris import AudioRoots
    from pipeline.totals import RowsUnknown, count_rows

    lines, _ = loose
    write_nemo_tarred(lines[:9], SAMPLES, tmp_path / "tarred", num_shards=3)
    write_webdataset([("u0", SAMPLES / "sample00.flac", None)], tmp_path / "w.tar")
    config = TranscribeJobConfig(manifests=(str(tmp_path / "tarred"),), output=str(tmp_path / "out"),
                                 model=ModelConfig(cache_dir=str(tmp_path / "cache")))
    counts = count_rows([], {}, IdSet(), AudioRoots(), shard_listings(config))
    assert counts.rows == counts.rows_to_commit == 9
    assert counts.audio_s_to_transcribe == pytest.approx(sum(line["duration"] for line in lines[:9]))
    report = dry_run(config, [])
    assert report["rows"] == report["rows_to_transcribe"] == 9 and report["audio_unreadable"] == 0
    assert report["audio_checked"] >= 3 and report["sample_rates"] == {16000: report["audio_checked"]}
    (tmp_path / "tarred" / "audio_1.tar").write_bytes(b"not a tar")
    web = TranscribeJobConfig(manifests=(str(tmp_path / "w.tar"),), output=str(tmp_path / "out"),
                              model=ModelConfig(cache_dir=str(tmp_path / "cache")))
    with pytest.raises(RowsUnknown):
        count_rows([], {}, IdSet(), AudioRoots(), shard_listings(web))
    assert dry_run(web, [])["shards_with_rows_unknown"] == 1
    broken = dry_run(config, [])
    assert broken["audio_unreadable"] >= 1 and "audio_1.tar" in broken["audio_problem_examples"][0]
