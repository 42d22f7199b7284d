from __future__ import annotations

import io
import os
import socket
import struct
import tempfile
import threading
import time
import tracemalloc

import fsspec
import numpy as np
import pytest
import soundfile
import soxr
from fsspec.spec import AbstractFileSystem

from pipeline.config import InputConfig
from pipeline.io import audio as audio_module
from pipeline.io import audio_read
from pipeline.io.audio import AudioError, LoadedAudio, decode_audio, load_audio, read_bytes

WAIT_S = 10.0  # the most any test waits on a thread: a broken bound fails the test instead of hanging it


def encoded(samples: np.ndarray, rate: int, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def tone(frequency_hz: float, rate: int, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * frequency_hz * np.arange(int(rate * seconds)) / rate)).astype(np.float32)


def peak_frequency_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def call_bounded(function, *args, **kwargs):
    """function(*args, **kwargs) in a thread, waited on for at most WAIT_S -> (result or AudioError, seconds)."""
    outcome: list = []

    def run():
        try:
            outcome.append(function(*args, **kwargs))
        except AudioError as error:
            outcome.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    assert outcome, f"still running after {WAIT_S} s"
    return outcome[0], time.monotonic() - started


def flac_with_total_frames(total_frames: int) -> bytes:
    """A 1 s FLAC at 16 kHz whose STREAMINFO says `total_frames` (0: the length is not said)."""
    data = bytearray(encoded(tone(440, 16000, 1.0), 16000, "FLAC"))
    packed = int.from_bytes(data[18:26], "big")  # rate 20 bits, channels 3, bits 5, total frames 36
    data[18:26] = ((packed >> 36 << 36) | total_frames).to_bytes(8, "big")
    return bytes(data)


# ---- what works: formats, rates, channels, slicing, resampling


def test_stereo_is_mixed_down_and_resampled(tmp_path):
    t = np.arange(8000) / 8000
    left, right = np.sin(2 * np.pi * 440 * t), np.zeros_like(t)
    path = tmp_path / "s.flac"
    path.write_bytes(encoded(np.stack([left, right], axis=1), 8000, "FLAC"))
    audio = load_audio(str(path), 16000)
    assert isinstance(audio, LoadedAudio)
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    assert abs(len(audio.samples) - 16000) <= 1
    assert np.abs(audio.samples).max() == pytest.approx(0.5, abs=0.02)  # mean of a full-scale and a silent channel
    assert (audio.duration_s, audio.source_rate, audio.channels) == (1.0, 8000, 2)


def test_offset_and_duration_slice():
    samples = np.arange(16000, dtype=np.float32) / 16000
    audio = decode_audio(encoded(samples, 16000, "WAV", "FLOAT"), 16000, offset_s=0.25, duration_s=0.5)
    np.testing.assert_array_equal(audio.samples, samples[4000:12000])
    assert audio.duration_s == 0.5


def test_duration_past_the_end_gives_what_is_there_and_measures_it():
    audio = decode_audio(encoded(tone(440, 16000, 1.0), 16000), 16000, offset_s=0.75, duration_s=2.0)
    assert len(audio.samples) == 4000 and audio.duration_s == 0.25


@pytest.mark.parametrize("frames, rate", [(12345, 8000), (16001, 16000), (7, 1000), (44100, 44100)])
def test_measured_duration_is_decoded_frames_over_the_source_rate(frames, rate):
    samples = np.linspace(-0.5, 0.5, frames, dtype=np.float32)
    audio = decode_audio(encoded(samples, rate, "FLAC"), 16000)
    assert audio.duration_s == frames / rate
    assert audio.source_rate == rate
    assert abs(len(audio.samples) - frames * 16000 / rate) <= 1


@pytest.mark.parametrize("fmt, subtype, rate, channels", [
    ("WAV", "PCM_16", 16000, 1),
    ("WAV", "PCM_U8", 8000, 1),
    ("WAV", "FLOAT", 22050, 2),
    ("WAV", "PCM_24", 44100, 6),
    ("FLAC", "PCM_16", 48000, 1),
    ("OGG", "VORBIS", 16000, 2),
    ("OGG", "OPUS", 48000, 1),
    ("MP3", "MPEG_LAYER_III", 16000, 1),
])
def test_formats_rates_and_channels_decode_to_the_tone_they_hold(fmt, subtype, rate, channels):
    source = np.repeat(tone(440, rate, 1.0)[:, None], channels, axis=1)
    audio = decode_audio(encoded(source, rate, fmt, subtype), 16000, name=f"tone.{fmt.lower()}")
    assert (audio.source_rate, audio.channels) == (rate, channels)
    assert audio.duration_s == pytest.approx(1.0, abs=0.01)
    assert abs(len(audio.samples) - 16000) <= 160
    assert peak_frequency_hz(audio.samples, 16000) == pytest.approx(440, abs=2)
    assert np.abs(audio.samples).max() == pytest.approx(0.5, abs=0.05)


def test_resampling_in_chunks_equals_soxr_in_one_call(monkeypatch):
    source = np.random.default_rng(0).uniform(-0.5, 0.5, 48000).astype(np.float32)
    monkeypatch.setattr(audio_module, "_CHUNK_VALUES", 1000)  # 48 chunks
    audio = decode_audio(encoded(source, 48000, "WAV", "FLOAT"), 16000)
    np.testing.assert_allclose(audio.samples, soxr.resample(source, 48000, 16000, quality="HQ"), atol=1e-6)


def test_mono_mixdown_is_the_mean_of_the_channels_in_chunks(monkeypatch):
    rng = np.random.default_rng(1)
    source = rng.uniform(-0.5, 0.5, (5000, 3)).astype(np.float32)
    monkeypatch.setattr(audio_module, "_CHUNK_VALUES", 999)  # 333 frames a chunk, the last one short
    audio = decode_audio(encoded(source, 16000, "WAV", "FLOAT"), 16000)
    np.testing.assert_allclose(audio.samples, source.mean(axis=1), atol=1e-7)


def test_channel_selection_takes_that_channel_only():
    source = np.stack([tone(300, 16000, 0.5), tone(700, 16000, 0.5), np.zeros(8000, np.float32)], axis=1)
    data = encoded(source, 16000, "WAV", "FLOAT")
    for channel in range(3):
        audio = decode_audio(data, 16000, channel=channel)
        np.testing.assert_array_equal(audio.samples, source[:, channel])
        assert audio.channels == 3
    mixed = decode_audio(data, 16000, channel=None)
    np.testing.assert_allclose(mixed.samples, source.mean(axis=1), atol=1e-7)


@pytest.mark.parametrize("channel, message", [
    (3, "channel 3 asked for, but the audio has 3 channel"),
    (-1, "channel -1 must be an integer >= 0"),
    (True, "channel True must be an integer >= 0"),
    ("left", "channel 'left' must be an integer"),
])
def test_a_channel_the_file_lacks_is_refused(channel, message):
    data = encoded(np.zeros((100, 3), np.float32), 16000)
    with pytest.raises(AudioError, match=message):
        decode_audio(data, 16000, channel=channel, name="three.wav")


def test_decoding_from_a_file_object_equals_decoding_its_bytes(tmp_path):
    data = encoded(tone(440, 22050, 0.3), 22050, "FLAC")
    path = tmp_path / "t.flac"
    path.write_bytes(data)
    with open(path, "rb") as handle:
        from_file = decode_audio(handle, 16000, name=str(path))
    np.testing.assert_array_equal(from_file.samples, decode_audio(data, 16000).samples)
    with open(path, "wb"), open(path, "rb") as handle, pytest.raises(AudioError, match="empty file"):
        decode_audio(handle, 16000, name=str(path))


def test_the_public_read_path_decodes_the_same(monkeypatch):
    """Where soundfile's libsndfile handle is not reachable, SoundFile.read does the decoding instead."""
    data = encoded(np.random.default_rng(2).uniform(-0.5, 0.5, (3000, 2)).astype(np.float32), 16000, "FLAC")
    direct = decode_audio(data, 16000).samples
    monkeypatch.setattr(audio_module, "_sf_lib", None)
    np.testing.assert_array_equal(decode_audio(data, 16000).samples, direct)


# ---- bad bytes


@pytest.mark.parametrize("data, message", [
    (b"", "empty file"),
    (b"this is not audio at all" * 10, r"not decodable audio \(Format not recognised"),
])
def test_bad_bytes(data, message):
    with pytest.raises(AudioError, match=message):
        decode_audio(data, 16000, name="x.wav")


def test_truncated_and_missing_files(tmp_path):
    data = encoded(np.zeros(16000, dtype=np.float32), 16000, "FLAC")
    with pytest.raises(AudioError, match="cut.flac: not decodable audio"):
        decode_audio(data[:40], 16000, name="cut.flac")
    with pytest.raises(AudioError, match="file not found"):
        load_audio(str(tmp_path / "missing.wav"), 16000)
    with pytest.raises(AudioError, match=r"offset 5.000 s is past the end \(1.000 s\)"):
        decode_audio(data, 16000, offset_s=5.0, name="short.flac")


@pytest.mark.parametrize("fmt, cut_bytes, message", [
    ("FLAC", 200, "no audio frames (header only or truncated)"),
    ("WAV", 44, "no audio frames (header only or truncated)"),
])
def test_header_only_files_say_so(fmt, cut_bytes, message):
    data = encoded(tone(440, 16000, 1.0), 16000, fmt)[:cut_bytes]
    with pytest.raises(AudioError) as caught:
        decode_audio(data, 16000, name=f"header_only.{fmt.lower()}")
    assert str(caught.value) == f"header_only.{fmt.lower()}: {message}"


def test_a_flac_cut_in_the_middle_says_where():
    data = encoded(tone(440, 16000, 1.0), 16000, "FLAC")
    with pytest.raises(AudioError, match=r"cut.flac: corrupt or truncated after 0\.\d+ s") as caught:
        decode_audio(data[:len(data) // 2], 16000, name="cut.flac")
    assert "psf_fseek" not in str(caught.value)
    with pytest.raises(AudioError, match="cannot reach offset 0.900 s: the audio ends before it, or is truncated"):
        decode_audio(data[:len(data) // 2], 16000, offset_s=0.9, name="cut.flac")


def test_a_flac_that_does_not_say_its_length_decodes_whole():
    """A streamed FLAC (total frames 0 in its header) decodes to the end: no "Internal psf_fseek() failed"."""
    audio = decode_audio(flac_with_total_frames(0), 16000, name="streamed.flac")
    assert audio.duration_s == 1.0 and len(audio.samples) == 16000
    sliced = decode_audio(flac_with_total_frames(0), 16000, offset_s=0.5, name="streamed.flac")
    assert sliced.duration_s == 0.5
    with pytest.raises(AudioError, match=r"decodes to more than input.max_row_duration_s \(0.5 s"):
        decode_audio(flac_with_total_frames(0), 16000, limits=InputConfig(max_row_duration_s=0.5))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_infinite_samples_are_refused(value):
    samples = tone(440, 16000, 1.0)
    samples[8000] = value
    data = encoded(samples, 16000, "WAV", "FLOAT")
    with pytest.raises(AudioError, match=r"nan.wav: NaN or infinite samples \(the first at 0.500 s\)"):
        decode_audio(data, 16000, name="nan.wav")
    with pytest.raises(AudioError, match="NaN or infinite samples"):  # mixed into a stereo file's mean
        decode_audio(encoded(np.stack([samples, samples], axis=1), 16000, "WAV", "FLOAT"), 16000, name="nan.wav")
    assert len(decode_audio(data, 16000, duration_s=0.4).samples) == 6400  # the range before it is fine


def test_messages_never_carry_an_object_repr(tmp_path):
    flac = encoded(tone(440, 16000, 1.0), 16000, "FLAC")
    bad = [b"garbage" * 40, b"RIFF\x00\x00\x00\x00WAVEjunk" + bytes(2000), flac[:40], flac[:200], flac[:900],
           b"OggS" + bytes(300), b"\xff\xfb" + bytes(300), encoded(tone(440, 16000, 0.1), 16000)[:30]]
    messages = []
    for data in bad:
        with pytest.raises(AudioError) as caught:
            decode_audio(data, 16000, name="bad.audio")
        messages.append(str(caught.value))
        with pytest.raises(AudioError) as caught:
            decode_audio(io.BytesIO(data), 16000, name="bad.audio")
        messages.append(str(caught.value))
    for message in messages:
        assert message.startswith("bad.audio: ") and " at 0x" not in message and "<_io" not in message, message
    assert "not a regular file" not in " ".join(messages)  # libsndfile's words for "no MP3 stream" are replaced


# ---- bounds


def test_a_header_claiming_1_hz_is_refused_before_decoding():
    """27,000 frames at 1 Hz would decode to 7.5 hours at 16 kHz (1.7 GB)."""
    data = encoded(np.zeros(27_000, np.float32), 1, "WAV")
    tracemalloc.start()
    try:
        with pytest.raises(AudioError) as caught:
            decode_audio(data, 16000, name="one_hz.wav")
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value) == ("one_hz.wav: header says 1 Hz; below the minimum 1000 Hz "
                                 "(input.min_sample_rate, --min-sample-rate)")
    assert peak_bytes < 1 << 20
    patched = bytearray(encoded(np.zeros(27_000, np.float32), 16000))
    patched[24:28] = struct.pack("<I", 999)  # the sample rate field of a 16 kHz file
    with pytest.raises(AudioError, match="header says 999 Hz; below the minimum 1000 Hz"):
        decode_audio(bytes(patched), 16000, name="patched.wav")
    audio = decode_audio(bytes(patched), 16000, limits=InputConfig(min_sample_rate=999))
    assert audio.source_rate == 999 and audio.duration_s == 27_000 / 999


def test_a_wav_header_declaring_4_gb_on_a_small_body_costs_only_the_body():
    """The data chunk says 0xFFFFFFF0 bytes (a day of float audio); 1 s is there, and 1 s is what comes out."""
    data = bytearray(encoded(tone(440, 16000, 1.0), 16000, "WAV", "FLOAT"))
    at = data.index(b"data")
    data[at + 4:at + 8] = struct.pack("<I", 0xFFFFFFF0)
    tracemalloc.start()
    try:
        audio = decode_audio(bytes(data), 16000, name="huge_frames.wav")
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert audio.duration_s == 1.0 and len(audio.samples) == 16000
    assert peak_bytes < 1 << 20


def test_a_flac_header_declaring_2_to_the_36_frames_is_refused_before_decoding():
    tracemalloc.start()
    try:
        with pytest.raises(AudioError) as caught:
            decode_audio(flac_with_total_frames((1 << 36) - 1), 16000, name="liar.flac")
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (
        "liar.flac: the header declares 4294967 s (68719476735 frames at 16000 Hz) from offset 0 s, longer than "
        "input.max_row_duration_s (10800 s, --max-row-duration-s)")
    assert peak_bytes < 1 << 20
    with pytest.raises(AudioError, match="the header declares 1 s"):  # the bound, not the lie, decides
        decode_audio(flac_with_total_frames(16000), 16000, limits=InputConfig(max_row_duration_s=0.9))
    assert decode_audio(flac_with_total_frames(16000), 16000, limits=InputConfig(max_row_duration_s=1.0)).duration_s


def test_a_duration_of_1e12_is_refused_before_anything_is_read(tmp_path):
    data = encoded(tone(440, 16000, 1.0), 16000)
    with pytest.raises(AudioError) as caught:
        decode_audio(data, 16000, duration_s=1e12, name="a.wav")
    assert str(caught.value) == ("a.wav: duration 1e+12 s is longer than input.max_row_duration_s (10800 s, "
                                 "--max-row-duration-s)")
    with pytest.raises(AudioError, match="duration 1e\\+12 s is longer"):  # a missing file: nothing was read
        load_audio(str(tmp_path / "missing.wav"), 16000, duration_s=1e12)
    assert decode_audio(data, 16000, duration_s=10800.0).duration_s == 1.0


@pytest.mark.parametrize("offset_s, duration_s, message", [
    (float("nan"), None, "a.wav: offset nan must be a finite number of seconds >= 0"),
    (-1.0, None, "a.wav: offset -1.0 must be a finite number of seconds >= 0"),
    (float("inf"), None, "a.wav: offset inf must be a finite number of seconds >= 0"),
    (0.0, float("nan"), "a.wav: duration nan must be a finite number of seconds >= 0"),
    (0.0, -2.0, "a.wav: duration -2.0 must be a finite number of seconds >= 0"),
    (1e300, None, "a.wav: offset 1e+300 s is past the end (0.100 s)"),
])
def test_bad_offsets_and_durations_are_refused(offset_s, duration_s, message):
    data = encoded(tone(440, 16000, 0.1), 16000)
    with pytest.raises(AudioError) as caught:
        decode_audio(data, 16000, offset_s, duration_s, name="a.wav")
    assert str(caught.value) == message


# ---- local files: kinds, names, size


def test_a_fifo_is_refused_at_once_without_being_opened(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo.wav"
    os.mkfifo(fifo)  # nothing writes to it: opening it for reading would block forever

    def no_open(*args, **kwargs):
        raise AssertionError("opened a FIFO")

    monkeypatch.setattr(audio_read.os, "open", no_open)
    try:
        outcome, seconds = call_bounded(load_audio, str(fifo), 16000, limits=InputConfig(read_timeout_s=WAIT_S * 3))
    finally:
        monkeypatch.undo()
        try:  # should a reader be stuck in open(), a writer showing up releases it
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert isinstance(outcome, AudioError)
    assert str(outcome) == f"{fifo}: not a regular file (FIFO)"
    assert seconds < 2.0


def test_sockets_devices_and_directories_are_refused(tmp_path):
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:  # a socket path must be short
        path = os.path.join(folder, "s.wav")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        try:
            outcome, _ = call_bounded(load_audio, path, 16000)
        finally:
            server.close()
    assert str(outcome) == f"{path}: not a regular file (socket)"
    with pytest.raises(AudioError, match=r"/dev/null: not a regular file \(character device\)"):
        load_audio("/dev/null", 16000)
    with pytest.raises(AudioError, match=r"not a regular file \(directory\)"):
        load_audio(str(tmp_path), 16000)


@pytest.mark.parametrize("file_name", ["x::y.wav", "a#b [1].wav", "naïve café ü.wav", "[1].wav", "s3:x.wav"])
def test_local_names_are_taken_literally(tmp_path, file_name):
    samples = tone(330, 16000, 0.25)
    path = tmp_path / file_name
    path.write_bytes(encoded(samples, 16000, "WAV", "FLOAT"))
    np.testing.assert_array_equal(load_audio(str(path), 16000).samples, samples)
    np.testing.assert_array_equal(load_audio(f"file://{path}", 16000).samples, samples)
    with pytest.raises(AudioError) as caught:
        load_audio(str(tmp_path / ("missing " + file_name)), 16000)
    assert str(caught.value) == f"{tmp_path / ('missing ' + file_name)}: file not found"


def test_a_local_file_over_the_size_cap_is_refused_without_being_opened(tmp_path, monkeypatch):
    path = tmp_path / "big.wav"
    data = encoded(tone(440, 16000, 1.0), 16000)
    path.write_bytes(data)
    assert load_audio(str(path), 16000, limits=InputConfig(max_file_bytes=len(data))).duration_s == 1.0

    def no_open(*args, **kwargs):
        raise AssertionError("opened a file over the size cap")

    monkeypatch.setattr(audio_read.os, "open", no_open)
    with pytest.raises(AudioError) as caught:
        load_audio(str(path), 16000, limits=InputConfig(max_file_bytes=len(data) - 1))
    assert str(caught.value) == (f"{path}: {len(data)} bytes, more than input.max_file_bytes ({len(data) - 1} "
                                 f"bytes, --max-file-bytes)")


# ---- remote files (fsspec): size, timeout


def test_a_remote_file_over_the_size_cap_is_refused(monkeypatch):
    memory = fsspec.filesystem("memory")
    data = encoded(tone(440, 16000, 0.5), 16000, "FLAC")
    memory.pipe("/audio-test/a b#c.flac", data)
    try:
        uri = "memory://audio-test/a b#c.flac"
        assert load_audio(uri, 16000, limits=InputConfig(max_file_bytes=len(data))).duration_s == 0.5
        with pytest.raises(AudioError) as caught:
            load_audio(uri, 16000, limits=InputConfig(max_file_bytes=len(data) - 1))
        assert str(caught.value) == (f"{uri}: {len(data)} bytes, more than input.max_file_bytes ({len(data) - 1} "
                                     f"bytes, --max-file-bytes)")
        with pytest.raises(AudioError, match="memory://audio-test/none.flac: file not found"):
            load_audio("memory://audio-test/none.flac", 16000)
    finally:
        memory.rm("/audio-test", recursive=True)


class _EndlessFile(io.RawIOBase):
    """An endless stream of zero bytes that counts what was taken."""

    def __init__(self) -> None:
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        assert size > 0, "an unbounded read of an endless file"
        self.bytes_read += size
        return bytes(size)


class _EndlessFileSystem(AbstractFileSystem):
    """A backend that cannot tell sizes, serving endless files."""

    protocol = "endless-audio-test"
    opened: list[_EndlessFile] = []

    def info(self, path, **kwargs):
        raise NotImplementedError("this backend cannot tell sizes")

    def _open(self, path, mode="rb", **kwargs):
        self.opened.append(_EndlessFile())
        return self.opened[-1]


def test_a_remote_file_of_unknown_size_is_read_to_the_cap_plus_one_byte_and_no_further():
    fsspec.register_implementation(_EndlessFileSystem.protocol, _EndlessFileSystem, clobber=True)
    limits = InputConfig(max_file_bytes=3 * audio_read._READ_CHUNK_BYTES + 5)
    uri = "endless-audio-test://bucket/a.wav"
    with pytest.raises(AudioError) as caught:
        read_bytes(uri, limits)
    assert str(caught.value) == (f"{uri}: more than input.max_file_bytes ({limits.max_file_bytes} bytes, "
                                 f"--max-file-bytes)")
    assert _EndlessFileSystem.opened[-1].bytes_read == limits.max_file_bytes + 1


class _StallingFile(io.RawIOBase):
    """A read that hangs until released, like a stalled network read."""

    def __init__(self, release: threading.Event) -> None:
        self.release, self.reads, self.closed_event = release, 0, threading.Event()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        self.release.wait(WAIT_S * 3)
        return bytes(min(size, 1024))

    def close(self) -> None:
        self.closed_event.set()
        super().close()


class _StallingFileSystem(AbstractFileSystem):
    protocol = "stalling-audio-test"
    release = threading.Event()
    opened: list[_StallingFile] = []

    def info(self, path, **kwargs):
        return {"name": path, "size": 10 << 20, "type": "file"}

    def _open(self, path, mode="rb", **kwargs):
        self.opened.append(_StallingFile(self.release))
        return self.opened[-1]


def test_a_stalled_read_times_out_and_does_not_hold_up_the_next_file(tmp_path):
    fsspec.register_implementation(_StallingFileSystem.protocol, _StallingFileSystem, clobber=True)
    uri = "stalling-audio-test://bucket/a.wav"
    good = tmp_path / "good.wav"
    good.write_bytes(encoded(tone(440, 16000, 0.5), 16000))
    try:
        outcome, seconds = call_bounded(load_audio, uri, 16000, limits=InputConfig(read_timeout_s=0.5))
        assert str(outcome) == f"{uri}: read timed out after 0.5 s (input.read_timeout_s, --read-timeout-s)"
        assert 0.5 <= seconds < 2.0
        # the stalled thread is abandoned, still blocked: the next file gets another thread at once
        outcome, seconds = call_bounded(load_audio, str(good), 16000)
        assert isinstance(outcome, LoadedAudio) and outcome.duration_s == 0.5
        assert seconds < 2.0
    finally:
        _StallingFileSystem.release.set()
    stalled = _StallingFileSystem.opened[-1]
    assert stalled.closed_event.wait(WAIT_S)
    assert stalled.reads == 1  # once released, the abandoned fetch stopped instead of reading on


def test_fetch_threads_are_reused_between_files(tmp_path):
    path = tmp_path / "a.wav"
    path.write_bytes(encoded(tone(440, 16000, 0.1), 16000))
    load_audio(str(path), 16000)

    def fetch_threads() -> int:
        return sum(thread.name == "audio-fetch" for thread in threading.enumerate())

    before = fetch_threads()
    for _ in range(20):
        load_audio(str(path), 16000)
    assert fetch_threads() == before
