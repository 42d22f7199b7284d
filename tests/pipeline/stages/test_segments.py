"""Voice-activity segmentation of long rows: silero's probabilities and spans reproduced without torch, the cap at the
quietest window, segments on whole encoder frames, and the job's stages on recordings with non-speech in them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import soundfile

from pipeline import schema
from pipeline.config import BUNDLED_MANIFEST, LongAudioConfig
from pipeline.io.manifest import read_manifest
from pipeline.io.vad import WINDOW_SAMPLES, SileroVad, silero_model_path
from pipeline.stages.audio import LoadAudio
from pipeline.stages.chunks import Chunk, ChunkTokens, merge_compact_ctc, merge_tokens, segment_chunks
from pipeline.stages.segments import SegmentRules, cap_spans, plan_segments, speech_spans

RATE = 16000
REPOSITORY = Path(__file__).resolve().parents[3]


def silero_utils():
    """silero's own utils_vad, imported without keeping its process-wide torch.set_num_threads(1)."""
    import torch

    threads = torch.get_num_threads()
    from silero_vad import utils_vad

    torch.set_num_threads(threads)
    return utils_vad


@pytest.fixture(scope="module")
def utterances():
    entries = list(read_manifest(str(BUNDLED_MANIFEST)))[:6]
    return [(soundfile.read(e[schema.AUDIO_FILEPATH], dtype="float32")[0], e[schema.REFERENCE_TEXT]) for e in entries]


def joined(utterances, gaps_s, rng=None):
    """Utterances with quiet noise of `gaps_s` between and before them: (samples, [(start_s, end_s)] of speech)."""
    rng = rng or np.random.default_rng(0)
    pieces, spans, position = [], [], 0
    for (samples, _), gap_s in zip(utterances, gaps_s):
        pause = (1e-3 * rng.standard_normal(int(gap_s * RATE))).astype(np.float32)
        pieces += [pause, samples]
        spans.append(((position + len(pause)) / RATE, (position + len(pause) + len(samples)) / RATE))
        position += len(pause) + len(samples)
    return np.concatenate(pieces + [np.zeros(RATE // 2, np.float32)]), spans


def test_probabilities_are_silero_onnx_wrappers_window_by_window(utterances):
    samples, _ = joined(utterances[:3], [0.5, 1.0, 0.7])
    utils = silero_utils()
    import torch

    wrapper = utils.OnnxWrapper(str(silero_model_path()), force_onnx_cpu=True)
    expected = []
    for start in range(0, len(samples), WINDOW_SAMPLES):
        window = torch.nn.functional.pad(torch.from_numpy(samples[start: start + WINDOW_SAMPLES]),
                                         (0, WINDOW_SAMPLES - len(samples[start: start + WINDOW_SAMPLES])))
        expected.append(wrapper(window, RATE).item())
    ours = SileroVad(stream_s=1000.0)([samples, samples[: len(samples) // 2]], RATE)  # two rows in one batch
    np.testing.assert_allclose(ours[0], expected, atol=1e-5)
    # the shorter row: the same windows but its last, which is zero-padded where the longer one has samples
    np.testing.assert_allclose(ours[1][:-1], expected[: len(ours[1]) - 1], atol=1e-5)


def test_parallel_streams_barely_change_the_segments(utterances):
    samples, _ = joined(utterances, [0.5, 0.9, 0.6, 1.2, 0.4, 0.8])
    rules = SegmentRules()
    whole = plan_segments(SileroVad(stream_s=1000.0)([samples], RATE)[0], rules, len(samples), RATE)
    streamed = plan_segments(SileroVad(stream_s=4.0)([samples], RATE)[0], rules, len(samples), RATE)
    assert len(whole) == len(streamed) == 6
    assert max(abs(a - b) for x, y in zip(whole, streamed) for a, b in zip(x, y)) <= 2 * WINDOW_SAMPLES


@pytest.mark.parametrize("seed", range(6))
def test_spans_are_silero_get_speech_timestamps(seed):
    rng = np.random.default_rng(seed)
    # runs of speech-like and silence-like windows with noise, and a few borderline values
    runs = rng.integers(1, 40, 30)
    probabilities = np.concatenate([np.clip(rng.normal(0.85 if k % 2 else 0.1, 0.2, n), 0, 1)
                                    for k, n in enumerate(runs)]).astype(np.float32)
    num_samples = len(probabilities) * WINDOW_SAMPLES - int(rng.integers(0, WINDOW_SAMPLES))
    rules = SegmentRules(threshold=float(rng.uniform(0.3, 0.7)), min_speech_s=0.25, min_silence_s=0.1 * (seed % 4),
                         pad_s=0.03 * (seed % 3), max_segment_s=1000.0)
    expected = silero_utils().get_speech_timestamps_from_probs(
        list(probabilities), threshold=rules.threshold, min_speech_duration_ms=rules.min_speech_s * 1000,
        min_silence_duration_ms=rules.min_silence_s * 1000, speech_pad_ms=rules.pad_s * 1000,
        audio_length_samples=num_samples)
    assert speech_spans(probabilities, rules, num_samples) == [(s["start"], s["end"]) for s in expected]


def test_a_long_span_is_cut_at_its_quietest_window():
    w = WINDOW_SAMPLES
    probabilities = np.full(100, 0.9)
    probabilities[[20, 70, 80]] = [0.1, 0.3, 0.2]  # 20 is too early for the first cut (half the cap: 30)
    # the first cut: the lowest in windows 30-60 (all alike: the first); the rest, 70 windows: the lowest in 60-90
    assert cap_spans([(0, 100 * w)], probabilities, 60 * w) == [(0, 30 * w), (30 * w, 80 * w), (80 * w, 100 * w)]
    probabilities[45] = 0.05
    assert cap_spans([(0, 100 * w)], probabilities, 60 * w) == [(0, 45 * w), (45 * w, 100 * w)]
    assert cap_spans([(0, 50 * w)], probabilities, 60 * w) == [(0, 50 * w)]


def test_segments_are_padded_on_a_10_ms_grid_capped_and_pieces_meet():
    probabilities = np.zeros(2000, np.float32)
    probabilities[100:150] = 0.9  # 1.6 s of speech
    probabilities[160:170] = 0.9  # 0.32 s after a 0.32 s gap: merged with min_silence 0.4, apart with 0.2
    probabilities[400:1500] = 0.8  # 35 s: capped
    probabilities[1000] = 0.6
    probabilities[1300] = 0.55
    rules = SegmentRules(threshold=0.5, min_silence_s=0.4, pad_s=0.1, max_segment_s=20.0)
    for rate in (16000, 8000, 22050):
        num_samples = round(2000 * WINDOW_SAMPLES * rate / RATE)
        segments = plan_segments(probabilities, rules, num_samples, rate)
        grid = rate / 100
        assert all(abs(v / grid - round(v / grid)) < 1e-6 for segment in segments for v in segment), segments
        assert all(end - start <= 20.0 * rate for start, end in segments)
        seconds = [(start / rate, end / rate) for start, end in segments]
        assert seconds[0] == pytest.approx((100 * 0.032 - 0.1, 170 * 0.032 + 0.1), abs=0.011)
        assert seconds[1][0] == pytest.approx(400 * 0.032 - 0.1, abs=0.011)
        assert seconds[1][1] == seconds[2][0] == pytest.approx(1000 * 0.032, abs=0.011)  # the quietest in [10, 20] s
        assert seconds[-1][1] == pytest.approx(1500 * 0.032 + 0.1, abs=0.011)
    apart = plan_segments(probabilities, SegmentRules(min_silence_s=0.2, pad_s=0.1), 2000 * WINDOW_SAMPLES, RATE)
    assert len(apart) == len(segments) + 1


def test_segment_chunks_start_and_end_on_whole_encoder_frames():
    frame = 640
    chunks = segment_chunks([(1000, 5000), (5100, 9000), (20000, 20001), (30000, 40000)], 39000, frame)
    assert chunks == [Chunk(640, 5120, 1, 8), Chunk(5120, 9600, 8, 15), Chunk(19840, 20480, 31, 32),
                      Chunk(29440, 39000, 46, 61)]
    for chunk in chunks:  # a chunk's frame t is the recording's frame start_frame + t
        assert chunk.start_sample == chunk.start_frame * frame
    assert segment_chunks([], 1000, frame) == []


def test_chunks_with_gaps_merge_at_the_recordings_frames():
    word_start = np.array([False, True, True, False])
    chunks = [Chunk(0, 640 * 10, 0, 10), Chunk(640 * 30, 640 * 40, 30, 40)]
    merged = merge_tokens(chunks, [ChunkTokens([1, 3], [2, 3], None, None, -1.0),
                                   ChunkTokens([2, 3, 1], [0, 1, 9], None, None, -2.0)], word_start)
    assert merged.tokens == [1, 3, 2, 3, 1]
    assert merged.frame_indices == [2, 3, 30, 31, 39]
    values = [np.ones((2, 4), np.float16), 2 * np.ones((3, 4), np.float16)]
    log_probs, frames = merge_compact_ctc(chunks, [(values[0], np.array([1, 5])), (values[1], np.array([0, 2, 9]))])
    assert frames.tolist() == [1, 5, 30, 32, 39] and log_probs.shape == (5, 4)


def test_loading_the_vad_keeps_torchs_threads_and_the_audio_worker_torch_free(utterances, tmp_path):
    samples, _ = joined(utterances[:4], [0.5, 1.0, 0.7, 0.6])
    path = tmp_path / "long.flac"
    soundfile.write(path, samples, RATE)
    script = textwrap.dedent(f"""
        import json, sys
        import pyarrow as pa
        from pipeline import schema
        from pipeline.config import LongAudioConfig
        from pipeline.stages.audio import LoadAudio
        row = {{name: None for name in schema.INPUT_COLUMNS}}
        row.update(utterance_id="u", manifest="m", line=1, audio_filepath={str(path)!r}, status="ok", error="")
        stage = LoadAudio(16000, long_audio=LongAudioConfig(chunk_s=5.0, overlap_s=1.0))
        out = stage(pa.Table.from_pylist([row], schema=schema.INPUT_SCHEMA))
        workers_torch = "torch" in sys.modules
        import torch
        torch.set_num_threads(3)
        from pipeline.io.vad import SileroVad
        vad = SileroVad()
        vad([out.column(schema.SAMPLES)[0].values.to_numpy()], 16000)
        print(json.dumps([workers_torch, "silero_vad" in sys.modules, torch.get_num_threads(),
                          stage._vad.session.get_session_options().intra_op_num_threads,
                          len(out.column(schema.SPEECH_SEGMENTS)[0].as_py())]))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=str(REPOSITORY))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [False, False, 3, 1, 4]


def test_a_vad_that_cannot_load_is_refused_or_falls_back_to_pauses(tmp_path):
    fake = tmp_path / "site" / "silero_vad"  # a silero-vad without its model file, found first
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('never imported')\n")
    script = textwrap.dedent("""
        import json, logging
        import numpy as np, pyarrow as pa, soundfile
        from pipeline import schema
        from pipeline.config import TranscribeJobConfig, LongAudioConfig
        from pipeline.preflight import PreflightError, check_transcription
        from pipeline.stages.audio import LoadAudio
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        said = []
        for segment in ("vad", "auto", "pauses"):
            try:
                check_transcription(TranscribeJobConfig(long_audio=LongAudioConfig(segment=segment)))
                said.append("ok")
            except PreflightError as error:
                said.append(str(error))
        soundfile.write("long.wav", (0.01 * np.random.default_rng(0).standard_normal(16000 * 12)).astype("float32"),
                        16000)
        row = {name: None for name in schema.INPUT_COLUMNS}
        row.update(utterance_id="u", manifest="m", line=1, audio_filepath="long.wav", status="ok", error="")
        table = pa.Table.from_pylist([row], schema=schema.INPUT_SCHEMA)
        for segment in ("auto", "vad"):
            out = LoadAudio(16000, long_audio=LongAudioConfig(chunk_s=5.0, overlap_s=1.0, segment=segment))(table)
            said.append([out.column(schema.STATUS)[0].as_py(), out.column(schema.ENERGIES)[0].as_py() is not None,
                         out.column(schema.ERROR)[0].as_py()])
        print(json.dumps(said))
    """)
    environment = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPOSITORY}"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=str(tmp_path), env=environment)
    assert result.returncode == 0, result.stderr
    vad, auto, pauses, auto_row, vad_row = json.loads(result.stdout.splitlines()[-1])
    assert vad.startswith("--segment vad: silero-vad is installed without its data/silero_vad.onnx")
    assert auto == pauses == "ok"
    assert result.stderr.count("--segment auto: the VAD cannot load") == 1  # said once, by the driver
    assert auto_row == ["ok", True, ""]  # cut at pauses instead
    assert vad_row[0] == "error" and "--segment vad: silero-vad is installed without" in vad_row[2]


def test_a_long_row_already_in_memory_passes_on_its_speech_never_a_read_again(utterances, tmp_path):
    """A shard's member (`in_memory`, pipeline/stages/shards.py) cannot be read again: cut by voice activity, its
    speech goes on inline like a fetched row's; cut at pauses, its samples go on whole."""
    import io

    from pipeline.io.audio import AudioBytes

    samples, _ = joined(utterances[:4], [0.5, 1.0, 0.7, 0.6])
    encoded = io.BytesIO()
    soundfile.write(encoded, samples, RATE, format="WAV")
    row = {name: None for name in schema.INPUT_COLUMNS}
    row.update(utterance_id="u", manifest="m", line=1, audio_filepath="shard.tar member x.wav", status="ok", error="")
    table = pa.Table.from_pylist([row], schema=schema.INPUT_SCHEMA)
    member = [AudioBytes("shard.tar member x.wav", encoded.getvalue())]
    for segment in ("vad", "pauses"):
        out = LoadAudio(RATE, long_audio=LongAudioConfig(chunk_s=5.0, overlap_s=1.0, segment=segment))(table, member)
        assert out.column(schema.STATUS).to_pylist() == ["ok"] and out.column(schema.CHUNKED_READ).to_pylist() == [
            False]
        carried = len(out.column(schema.SAMPLES)[0].values)
        if segment == "vad":
            assert len(out.column(schema.SPEECH_SEGMENTS)[0].as_py()) == 4 and carried < 0.9 * len(samples)
        else:
            assert carried == len(samples) and out.column(schema.SPEECH_SEGMENTS).to_pylist() == [None]
