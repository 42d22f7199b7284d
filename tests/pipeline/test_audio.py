from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from pipeline.audio import AudioError, decode_audio, load_audio


def encoded(samples: np.ndarray, rate: int, fmt: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt)
    return buffer.getvalue()


def test_stereo_is_mixed_down_and_resampled(tmp_path):
    t = np.arange(8000) / 8000
    left, right = np.sin(2 * np.pi * 440 * t), np.zeros_like(t)
    path = tmp_path / "s.flac"
    path.write_bytes(encoded(np.stack([left, right], axis=1), 8000, "FLAC"))
    audio = load_audio(str(path), 16000)
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(len(audio) - 16000) <= 1
    assert np.abs(audio).max() == pytest.approx(0.5, abs=0.02)  # mean of a full-scale and a silent channel


def test_offset_and_duration_slice():
    samples = np.arange(16000, dtype=np.float32) / 16000
    audio = decode_audio(encoded(samples, 16000, "WAV"), 16000, offset_s=0.25, duration_s=0.5)
    assert len(audio) == 8000
    assert audio[0] == pytest.approx(0.25, abs=1e-3)


@pytest.mark.parametrize("data, message", [
    (b"", "empty file"),
    (b"this is not audio at all" * 10, "not decodable audio"),
])
def test_bad_bytes(data, message):
    with pytest.raises(AudioError, match=message):
        decode_audio(data, 16000, name="x.wav")


def test_truncated_and_missing_files(tmp_path):
    data = encoded(np.zeros(16000, dtype=np.float32), 16000, "FLAC")
    with pytest.raises(AudioError, match="not decodable|no audio samples"):
        decode_audio(data[:40], 16000, name="cut.flac")
    with pytest.raises(AudioError, match="file not found"):
        load_audio(str(tmp_path / "missing.wav"), 16000)
    with pytest.raises(AudioError, match="past the end"):
        decode_audio(data, 16000, offset_s=5.0, name="short.flac")
