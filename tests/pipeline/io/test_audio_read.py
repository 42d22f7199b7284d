"""Segments (offset + duration) read by byte range, and the rows of one batch sharing one open of their file
(`load_audio_batch`).

The oracle is the whole file decoded from its bytes (`decode_audio`, the path every whole-file row takes):
a segment read by range must equal its slice sample for sample. Bytes are counted where they cross the wire:
a counting HTTP proxy in front of moto (`tests/cluster/fault_proxy.py`) adds up the bodies of the GETs.
"""

from __future__ import annotations

import io
import os
import struct
import threading
import time
import tracemalloc
from http.server import ThreadingHTTPServer
from pathlib import Path

import fsspec
import numpy as np
import pytest
import soundfile
from fsspec.spec import AbstractFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import InputConfig
from pipeline.io import audio_read
from pipeline.io.audio import AudioError, LoadedAudio, decode_audio, load_audio, load_audio_batch
from tests.pipeline.io.test_audio_fuzz import LIMITS as FUZZ_LIMITS
from tests.pipeline.io.test_audio_fuzz import SEEDS
from tests.support.s3_server import moto_s3

SAMPLES = Path(__file__).resolve().parents[3] / "samples"
RATE = 16000
WAIT_S = 10.0  # the most a test waits on a read: a broken bound fails the test instead of hanging it


def concatenated_samples(seconds: float) -> np.ndarray:
    """int16 speech: the bundled utterances joined, repeated to `seconds`."""
    parts = [soundfile.read(path, dtype="int16")[0] for path in sorted(SAMPLES.glob("*.flac"))]
    joined = np.concatenate(parts)
    return np.tile(joined, int(np.ceil(seconds * RATE / len(joined))))[:int(seconds * RATE)]


def encoded(samples: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, Path]:
    """Three minutes of speech as FLAC and WAV (PCM 16), and one minute as Ogg Vorbis (a format read whole)."""
    folder = tmp_path_factory.mktemp("recordings")
    speech = concatenated_samples(180.0)
    files = {"FLAC": folder / "recording.flac", "WAV": folder / "recording.wav", "OGG": folder / "recording.ogg"}
    files["FLAC"].write_bytes(encoded(speech, RATE, "FLAC"))
    files["WAV"].write_bytes(encoded(speech, RATE, "WAV", "PCM_16"))
    files["OGG"].write_bytes(encoded(speech[:60 * RATE], RATE, "OGG", "VORBIS"))
    return files


def whole(path: Path) -> np.ndarray:
    return decode_audio(path.read_bytes(), RATE, name=str(path)).samples


def tiled_cuts(seconds: float, count: int) -> tuple[list[float], list[float]]:
    """`count` cuts tiling `seconds` of a recording, as Lhotse cuts a recording into segments."""
    step = seconds / count
    return [round(i * step, 6) for i in range(count)], [step] * count


# ---- what comes out: the slice of the whole file, sample for sample


@pytest.mark.parametrize("fmt", ["FLAC", "WAV"])
def test_segments_equal_slices_of_the_whole_decoded_file(recordings, fmt):
    path = recordings[fmt]
    reference = whole(path)
    frames = len(reference)
    cases = [(0.0, 2.5), (0.000063, 1.0), (61.3, 4.0), (99.99, 0.5), (177.5, 2.5),  # the last 2.5 s, exactly
             (178.9, 5.0),  # past the end: what is there, measured
             ((frames - 1) / RATE, 1.0), (150.0, None)]  # the last frame; from 150 s to the end
    for offset_s, duration_s in cases:
        loaded = load_audio(str(path), RATE, offset_s, duration_s)
        start = round(offset_s * RATE)
        stop = frames if duration_s is None else min(frames, start + round(duration_s * RATE))
        np.testing.assert_array_equal(loaded.samples, reference[start:stop], err_msg=f"{fmt} {offset_s} s")
        assert loaded.duration_s == (stop - start) / RATE
        assert (loaded.source_rate, loaded.channels) == (RATE, 1)


@pytest.mark.parametrize("fmt", ["FLAC", "WAV"])
def test_resampled_and_channel_segments_equal_the_in_memory_decode(tmp_path, fmt):
    """Resampling and channel selection of a range read equal those of the whole file's bytes."""
    speech = concatenated_samples(20.0)
    stereo = np.stack([speech, speech[::-1]], axis=1)
    path = tmp_path / f"stereo.{fmt.lower()}"
    path.write_bytes(encoded(stereo, RATE, fmt))
    data = path.read_bytes()
    for offset_s, duration_s, channel, rate in [(3.21, 2.0, None, 8000), (7.0, 3.3, 1, 22050), (19.5, 2.0, 0, RATE)]:
        loaded = load_audio(str(path), rate, offset_s, duration_s, channel)
        expected = decode_audio(data, rate, offset_s, duration_s, channel)
        np.testing.assert_array_equal(loaded.samples, expected.samples)
        assert (loaded.duration_s, loaded.channels) == (expected.duration_s, 2)


@pytest.mark.parametrize("fmt", ["FLAC", "WAV"])
def test_an_offset_past_the_end_gives_the_existing_message(recordings, fmt):
    path = recordings[fmt]
    for load in (lambda: load_audio(str(path), RATE, 500.0, 2.0),
                 lambda: _raise(load_audio_batch([str(path)], RATE, [500.0], [2.0], [None])[0])):
        with pytest.raises(AudioError) as caught:
            load()
        assert str(caught.value) == f"{path}: offset 500.000 s is past the end (180.000 s)"


def _raise(outcome):
    if isinstance(outcome, AudioError):
        raise outcome
    return outcome


def test_a_batch_equals_its_rows_loaded_one_by_one_in_its_order(recordings, tmp_path):
    """Rows of several files interleaved, unsorted, with whole rows and bad rows: each row gets what
    `load_audio` gives it alone, in the batch's order, and its own error."""
    flac, wav = str(recordings["FLAC"]), str(recordings["WAV"])
    missing = str(tmp_path / "missing.wav")
    rows = [(wav, 30.0, 2.0, None), (flac, 10.0, 1.5, None), (missing, 1.0, 1.0, None), (flac, 2.0, 3.0, None),
            (wav, 500.0, 1.0, None), (flac, 0.0, None, None), (wav, 3.0, 1.0, 0), (flac, float("nan"), 1.0, None),
            (wav, 30.0, 2.0, None), (flac, 170.0, None, None), (wav, 1.0, 2.0, 1)]
    uris, offsets, durations, channels = (list(column) for column in zip(*rows))
    outcomes = load_audio_batch(uris, RATE, offsets, durations, channels)
    assert len(outcomes) == len(rows)
    for row, outcome in zip(rows, outcomes):
        try:
            alone = load_audio(row[0], RATE, row[1], row[2], row[3])
        except AudioError as error:
            assert isinstance(outcome, AudioError) and str(outcome) == str(error), row
        else:
            assert isinstance(outcome, LoadedAudio), (row, outcome)
            np.testing.assert_array_equal(outcome.samples, alone.samples)
    assert [type(o).__name__ for o in outcomes] == ["LoadedAudio", "LoadedAudio", "AudioError", "LoadedAudio",
                                                   "AudioError", "LoadedAudio", "LoadedAudio", "AudioError",
                                                   "LoadedAudio", "LoadedAudio", "AudioError"]
    assert str(outcomes[2]) == f"{missing}: file not found"
    assert "channel 1 asked for, but the audio has 1 channel" in str(outcomes[10])


def test_many_cuts_of_one_local_file_open_it_once(recordings, monkeypatch):
    path = str(recordings["FLAC"])
    opened: list[str] = []
    real_open = audio_read.os.open

    def counting_open(name, *args, **kwargs):
        opened.append(name)
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(audio_read.os, "open", counting_open)
    offsets, durations = tiled_cuts(48.0, 16)
    outcomes = load_audio_batch([path] * 16, RATE, offsets[::-1], durations, [None] * 16)
    assert opened == [path]
    reference = whole(recordings["FLAC"])
    for offset_s, outcome in zip(offsets[::-1], outcomes):
        start = round(offset_s * RATE)
        np.testing.assert_array_equal(outcome.samples, reference[start:start + 3 * RATE])


# ---- S3 (moto): what 100 cuts of a recording cost on the wire


@pytest.fixture(scope="module")
def counted_s3():
    """moto S3 behind a counting proxy on 127.0.0.1; yields (boto3 client of moto, the proxy's counter)."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from tests.cluster import fault_proxy

    counter = {"get_bytes": 0, "gets": 0}

    class CountingHandler(fault_proxy.Handler):
        def send_header(self, keyword: str, value: str) -> None:
            if self.command == "GET" and keyword.lower() == "content-length":  # the body the proxy then sends
                counter["get_bytes"] += int(value)
                counter["gets"] += 1
            super().send_header(keyword, value)

    with moto_s3("audio") as endpoint:
        import boto3

        host, port = endpoint.removeprefix("http://").rsplit(":", 1)
        fault_proxy.UPSTREAM_HOST, fault_proxy.UPSTREAM_PORT = host, int(port)
        fault_proxy.MODE_FILE = str(Path(__file__).parent / "no-such-mode-file")  # unreadable: "pass"
        server = ThreadingHTTPServer(("127.0.0.1", 0), CountingHandler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{server.server_address[1]}"  # moto_s3 restores it
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        try:
            yield boto3.client("s3", endpoint_url=endpoint), counter
        finally:
            server.shutdown()
            server.server_close()


@pytest.mark.parametrize("fmt", ["FLAC", "WAV"])
def test_100_cuts_of_an_s3_recording_fetch_at_most_1_2x_its_bytes(recordings, counted_s3, fmt):
    client, counter = counted_s3
    path = recordings[fmt]
    key = f"long/recording.{fmt.lower()}"
    client.put_object(Bucket="audio", Key=key, Body=path.read_bytes())
    uri = f"s3://audio/{key}"
    offsets, durations = tiled_cuts(180.0, 100)
    reference = whole(path)
    counter.update(get_bytes=0, gets=0)
    for first in range(0, 100, 16):  # the audio stage's batches of 16 rows
        batch = slice(first, first + 16)
        count = len(offsets[batch])
        outcomes = load_audio_batch([uri] * count, RATE, offsets[batch], durations[batch], [None] * count)
        for offset_s, duration_s, outcome in zip(offsets[batch], durations[batch], outcomes):
            assert isinstance(outcome, LoadedAudio), outcome
            start = round(offset_s * RATE)
            np.testing.assert_array_equal(outcome.samples, reference[start:start + round(duration_s * RATE)])
    size = path.stat().st_size
    print(f"{fmt}: 100 cuts in 7 batches fetched {counter['get_bytes']} bytes in {counter['gets']} GETs, "
          f"{counter['get_bytes'] / size:.3f}x the recording's {size} bytes")
    assert counter["get_bytes"] <= 1.2 * size
    assert counter["get_bytes"] >= size * 0.99  # the proxy saw the reads: this test can fail


def test_cuts_of_a_format_read_whole_share_one_fetch(recordings, counted_s3):
    """Ogg Vorbis seeks by bisection, reading about 10x a short segment: its bytes are fetched once for all
    the cuts of the batch."""
    client, counter = counted_s3
    path = recordings["OGG"]
    client.put_object(Bucket="audio", Key="long/recording.ogg", Body=path.read_bytes())
    uri = "s3://audio/long/recording.ogg"
    offsets, durations = tiled_cuts(60.0, 16)
    counter.update(get_bytes=0, gets=0)
    outcomes = load_audio_batch([uri] * 16, RATE, offsets, durations, [None] * 16)
    data = path.read_bytes()
    for offset_s, duration_s, outcome in zip(offsets, durations, outcomes):
        np.testing.assert_array_equal(outcome.samples, decode_audio(data, RATE, offset_s, duration_s).samples)
    size = len(data)
    assert counter["get_bytes"] == size  # what its header and length cost is not fetched again


# ---- bounds: time and bytes of range reads


class _SlowAfterFile(io.RawIOBase):
    """A seekable file whose reads past `fast_bytes` hang until released, like a stalled network read."""

    def __init__(self, data: bytes, fast_bytes: int, release: threading.Event) -> None:
        self.data, self.fast_bytes, self.release, self.position = data, fast_bytes, release, 0
        self.closed_event = threading.Event()
        self.stalled_reads = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = offset
        return offset

    def read(self, size: int = -1) -> bytes:
        if self.position + size > self.fast_bytes:
            self.stalled_reads += 1
            self.release.wait(WAIT_S * 3)
        part = self.data[self.position:self.position + size]
        self.position += len(part)
        return part

    def close(self) -> None:
        self.closed_event.set()
        super().close()


class _SlowAfterFileSystem(AbstractFileSystem):
    """Files that `_SlowAfterFile` serves: sizes known, reads past `fast_bytes` stall."""

    protocol = "slow-after-audio-test"
    files: dict[str, bytes] = {}
    release = threading.Event()
    opened: list[_SlowAfterFile] = []
    fast_bytes = 0

    def info(self, path, **kwargs):
        return {"name": path, "size": len(self.files[path]), "type": "file"}

    def _open(self, path, mode="rb", **kwargs):
        self.opened.append(_SlowAfterFile(self.files[path], self.fast_bytes, self.release))
        return self.opened[-1]


def test_a_range_read_that_stalls_times_out_and_the_files_other_cuts_fail_at_once(recordings):
    fsspec.register_implementation(_SlowAfterFileSystem.protocol, _SlowAfterFileSystem, clobber=True)
    _SlowAfterFileSystem.files["bucket/recording.flac"] = recordings["FLAC"].read_bytes()
    _SlowAfterFileSystem.opened.clear()
    _SlowAfterFileSystem.fast_bytes = 64 << 10  # the header and the first seconds come; the rest hangs
    uri = f"{_SlowAfterFileSystem.protocol}://bucket/recording.flac"
    good = str(recordings["WAV"])
    try:
        started = time.monotonic()
        outcomes = load_audio_batch([uri, uri, good, uri], RATE, [0.0, 100.0, 5.0, 120.0], [1.0, 2.0, 1.0, 2.0],
                                    [None] * 4, InputConfig(read_timeout_s=0.5))
        seconds = time.monotonic() - started
    finally:
        _SlowAfterFileSystem.release.set()
        _SlowAfterFileSystem.files.clear()
    assert isinstance(outcomes[0], LoadedAudio) and outcomes[0].duration_s == 1.0  # within the fast bytes
    timed_out = f"{uri}: read timed out after 0.5 s (input.read_timeout_s, --read-timeout-s)"
    assert str(outcomes[1]) == str(outcomes[3]) == timed_out
    assert isinstance(outcomes[2], LoadedAudio)  # another file in the batch is not held up
    assert 0.5 <= seconds < 2.0
    opened, = _SlowAfterFileSystem.opened  # one open for the file's three cuts
    assert opened.stalled_reads == 1  # one timeout, not one per cut: the last cut was not read at all
    assert opened.closed_event.wait(WAIT_S)  # closed once the stalled read returned


@pytest.mark.parametrize("fmt", ["FLAC", "WAV"])
def test_a_segment_of_a_file_over_the_size_cap_is_refused_without_opening_it(recordings, monkeypatch, fmt):
    path = recordings[fmt]
    size = path.stat().st_size

    def no_open(*args, **kwargs):
        raise AssertionError("opened a file over the size cap")

    monkeypatch.setattr(audio_read.os, "open", no_open)
    with pytest.raises(AudioError) as caught:
        load_audio(str(path), RATE, 10.0, 1.0, limits=InputConfig(max_file_bytes=size - 1))
    assert str(caught.value) == (f"{path}: {size} bytes, more than input.max_file_bytes ({size - 1} bytes, "
                                 f"--max-file-bytes)")


def test_a_fifo_segment_is_refused_without_being_opened(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo.flac"
    os.mkfifo(fifo)

    def no_open(*args, **kwargs):
        raise AssertionError("opened a FIFO")

    monkeypatch.setattr(audio_read.os, "open", no_open)
    outcomes = load_audio_batch([str(fifo)] * 2, RATE, [1.0, 2.0], [1.0, 1.0], [None] * 2)
    assert [str(outcome) for outcome in outcomes] == [f"{fifo}: not a regular file (FIFO)"] * 2


def test_a_remote_file_whose_size_is_unknown_is_read_whole_once_for_its_cuts(recordings):
    class NoSizeFileSystem(AbstractFileSystem):
        protocol = "no-size-audio-test"
        files: dict[str, bytes] = {}
        opens = 0

        def info(self, path, **kwargs):
            raise NotImplementedError("this backend cannot tell sizes")

        def _open(self, path, mode="rb", **kwargs):
            type(self).opens += 1
            return io.BytesIO(self.files[path])

    fsspec.register_implementation(NoSizeFileSystem.protocol, NoSizeFileSystem, clobber=True)
    NoSizeFileSystem.files["bucket/recording.wav"] = recordings["WAV"].read_bytes()
    uri = f"{NoSizeFileSystem.protocol}://bucket/recording.wav"
    offsets, durations = tiled_cuts(30.0, 8)
    outcomes = load_audio_batch([uri] * 8, RATE, offsets, durations, [None] * 8)
    assert NoSizeFileSystem.opens == 1
    reference = whole(recordings["WAV"])
    for offset_s, outcome in zip(offsets, outcomes):
        start = round(offset_s * RATE)
        np.testing.assert_array_equal(outcome.samples, reference[start:start + round(3.75 * RATE)])


# ---- bad recordings: a clear error row or the audio that is there


def _streaminfo_total_frames(data: bytes, total_frames: int) -> bytes:
    patched = bytearray(data)
    packed = int.from_bytes(patched[18:26], "big")  # rate 20 bits, channels 3, bits 5, total frames 36
    patched[18:26] = ((packed >> 36 << 36) | total_frames).to_bytes(8, "big")
    return bytes(patched)


def test_a_header_longer_than_the_data(recordings, tmp_path):
    """A WAV whose data chunk, and a FLAC whose STREAMINFO, claim twice the audio that is there: a segment in
    the audio is exact, one across its end gives what is there, and one past it is a clear error."""
    reference = whole(recordings["FLAC"])
    wav = bytearray(recordings["WAV"].read_bytes())
    at = wav.index(b"data")
    wav[at + 4:at + 8] = struct.pack("<I", 2 * struct.unpack("<I", wav[at + 4:at + 8])[0])
    flac = _streaminfo_total_frames(recordings["FLAC"].read_bytes(), 2 * 180 * RATE)
    (tmp_path / "liar.wav").write_bytes(bytes(wav))
    (tmp_path / "liar.flac").write_bytes(flac)
    for name in ("liar.wav", "liar.flac"):
        uri = str(tmp_path / name)
        inside, across, past = load_audio_batch([uri] * 3, RATE, [100.0, 178.0, 250.0], [2.0, 5.0, 2.0], [None] * 3)
        np.testing.assert_array_equal(inside.samples, reference[100 * RATE:102 * RATE])
        np.testing.assert_array_equal(across.samples, reference[178 * RATE:])
        assert across.duration_s == 2.0
        assert isinstance(past, AudioError)
    assert str(past) == f"{uri}: cannot reach offset 250.000 s: the audio ends before it, or is truncated"
    wav_past = load_audio_batch([str(tmp_path / "liar.wav")], RATE, [250.0], [2.0], [None])[0]
    assert str(wav_past) == f"{tmp_path / 'liar.wav'}: offset 250.000 s is past the end (180.000 s)"


def test_a_truncated_long_flac(recordings, tmp_path):
    """Cut at 60% of its bytes (near 108 s): before the cut exact, across it "corrupt or truncated after" near
    where it is, after it "cannot reach offset"; never more than the file's bytes, never a hang."""
    data = recordings["FLAC"].read_bytes()
    path = tmp_path / "truncated.flac"
    path.write_bytes(data[:int(len(data) * 0.6)])
    reference = whole(recordings["FLAC"])
    started = time.monotonic()
    before, across, after = load_audio_batch([str(path)] * 3, RATE, [50.0, 105.0, 150.0], [5.0, 10.0, 5.0],
                                             [None] * 3)
    assert time.monotonic() - started < 5.0
    np.testing.assert_array_equal(before.samples, reference[50 * RATE:55 * RATE])
    assert isinstance(across, AudioError) and str(across).startswith(f"{path}: corrupt or truncated after 10")
    cut_s = float(str(across).split("after ")[1].split(" s")[0])
    assert 105.0 < cut_s < 115.0
    assert str(after) == f"{path}: cannot reach offset 150.000 s: the audio ends before it, or is truncated"


def test_a_flac_whose_seek_table_lies(recordings, tmp_path):
    """Seek points pointing at the wrong bytes: each cut is exact or a clear error, within the file's bytes."""
    data = recordings["FLAC"].read_bytes()
    audio_bytes = len(data) - 86  # STREAMINFO and the vorbis comment come first (asserted below)
    assert data[42] == 0x84 and 42 + 4 + int.from_bytes(data[43:46], "big") == 86
    lies = [(i * 10 * RATE, (17 - i) * audio_bytes // 18) for i in range(18)]  # every 10 s, backwards
    table = b"".join(struct.pack(">QQH", sample, offset, 4096) for sample, offset in lies)
    path = tmp_path / "seek_table_lies.flac"
    path.write_bytes(data[:42] + bytes([3]) + len(table).to_bytes(3, "big") + table + data[42:])
    reference = whole(recordings["FLAC"])
    fetched: list[int] = []
    real_fetch = audio_read.RangeReader._fetch

    def counting_fetch(self, start, stop):
        part = real_fetch(self, start, stop)
        fetched.append(len(part or b""))
        return part

    audio_read.RangeReader._fetch = counting_fetch
    try:
        offsets = [5.0, 61.0, 100.0, 177.0]
        outcomes = load_audio_batch([str(path)] * 4, RATE, offsets, [2.0] * 4, [None] * 4,
                                    InputConfig(max_file_bytes=path.stat().st_size))
    finally:
        audio_read.RangeReader._fetch = real_fetch
    exact = 0
    for offset_s, outcome in zip(offsets, outcomes):
        if isinstance(outcome, AudioError):
            assert str(outcome).startswith(f"{path}: cannot reach offset {offset_s:.3f} s"), outcome
        else:
            start = round(offset_s * RATE)
            np.testing.assert_array_equal(outcome.samples, reference[start:start + 2 * RATE])
            exact += 1
    assert exact >= 1
    assert sum(fetched) <= path.stat().st_size


def test_a_segment_of_a_3_hour_file_reads_in_bounded_memory_and_time(tmp_path):
    """A silent 3-hour FLAC (half a megabyte) and a sparse 3-hour WAV (345 MB declared, none of it on disk):
    5 s near the end cost about 5 s of audio, not 3 hours."""
    frames = 3 * 3600 * RATE
    flac = tmp_path / "three_hours.flac"
    silence = np.zeros(1 << 20, np.int16)
    with soundfile.SoundFile(flac, "w", RATE, 1, format="FLAC", subtype="PCM_16") as handle:
        for start in range(0, frames, len(silence)):
            handle.write(silence[:min(len(silence), frames - start)])
    wav = tmp_path / "three_hours.wav"
    header = encoded(np.zeros(0, np.int16), RATE, "WAV", "PCM_16")
    assert header[36:40] == b"data" and len(header) == 44
    with open(wav, "wb") as handle:
        handle.write(header[:4] + struct.pack("<I", 36 + 2 * frames) + header[8:40] + struct.pack("<I", 2 * frames))
        handle.truncate(44 + 2 * frames)
    for path in (flac, wav):
        tracemalloc.start()
        started = time.monotonic()
        try:
            near_end, = load_audio_batch([str(path)], RATE, [3 * 3600 - 7.5], [5.0], [None])
            peak_bytes = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert time.monotonic() - started < 2.0
        assert isinstance(near_end, LoadedAudio) and near_end.duration_s == 5.0
        assert not near_end.samples.any()
        assert peak_bytes < 2 << 20, f"{path.name}: {peak_bytes} bytes"  # the output is 320 KB


# ---- the range reader is transparent: whatever the bytes, a segment read by range is what the bytes give


@pytest.fixture(scope="module")
def fuzz_folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(sorted(SEEDS)), cut=st.floats(0.0, 1.0), flips=st.lists(
       st.tuples(st.floats(0.0, 1.0), st.integers(0, 255)), max_size=4),
       offset_s=st.sampled_from([0.0, 0.01, 0.05, 0.2, 0.39, 1.0]), duration_s=st.sampled_from([None, 0.02, 0.1, 5.0]),
       channel=st.sampled_from([None, 0, 1]), fetch_bytes=st.sampled_from([None, 61, 1000]))
def test_a_corrupted_file_read_by_range_gives_what_its_bytes_give(fuzz_folder, seed, cut, flips, offset_s,
                                                                 duration_s, channel, fetch_bytes):
    """Seeds of every format cut short and with bytes overwritten: the range path (a local file) and the in-memory
    decode give the same samples, or the same error. Tiny fetches and cache (`fetch_bytes`) make libsndfile's
    reads span extents and the cache evict."""
    data = bytearray(SEEDS[seed][:max(1, round(len(SEEDS[seed]) * cut))] if cut < 1.0 else SEEDS[seed])
    for at, value in flips:
        data[min(len(data) - 1, int(at * len(data)))] = value
    path = fuzz_folder / "fuzzed.bin"
    path.write_bytes(bytes(data))
    if offset_s == 0.0 and duration_s is None:
        duration_s = 10.0  # a segment, not a whole-file read
    sizes = (audio_read._MIN_FETCH_BYTES, audio_read._MAX_FETCH_BYTES, audio_read._CACHE_BYTES)
    if fetch_bytes is not None:
        audio_read._MIN_FETCH_BYTES, audio_read._MAX_FETCH_BYTES = fetch_bytes, 4 * fetch_bytes
        audio_read._CACHE_BYTES = 8 * fetch_bytes
    try:
        outcome, = load_audio_batch([str(path)], RATE, [offset_s], [duration_s], [channel], FUZZ_LIMITS)
    finally:
        audio_read._MIN_FETCH_BYTES, audio_read._MAX_FETCH_BYTES, audio_read._CACHE_BYTES = sizes
    try:
        expected = decode_audio(bytes(data), RATE, offset_s, duration_s, channel, FUZZ_LIMITS, name=str(path))
    except AudioError as error:
        assert isinstance(outcome, AudioError) and str(outcome) == str(error)
    else:
        assert isinstance(outcome, LoadedAudio), outcome
        np.testing.assert_array_equal(outcome.samples, expected.samples)
        assert outcome.duration_s == expected.duration_s
