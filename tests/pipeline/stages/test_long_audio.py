"""Long recordings through the job's stages on the bundled model: cut into chunks at pauses, merged back into one
row with word times at the recording's frames, read chunk by chunk by the ASR stage, and bad long inputs; cut into
speech segments by voice activity: no words from music, noise or silence, and a row on S3 fetched about once."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest
import soundfile

from benchmarks.long_audio import non_speech  # the benchmark's non-speech: chords, noise, silence
from pipeline import schema
from pipeline.config import BUNDLED_MANIFEST, BUNDLED_MODEL, LongAudioConfig, ModelConfig, ResourcesConfig
from pipeline.decoding.plan import DecodingConfig, plan_decoding
from pipeline.decoding.recognize import transcript_of
from pipeline.io.manifest import read_manifest
from pipeline.model.actor import load_model
from pipeline.model.nemo_file import read_model_facts
from pipeline.stages.asr import TranscribeBatch
from pipeline.stages.audio import LoadAudio

pytestmark = pytest.mark.nemo

RATE = 16000
CHUNKS = LongAudioConfig(chunk_s=8.0, overlap_s=2.0, segment="pauses")


@pytest.fixture(scope="module")
def model():
    return load_model(ModelConfig(uri=str(BUNDLED_MODEL)), "cpu")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """The first 8 bundled utterances joined with pauses of 0.4-1.2 s: (path, samples, starts in s)."""
    rng = np.random.default_rng(0)
    pieces, starts, position = [], [], 0
    for entry in list(read_manifest(str(BUNDLED_MANIFEST)))[:8]:
        pause = (1e-3 * rng.standard_normal(int(rng.uniform(0.4, 1.2) * RATE))).astype(np.float32)
        samples, _ = soundfile.read(entry[schema.AUDIO_FILEPATH], dtype="float32")
        pieces += [pause, samples]
        starts.append((position + len(pause)) / RATE)
        position += len(pause) + len(samples)
    samples = np.concatenate(pieces + [pieces[0]])
    path = tmp_path_factory.mktemp("long") / "recording.flac"
    soundfile.write(path, samples, RATE)
    return path, samples, starts


def rows(tmp_path, entries):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)


def decode(model, table, long_audio, strategy="greedy", resources=None):
    plan = plan_decoding(read_model_facts(str(BUNDLED_MODEL)), DecodingConfig(strategy=strategy))
    audio = LoadAudio(RATE, long_audio=long_audio)(table)
    decoded = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, resources or ResourcesConfig(),
                                     long_audio=long_audio,
                                     load=lambda *_: model)(audio)
    return audio, decoded, plan


def transcripts(model, decoded, plan):
    columns = [decoded.column(c).to_pylist() for c in (schema.TOKENS, schema.TOKEN_FRAMES, schema.TOKEN_DURATIONS,
                                                       schema.SCORE)]
    return [transcript_of(model, plan.span_kind, *values) if values[0] is not None else None
            for values in zip(*columns)]


def test_a_long_recording_is_one_row_of_chunks_read_by_the_asr_stage(model, recording, tmp_path):
    path, samples, starts = recording
    table = rows(tmp_path, [{"audio_filepath": str(path), "duration": len(samples) / RATE}])
    audio, decoded, plan = decode(model, table, CHUNKS)
    assert audio.column(schema.CHUNKED_READ).to_pylist() == [True]
    assert len(audio.column(schema.SAMPLES)[0].values) == 0  # no audio carried to the ASR stage
    assert decoded.column(schema.STATUS).to_pylist() == ["ok"]
    assert decoded.column(schema.AUDIO_DURATION)[0].as_py() == pytest.approx(len(samples) / RATE, abs=1e-3)
    (transcript,) = transcripts(model, decoded, plan)
    frames = decoded.column(schema.TOKEN_FRAMES)[0].as_py()
    assert frames == sorted(frames) and frames[-1] < len(samples) / RATE / model.frame_shift_s
    # the recording's words: each utterance's first word near its start (frames count from the recording's start)
    first_words = [w.start_s for w in transcript.words]
    near = [min(abs(t - start) for t in first_words) for start in starts]
    assert sum(d <= 0.5 for d in near) >= 6, near


def test_chunks_read_by_the_asr_stage_equal_chunks_of_audio_in_memory(model, recording, tmp_path):
    path, samples, _ = recording
    read = rows(tmp_path, [{"audio_filepath": str(path), "duration": len(samples) / RATE}])
    in_memory = LoadAudio(RATE, long_audio=LongAudioConfig(chunk_s=0))(read)  # carries the samples
    plan = plan_decoding(read_model_facts(str(BUNDLED_MODEL)), DecodingConfig())
    stage = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, ResourcesConfig(), long_audio=CHUNKS,
                                   load=lambda *_: model)
    _, decoded, _ = decode(model, read, CHUNKS)
    assert stage(in_memory).column(schema.TOKENS).to_pylist() == decoded.column(schema.TOKENS).to_pylist()


def test_chunking_beats_decoding_the_recording_whole(model, recording, tmp_path):
    """Chunks at pauses bring the joined utterances close to how they decode one by one."""
    import jiwer

    path, samples, _ = recording
    references = [e[schema.REFERENCE_TEXT] for e in list(read_manifest(str(BUNDLED_MANIFEST)))[:8]]
    references.append(references[0])
    table = rows(tmp_path, [{"audio_filepath": str(path), "duration": len(samples) / RATE}])
    errors = {}
    for name, long_audio in (("whole", LongAudioConfig(chunk_s=0)), ("chunks", CHUNKS)):
        _, decoded, plan = decode(model, table, long_audio)
        errors[name] = jiwer.wer(" ".join(references), decoded_text(model, decoded, plan))
    assert errors["chunks"] < errors["whole"] - 0.1, errors


def decoded_text(model, decoded, plan):
    return " ".join(t.text for t in transcripts(model, decoded, plan))


@pytest.mark.parametrize("strategy, segment", [("ctc_beam", "pauses"), ("alsd", "pauses"), ("ctc_greedy", "pauses"),
                                               ("wind_greedy", "pauses"), ("ctc_beam", "vad"), ("alsd", "vad")])
def test_every_strategy_decodes_a_chunked_recording(model, recording, tmp_path, strategy, segment):
    """Cut at pauses, or into speech segments (the writer's CTC search then runs over the segments' frames joined)."""
    path, samples, _ = recording
    table = rows(tmp_path, [{"audio_filepath": str(path), "duration": len(samples) / RATE}])
    _, decoded, plan = decode(model, table, LongAudioConfig(chunk_s=8.0, overlap_s=2.0, segment=segment), strategy)
    assert decoded.column(schema.STATUS).to_pylist() == ["ok"]
    if plan.writer_searches:
        search = plan.build_writer_search(model)
        frames = np.asarray(decoded.column(schema.CTC_FRAMES)[0].as_py())
        assert (np.diff(frames) > 0).all()
        vocab = model.ctc.vocab_size + 1
        log_probs = np.frombuffer(decoded.column(schema.CTC_LOG_PROBS)[0].as_py(), np.float16).reshape(-1, vocab)
        (hypothesis,) = search([(log_probs, frames)])
        text = model.tokenizer.ids_to_text(hypothesis.tokens)
    else:
        text = decoded_text(model, decoded, plan)
    assert len(text.split()) > 40


def test_the_other_heads_chunks_are_merged_like_the_chosen_heads(model, recording, tmp_path):
    """decoding.head_agreement on a chunked row: the other head's (CTC greedy) tokens come merged over the whole
    recording, and agree with the chosen head's about as well as on the utterances (the bundled model's heads)."""
    from pipeline.decoding.recognize import head_agreement

    path, samples, _ = recording
    table = rows(tmp_path, [{"audio_filepath": str(path), "duration": len(samples) / RATE}])
    plan = plan_decoding(read_model_facts(str(BUNDLED_MODEL)), DecodingConfig(head_agreement=True))
    audio = LoadAudio(RATE, long_audio=CHUNKS)(table)
    decoded = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, ResourcesConfig(), long_audio=CHUNKS,
                                     load=lambda *_: model)(audio)
    second = model.tokenizer.ids_to_text(decoded.column(schema.SECOND_TOKENS)[0].as_py())
    assert len(second.split()) > 40
    assert head_agreement(decoded_text(model, decoded, plan), second) > 0.5


def test_a_manifest_duration_longer_than_the_audio_gives_what_is_there(model, recording, tmp_path):
    path, samples, _ = recording
    table = rows(tmp_path, [{"audio_filepath": str(path), "duration": 3 * len(samples) / RATE}])
    audio, decoded, plan = decode(model, table, CHUNKS)
    assert decoded.column(schema.STATUS).to_pylist() == ["ok"]
    assert decoded.column(schema.AUDIO_DURATION)[0].as_py() == pytest.approx(len(samples) / RATE, abs=1e-3)


def test_a_truncated_long_flac_and_an_offset_past_the_end_are_error_rows(model, recording, tmp_path):
    path, samples, _ = recording
    truncated = tmp_path / "truncated.flac"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    table = rows(tmp_path, [{"audio_filepath": str(truncated), "duration": len(samples) / RATE},
                            {"audio_filepath": str(path), "duration": 20.0, "offset": 1e4},
                            {"audio_filepath": str(path), "duration": len(samples) / RATE}])
    _, decoded, _ = decode(model, table, CHUNKS)
    statuses, errors = decoded.column(schema.STATUS).to_pylist(), decoded.column(schema.ERROR).to_pylist()
    assert statuses[2] == "ok"
    assert statuses[1] == "error" and "past the end" in errors[1], errors[1]
    # a truncated FLAC is either refused, naming the file, or transcribed as far as it goes
    assert (statuses[0] == "error" and str(truncated) in errors[0]) or \
        decoded.column(schema.AUDIO_DURATION)[0].as_py() < len(samples) / RATE, errors[0]


def test_local_attention_decodes_a_recording_whole(recording, tmp_path):
    path, samples, _ = recording
    local = LongAudioConfig(chunk_s=0, attention="local", local_context=64)
    model = load_model(ModelConfig(uri=str(BUNDLED_MODEL)), "cpu")  # its own: local attention changes it
    table = rows(tmp_path, [{"audio_filepath": str(path), "duration": len(samples) / RATE}])
    audio, decoded, plan = decode(model, table, local)
    assert audio.column(schema.CHUNKED_READ).to_pylist() == [False]
    assert model.nemo_model.encoder.self_attention_model == "rel_pos_local_attn"
    assert decoded.column(schema.STATUS).to_pylist() == ["ok"]
    assert len(decoded_text(model, decoded, plan).split()) > 40


def _spy_on_encoder(model, monkeypatch) -> list[tuple[int, float]]:
    """(rows, padded seconds) of every batch the real encoder is given."""
    batches, encode = [], model.encode

    def recorded(waveforms, lengths):
        batches.append((waveforms.shape[0], waveforms.shape[1] / RATE))
        return encode(waveforms, lengths)

    monkeypatch.setattr(model, "encode", recorded)
    return batches


def test_a_row_too_long_for_the_memory_budget_is_decoded_in_chunks_that_fit(model, recording, tmp_path, monkeypatch,
                                                                            caplog):
    """With chunking off (chunk_s 0), a budget that holds 10 s of this encoder at once cuts the recording into chunks
    of 10 s, as chunk_s 10 would, and says so once."""
    from pipeline.model.memory import encoder_memory

    path, samples, _ = recording
    table = rows(tmp_path, [{"audio_filepath": str(path), "duration": len(samples) / RATE}])
    memory = encoder_memory(model.config, "cpu")
    budget_gb = memory.batch_bytes(1, 10.4) / (1 << 30)  # 10 s fit, 11 do not
    assert len(samples) / RATE > 20
    plan = plan_decoding(read_model_facts(str(BUNDLED_MODEL)), DecodingConfig())
    whole = LoadAudio(RATE, long_audio=LongAudioConfig(chunk_s=0))(table)  # carries the samples
    expected = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, ResourcesConfig(),
                               long_audio=LongAudioConfig(chunk_s=10.0, overlap_s=2.5), load=lambda *_: model)(whole)
    batches = _spy_on_encoder(model, monkeypatch)
    stage = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, ResourcesConfig(asr_memory_gb=budget_gb),
                            long_audio=LongAudioConfig(chunk_s=0), load=lambda *_: model)
    with caplog.at_level("WARNING", logger="pipeline.stages.asr"):
        decoded = stage(whole)
        stage(whole)
    assert decoded.column(schema.STATUS).to_pylist() == ["ok"]
    assert decoded.column(schema.TOKENS).to_pylist() == expected.column(schema.TOKENS).to_pylist()
    assert len(batches) >= 6 and max(seconds for _, seconds in batches) <= 10.0 + 1e-9
    assert all(memory.batch_bytes(rows, seconds) <= budget_gb * (1 << 30) for rows, seconds in batches)
    said = [r.getMessage() for r in caplog.records if "do not fit" in r.getMessage()]
    assert len(said) == 1 and "chunks of 10 s" in said[0], said


def test_batches_hold_only_the_rows_the_memory_budget_holds(model, tmp_path, monkeypatch):
    entries = [json.loads(line) for line in BUNDLED_MANIFEST.read_text().splitlines()[:12]]
    entries = [dict(e, audio_filepath=str(BUNDLED_MANIFEST.parent / e["audio_filepath"])) for e in entries]
    table = rows(tmp_path, entries)
    plan = plan_decoding(read_model_facts(str(BUNDLED_MODEL)), DecodingConfig())
    audio = LoadAudio(RATE, long_audio=CHUNKS)(table)
    unbounded = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, ResourcesConfig(), long_audio=CHUNKS,
                                load=lambda *_: model)(audio)
    from pipeline.model.memory import encoder_memory

    longest_s = max(e["duration"] for e in entries)
    budget = encoder_memory(model.config, "cpu").batch_bytes(3, longest_s + 0.1)  # three of the longest rows
    batches = _spy_on_encoder(model, monkeypatch)
    bounded = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan,
                              ResourcesConfig(asr_memory_gb=budget / (1 << 30)), long_audio=CHUNKS,
                              load=lambda *_: model)(audio)
    assert max(rows for rows, _ in batches) == 3 and len(batches) >= 4
    assert bounded.column(schema.STATUS).to_pylist() == ["ok"] * 12
    assert bounded.column(schema.TOKENS).to_pylist() == unbounded.column(schema.TOKENS).to_pylist()


def test_a_batch_that_runs_out_of_memory_is_decoded_row_by_row_and_halves_later_budgets(model, tmp_path, monkeypatch,
                                                                                         caplog):
    """The memory model under-estimating (an allocation failing, as torch raises it) costs no row: the batch is
    decoded again row by row with the same tokens, later batches get half the budget, and the actor says so once."""
    import torch

    entries = [json.loads(line) for line in BUNDLED_MANIFEST.read_text().splitlines()[:6]]
    table = rows(tmp_path, [dict(e, audio_filepath=str(BUNDLED_MANIFEST.parent / e["audio_filepath"]))
                            for e in entries])
    plan = plan_decoding(read_model_facts(str(BUNDLED_MODEL)), DecodingConfig())
    audio = LoadAudio(RATE, long_audio=CHUNKS)(table)
    expected = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, ResourcesConfig(), long_audio=CHUNKS,
                               load=lambda *_: model)(audio)
    failed, encode = [], model.encode

    def failing_once(waveforms, lengths):  # the first batch of several rows runs out of memory
        if waveforms.shape[0] > 1 and not failed:
            failed.append(waveforms.shape[0])
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return encode(waveforms, lengths)

    monkeypatch.setattr(model, "encode", failing_once)
    stage = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, ResourcesConfig(asr_memory_gb=4.0),
                            long_audio=CHUNKS, load=lambda *_: model)
    with caplog.at_level("WARNING", logger="pipeline.stages.asr"):
        decoded = stage(audio)
    assert failed == [6]
    assert decoded.column(schema.STATUS).to_pylist() == ["ok"] * 6
    assert decoded.column(schema.TOKENS).to_pylist() == expected.column(schema.TOKENS).to_pylist()
    assert stage.sizing.budget_bytes == 2.0 * (1 << 30)
    said = [r.getMessage() for r in caplog.records if "ran out of memory" in r.getMessage()]
    assert len(said) == 1 and "2.0 GiB" in said[0], said


# ---- cut by voice activity (pipeline/stages/segments.py) ---------------------------------------------------------

@pytest.fixture(scope="module")
def utterances():
    entries = list(read_manifest(str(BUNDLED_MANIFEST)))[:6]
    return [(soundfile.read(e[schema.AUDIO_FILEPATH], dtype="float32")[0], e[schema.REFERENCE_TEXT]) for e in entries]


def decode_rows(model, table, long_audio, strategy="greedy"):
    from pipeline.decoding.plan import DecodingConfig, plan_decoding
    from pipeline.decoding.recognize import transcript_of
    from pipeline.model.nemo_file import read_model_facts
    from pipeline.stages.asr import TranscribeBatch

    plan = plan_decoding(read_model_facts(str(BUNDLED_MODEL)), DecodingConfig(strategy=strategy))
    audio = LoadAudio(RATE, long_audio=long_audio)(table)
    decoded = TranscribeBatch(ModelConfig(uri=str(BUNDLED_MODEL)), plan, ResourcesConfig(), long_audio=long_audio,
                              load=lambda *_: model)(audio)
    assert decoded.column(schema.STATUS).to_pylist() == ["ok"] * table.num_rows, decoded.column(schema.ERROR)
    columns = [decoded.column(c).to_pylist() for c in (schema.TOKENS, schema.TOKEN_FRAMES, schema.TOKEN_DURATIONS,
                                                       schema.SCORE)]
    return audio, decoded, [transcript_of(model, plan.span_kind, *values) for values in zip(*columns)]


def manifest_rows(tmp_path, paths, durations_s):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(p), "duration": d}) + "\n"
                                for p, d in zip(paths, durations_s)))
    return pa.Table.from_pylist(list(read_manifest(str(manifest))), schema=schema.INPUT_SCHEMA)


@pytest.mark.nemo
def test_no_words_come_out_of_music_noise_or_silence(model, utterances, tmp_path):
    rng = np.random.default_rng(1)
    pieces, speech, stretches, position = [], [], [], 0
    for (samples, _), kind in zip(utterances, ["tones", "noise", "silence", "tones", "noise", "silence"]):
        gap = np.concatenate([(1e-3 * rng.standard_normal(RATE // 2)).astype(np.float32),
                              non_speech(kind, 3.0, rng), np.zeros(RATE // 2, np.float32)])
        stretches.append(((position + RATE // 2) / RATE, (position + RATE // 2) / RATE + 3.0))
        position += len(gap)
        speech.append((position / RATE, (position + len(samples)) / RATE))
        pieces += [gap, samples]
        position += len(samples)
    recording = np.concatenate(pieces)
    path = tmp_path / "mixed.flac"
    soundfile.write(path, recording, RATE)
    table = manifest_rows(tmp_path, [path], [len(recording) / RATE])
    audio, decoded, (transcript,) = decode_rows(model, table, LongAudioConfig(chunk_s=10.0, overlap_s=2.0))
    inside = [(w.text, w.start_s) for w in transcript.words
              if any(low + 0.2 < w.start_s < high - 0.2 for low, high in stretches)]
    assert not inside, inside
    segments = decoded.column(schema.SPEECH_SEGMENTS)[0].as_py()
    decoded_s = sum(s["end"] - s["start"] for s in segments)
    total_s = len(recording) / RATE
    assert decoded.column(schema.SPEECH_SHARE)[0].as_py() == pytest.approx(decoded_s / total_s)
    assert decoded_s <= 0.8 * total_s  # 18 s of non-speech out of about 42
    for low, high in speech:  # every utterance is in segments (one, or two where it pauses for breath)
        inside_segments = [s for s in segments if s["end"] > low and s["start"] < high]
        assert inside_segments and inside_segments[0]["start"] <= low + 0.2 and \
            high - 0.2 <= inside_segments[-1]["end"], (low, high, segments)
    # the speech passed on is about what was decoded: the row is not carried whole
    assert len(audio.column(schema.SAMPLES)[0].values) < (decoded_s + 0.32 * len(segments)) * RATE
    # the pauses' way decodes words in the non-speech (what this replaces)
    _, _, (paused,) = decode_rows(model, table, LongAudioConfig(chunk_s=10.0, overlap_s=2.0, segment="pauses"))
    assert any(low + 0.2 < w.start_s < high - 0.2 for w in paused.words for low, high in stretches)


@pytest.mark.nemo
def test_a_recording_of_only_non_speech_has_no_words_and_short_rows_are_decoded_whole(model, utterances, tmp_path):
    rng = np.random.default_rng(2)
    quiet = tmp_path / "quiet.flac"
    soundfile.write(quiet, np.concatenate([non_speech("tones", 6.0, rng), non_speech("silence", 6.0, rng)]), RATE)
    short = tmp_path / "short.flac"
    soundfile.write(short, utterances[0][0], RATE)
    table = manifest_rows(tmp_path, [quiet, short], [12.0, len(utterances[0][0]) / RATE])
    _, decoded, (nothing, alone) = decode_rows(model, table, LongAudioConfig(chunk_s=10.0, overlap_s=2.0))
    assert nothing.words == [] and decoded.column(schema.SPEECH_SEGMENTS).to_pylist() == [[], None]
    assert decoded.column(schema.SPEECH_SHARE).to_pylist() == [0.0, None]
    assert alone.text
    # the writer commits them as output columns
    import pyarrow.parquet as pq

    from pipeline.decoding.plan import DecodingConfig, plan_decoding
    from pipeline.model.nemo_file import read_model_facts
    from pipeline.stages.write import FinishAndWrite

    plan = plan_decoding(read_model_facts(str(BUNDLED_MODEL)), DecodingConfig())
    FinishAndWrite(ModelConfig(uri=str(BUNDLED_MODEL)), plan, str(tmp_path / "out"), "m")(decoded)
    (part,) = (tmp_path / "out").glob("part-*.parquet")
    written = pq.read_table(part)
    assert written.column(schema.SPEECH_SEGMENTS).to_pylist() == [[], None]
    assert written.column(schema.SPEECH_SHARE).to_pylist() == [0.0, None]
    assert written.schema == schema.OUTPUT_SCHEMA


@pytest.mark.nemo
def test_a_long_row_on_s3_is_fetched_about_once(model, utterances, tmp_path):
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from tests.support.counting_proxy import CountingProxy
    from tests.support.s3_server import moto_s3

    rng = np.random.default_rng(3)
    recording = np.concatenate([np.concatenate([(1e-3 * rng.standard_normal(int(rng.uniform(0.4, 1.2) * RATE)))
                                                .astype(np.float32), samples]) for samples, _ in utterances * 3])
    data_path = tmp_path / "long.wav"
    soundfile.write(data_path, recording, RATE, subtype="PCM_16")
    size = data_path.stat().st_size
    with moto_s3("audio") as endpoint:
        import boto3

        boto3.client("s3", endpoint_url=endpoint).upload_file(str(data_path), "audio", "long.wav")
        proxy = CountingProxy(endpoint)
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        table = manifest_rows(tmp_path, ["s3://audio/long.wav"], [len(recording) / RATE])
        read = {}
        for segment in ("vad", "pauses"):
            before = proxy.received
            decode_rows(model, table, LongAudioConfig(chunk_s=10.0, overlap_s=2.0, segment=segment))
            read[segment] = (proxy.received - before) / size
        proxy.close()
    assert read["vad"] <= 1.2 and read["pauses"] > 1.8, read
