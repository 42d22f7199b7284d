"""The kept pseudo-labels as NeMo and Lhotse read them (`pipeline/labels/shards_out.py`, `filters.nemo_line`,
`filters.lhotse_cut`): whole utterances and segments of a longer recording, written as a NeMo tarred audio dataset
and a Lhotse Shar, and as manifests into the original audio, each read back by the library's own reader
(`TarredAudioToCharDataset`, `AudioToCharDataset`, `CutSet.from_shar`, `CutSet.from_dicts`) with the audio and
text expected: the samples of the original file at the segment's offset."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
import soundfile

from pipeline import schema
from pipeline.config import REPOSITORY
from pipeline.io import Folder
from pipeline.labels.filters import lhotse_cut, nemo_line
from pipeline.labels.shards_out import SHAR, TARRED, member_base, shard_ranges, write_shards

SAMPLE_RATE = 16000
LABELS = list(" abcdefghijklmnopqrstuvwxyz'")
TEXTS = ["the tree split with a great ripping sound", "freedom is nothing else but the chance to do better",
         "the roof finally gave under the weight of the ice"]
QUANTUM = 1 / 32768  # the shards hold 16-bit FLAC


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """Two whole files and two segments (offset and duration) of a recording of three samples joined by pauses,
    as kept rows, with the samples each should give."""
    root = tmp_path_factory.mktemp("labels")
    pieces, spans, position = [], [], 0
    for index in range(3):
        samples, rate = soundfile.read(REPOSITORY / "samples" / f"sample0{index}.flac", dtype="float32")
        assert rate == SAMPLE_RATE
        pause = np.zeros(SAMPLE_RATE, dtype=np.float32)
        pieces += [pause, samples]
        spans.append(((position + len(pause)) / SAMPLE_RATE, len(samples) / SAMPLE_RATE))
        position += len(pause) + len(samples)
    recording = np.concatenate([*pieces, np.zeros(SAMPLE_RATE, dtype=np.float32)])
    long_path = root / "in.dir" / "long.recording.wav"  # dots in a folder and a name: flattened by NeMo's rule
    long_path.parent.mkdir()
    soundfile.write(long_path, recording, SAMPLE_RATE, subtype="PCM_16")
    recording = soundfile.read(long_path, dtype="float32")[0]

    def row(uid, path, offset, duration, text, reference=None):
        return {schema.UTTERANCE_ID: uid, schema.AUDIO_FILEPATH: str(path), schema.OFFSET: offset,
                schema.DURATION: duration, schema.AUDIO_DURATION: duration, schema.TEXT: text,
                schema.CONFIDENCE: 0.8, schema.REFERENCE_TEXT: reference, schema.CHANNEL: None,
                schema.FILE_DURATION: len(recording) / SAMPLE_RATE if path == long_path else duration}

    rows, expected = [], []
    for index in range(2):
        path = REPOSITORY / "samples" / f"sample0{index}.flac"
        samples = soundfile.read(path, dtype="float32")[0]
        rows.append(row(f"whole{index}", path, 0.0, len(samples) / SAMPLE_RATE, TEXTS[index], TEXTS[index]))
        expected.append(samples)
    for index in (1, 2):  # segments: the second and third samples of the recording, 0.25 s of pause around each
        start_s, duration_s = spans[index]
        offset, duration = round(start_s - 0.25, 3), round(duration_s + 0.5, 3)
        rows.append({**row(f"long-{index:04d}", long_path, offset, duration, TEXTS[index]), "segment_of": "long"})
        first = int(round(offset * SAMPLE_RATE))
        expected.append(recording[first:first + int(round(duration * SAMPLE_RATE))])
    return root, rows, expected


def same_audio(got: np.ndarray, want: np.ndarray) -> None:
    assert abs(len(got) - len(want)) <= 1, (len(got), len(want))
    n = min(len(got), len(want))
    np.testing.assert_allclose(got[:n], want[:n], atol=1.5 * QUANTUM)


def test_shards_are_balanced_and_hold_every_utterance():
    assert shard_ranges(0, 10) == []
    assert shard_ranges(5, 10) == [(0, 5)]
    assert shard_ranges(2500, 1000) == [(0, 833), (833, 1666), (1666, 2500)]
    assert member_base("/data/a.b/c.d.wav", 12.34, 5) == "_data_a_b_c_d_12_34_5_0"  # NeMo's names for slices


@pytest.mark.nemo
def test_the_tarred_set_is_read_by_nemos_tarred_dataset(labelled, tmp_path):
    from nemo.collections.asr.data.audio_to_text import TarredAudioToCharDataset
    from omegaconf import OmegaConf

    _, rows, expected = labelled
    written = write_shards(rows, Folder(str(tmp_path / "run")), (TARRED,), SAMPLE_RATE, max_shard_utterances=3)
    assert written.shards == 2 and written.utterances == 4 and not written.failed
    folder = tmp_path / "run" / TARRED
    lines = [json.loads(line) for line in (folder / "tarred_audio_manifest.json").read_text().splitlines()]
    per_shard = [json.loads(line) for k in range(2)
                 for line in (folder / "sharded_manifests" / f"manifest_{k}.json").read_text().splitlines()]
    assert lines == per_shard and [line["shard_id"] for line in lines] == [0, 0, 1, 1]
    for k in range(2):
        with tarfile.open(folder / f"audio_{k}.tar") as tar:
            assert tar.getnames() == [line["audio_filepath"] for line in lines if line["shard_id"] == k]
    segment = lines[2]
    assert "offset" not in segment and segment["source_audio_offset"] == rows[2][schema.OFFSET]
    assert segment["audio_filepath"].startswith(str(rows[2][schema.AUDIO_FILEPATH]).replace("/", "_")[:-4]
                                                .replace(".", "_"))
    metadata = OmegaConf.load(folder / "metadata.yaml")
    assert metadata.dataset_config.num_shards == 2 and metadata.dataset_config.slice_with_offset

    # NeMo's reader, with the shards named in either brace syntax
    for shards in (f"{folder}/audio_{{0..1}}.tar", f"{folder}/audio__OP_0..1_CL_.tar"):
        dataset = TarredAudioToCharDataset(audio_tar_filepaths=shards, manifest_filepath=str(folder /
                                           "tarred_audio_manifest.json"), labels=LABELS, sample_rate=SAMPLE_RATE,
                                           shuffle_n=0)
        items = list(dataset)
        assert len(items) == 4
        for (audio, audio_length, tokens, _), row, want in zip(items, rows, expected):
            same_audio(audio[:int(audio_length)].numpy(), want)
            assert "".join(LABELS[t] for t in tokens.tolist()) == row[schema.TEXT]


@pytest.mark.nemo
def test_the_shar_is_read_by_lhotse(labelled, tmp_path):
    from lhotse import CutSet

    _, rows, expected = labelled
    written = write_shards(rows, Folder(str(tmp_path / "run")), (SHAR,), SAMPLE_RATE, max_shard_utterances=3)
    assert written.utterances == 4
    folder = tmp_path / "run" / SHAR
    assert sorted(p.name for p in folder.iterdir()) == ["cuts.000000.jsonl.gz", "cuts.000001.jsonl.gz",
                                                       "recording.000000.tar", "recording.000001.tar"]
    cuts = list(CutSet.from_shar(in_dir=folder))
    assert [c.id for c in cuts] == [r[schema.UTTERANCE_ID] for r in rows]
    for cut, row, want in zip(cuts, rows, expected):
        assert cut.sampling_rate == SAMPLE_RATE and cut.supervisions[0].text == row[schema.TEXT]
        assert cut.supervisions[0].custom["source_offset"] == pytest.approx(row[schema.OFFSET])
        same_audio(cut.load_audio()[0], want)


@pytest.mark.nemo
def test_the_manifests_into_the_original_audio_are_read_by_nemo_and_lhotse(labelled, tmp_path):
    from lhotse import CutSet
    from nemo.collections.asr.data.audio_to_text import AudioToCharDataset

    _, rows, expected = labelled
    manifest = tmp_path / "train.json"
    manifest.write_text("".join(json.dumps(nemo_line(r)) + "\n" for r in rows))
    assert [("offset" in json.loads(line)) for line in manifest.read_text().splitlines()] == [False, False, True,
                                                                                               True]
    dataset = AudioToCharDataset(manifest_filepath=str(manifest), labels=LABELS, sample_rate=SAMPLE_RATE)
    for index, want in enumerate(expected):
        audio, audio_length, tokens, _ = dataset[index]
        same_audio(audio[:int(audio_length)].numpy(), want)
        assert "".join(LABELS[t] for t in tokens.tolist()) == rows[index][schema.TEXT]
    cuts = CutSet.from_dicts([lhotse_cut(r, SAMPLE_RATE) for r in rows])
    for cut, want in zip(cuts, expected):
        same_audio(cut.load_audio()[0], want)


def test_cut_audio_writes_each_segment_once_and_the_lines_name_it(labelled, tmp_path):
    from lhotse import CutSet

    from pipeline.labels.runs import cut_segment_audio

    _, rows, expected = labelled
    missing = {**rows[3], schema.UTTERANCE_ID: "gone-0000", schema.AUDIO_FILEPATH: str(tmp_path / "gone.wav")}
    kept, failed = cut_segment_audio([*rows, missing], Folder(str(tmp_path / "run")), SAMPLE_RATE)
    assert [r[schema.UTTERANCE_ID] for r, _ in failed] == ["gone-0000"] and "gone.wav" in failed[0][1]
    assert kept[:2] == rows[:2]  # whole utterances point at their files as before
    for row, cut_row, want in zip(rows[2:], kept[2:], expected[2:]):
        line = nemo_line(cut_row)
        assert line["audio_filepath"] == str(tmp_path / "run" / "audio" / f"{row[schema.UTTERANCE_ID]}.flac")
        assert "offset" not in line and line["source_audio_offset"] == row[schema.OFFSET]
        assert line["source_audio_filepath"] == row[schema.AUDIO_FILEPATH]
        same_audio(soundfile.read(line["audio_filepath"], dtype="float32")[0], want)
        (cut,) = CutSet.from_dicts([lhotse_cut(cut_row, SAMPLE_RATE)])
        same_audio(cut.load_audio()[0], want)


def test_output_formats_are_checked():
    from pipeline.labels import LabelConfig

    assert LabelConfig(output="o", output_format=(TARRED, SHAR)).output_format == (TARRED, SHAR)
    for wrong in ((), ("nemo", "nemo"), ("tarred",)):
        with pytest.raises(ValueError, match="output_format must be one or more of nemo, nemo_tarred, shar"):
            LabelConfig(output="o", output_format=wrong)


def test_audio_inside_an_input_shard_is_read_from_the_tar_once_per_shard(labelled, tmp_path):
    from pipeline.labels.shards_out import read_audio

    root, rows, expected = labelled
    tar_path = tmp_path / "audio_0.tar"
    with tarfile.open(tar_path, "w") as tar:  # the first whole file, and the recording as NeMo stores it
        for name, path in (("sample00.flac", rows[0][schema.AUDIO_FILEPATH]),
                           ("long_recording.wav", rows[2][schema.AUDIO_FILEPATH])):
            info = tarfile.TarInfo(name)
            data = open(path, "rb").read()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    in_tar = [{**rows[0], schema.AUDIO_FILEPATH: str(tar_path), schema.SHARD_MEMBER: "sample00.flac"},
              {**rows[2], schema.AUDIO_FILEPATH: str(tar_path), schema.SHARD_MEMBER: "long_recording.wav"},
              {**rows[3], schema.AUDIO_FILEPATH: str(tar_path), schema.SHARD_MEMBER: "long_recording-sub1.wav"},
              {**rows[1], schema.UTTERANCE_ID: "gone", schema.AUDIO_FILEPATH: str(tar_path),
               schema.SHARD_MEMBER: "gone.flac"}]
    got = {row[schema.UTTERANCE_ID]: audio for row, audio in read_audio([rows[1], *in_tar], SAMPLE_RATE)}
    for index in (0, 1, 2, 3):  # 1: the loose row beside them
        same_audio(got[rows[index][schema.UTTERANCE_ID]], expected[index])
    assert got["gone"] == f"{tar_path}: member 'gone.flac': not in the shard"
    from pipeline.labels.runs import cut_segment_audio  # a NeMo line cannot name a tar's member: its own file

    kept, failed = cut_segment_audio([rows[1], *in_tar[:2]], Folder(str(tmp_path / "run")), SAMPLE_RATE,
                                     segments=False)
    assert not failed and kept[0] == rows[1]  # a loose whole utterance stays as it is
    for cut_row, want in zip(kept[1:], (expected[0], expected[2])):
        line = nemo_line(cut_row)
        assert line["audio_filepath"].startswith(str(tmp_path / "run" / "audio")) and "offset" not in line
        assert line["source_audio_filepath"] == str(tar_path) and line["source_shard_member"]
        same_audio(soundfile.read(line["audio_filepath"], dtype="float32")[0], want)
