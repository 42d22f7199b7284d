"""A row's two lengths (`pipeline/io/audio.py`): what was decoded (`duration_s`, the segment a manifest's offset and
duration select) and the whole file's (`file_duration_s`), from its header or from where decoding found its end.

Before, only the first was known: a 2.4 s file listed with `duration` 0.24 decoded 0.24 s and said so, and nothing
could tell that the manifest cut the transcript short.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from pipeline.io.audio import decode_audio, load_audio, load_audio_batch

RATE = 16000


def encoded(seconds: float, fmt: str = "WAV") -> bytes:
    samples = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(RATE * seconds)) / RATE)).astype(np.float32)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, RATE, format=fmt)
    return buffer.getvalue()


def streamed_flac(seconds: float) -> bytes:
    """A FLAC whose STREAMINFO leaves its length open (total frames 0), as streaming encoders write it."""
    data = bytearray(encoded(seconds, "FLAC"))
    packed = int.from_bytes(data[18:26], "big")  # rate 20 bits, channels 3, bits 5, total frames 36
    data[18:26] = (packed >> 36 << 36).to_bytes(8, "big")
    return bytes(data)


@pytest.mark.parametrize("fmt", ["WAV", "FLAC"])
@pytest.mark.parametrize("offset_s, duration_s, decoded_s", [
    (0.0, None, 2.4),  # the whole file
    (0.0, 0.24, 0.24),  # a manifest duration ten times too short: decoded as it says, the file's length known
    (1.0, 0.5, 0.5),  # a segment
    (0.0, 5.0, 2.4),  # a manifest duration longer than the file: what is there
    (2.0, None, 0.4),  # from an offset to the end
])
def test_the_files_length_is_known_whatever_the_row_decodes(tmp_path, fmt, offset_s, duration_s, decoded_s):
    path = tmp_path / f"a.{fmt.lower()}"
    path.write_bytes(encoded(2.4, fmt))
    by_range = load_audio(str(path), RATE, offset_s, duration_s)  # a segment read by byte range
    from_bytes = decode_audio(path.read_bytes(), RATE, offset_s, duration_s)
    for audio in (by_range, from_bytes):
        assert audio.duration_s == pytest.approx(decoded_s, abs=1e-4)
        assert audio.file_duration_s == pytest.approx(2.4, abs=1e-4)


def test_a_header_that_leaves_the_length_open_tells_it_only_where_decoding_reaches_the_end():
    data = streamed_flac(1.0)
    assert decode_audio(data, RATE).file_duration_s == pytest.approx(1.0)
    assert decode_audio(data, RATE, offset_s=0.5).file_duration_s == pytest.approx(1.0)
    assert decode_audio(data, RATE, duration_s=3.0).file_duration_s == pytest.approx(1.0)  # past its end
    assert decode_audio(data, RATE, duration_s=0.25).file_duration_s is None  # a segment: the end is not reached


def test_rows_of_one_file_in_a_batch_each_know_its_length(tmp_path):
    path = tmp_path / "long.wav"
    path.write_bytes(encoded(3.0))
    loaded = load_audio_batch([str(path)] * 3, RATE, [0.0, 1.0, 2.5], [0.3, 1.0, 0.5], [None] * 3)
    assert [round(audio.duration_s, 4) for audio in loaded] == [0.3, 1.0, 0.5]
    assert [audio.file_duration_s for audio in loaded] == [pytest.approx(3.0)] * 3
