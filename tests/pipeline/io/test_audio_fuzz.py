"""Fuzzing `decode_audio` with corrupted audio: small WAV, FLAC, OGG (Vorbis, Opus) and MP3 seeds, cut short,
bit-flipped, byte-overwritten, with header fields (sample rate, channel count, frame count, data size) set to
hostile values, or replaced by random bytes behind a real magic number.

Whatever the bytes, `decode_audio` either returns finite float32 samples within the limits, or raises
`AudioError` naming the file; never another exception, never a hang, and never an allocation past the bound
(peak traced memory, numpy's arrays included, stays under `PEAK_BYTES`).
"""

from __future__ import annotations

import io
import struct
import time
import tracemalloc

import numpy as np
import soundfile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import InputConfig
from pipeline.io.audio import AudioError, decode_audio

LIMITS = InputConfig(max_row_duration_s=5.0, min_sample_rate=1000, max_file_bytes=1 << 20, read_timeout_s=5.0)
TIGHT = InputConfig(max_row_duration_s=0.05, min_sample_rate=8000)  # the seeds are 0.1-0.4 s: the bound bites
SAMPLE_RATE = 16000
NAME = "fuzz/seed.bin"
# one decoding chunk is at most 4 MiB; the output at 16 kHz is at most 5 s (320 KB); the rest is small
PEAK_BYTES = 12 << 20
SLOW_S = 5.0  # a tiny input that takes this long to decode is a hang in the making

FUZZ = settings(max_examples=1000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _encoded(samples: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


_t = np.arange(1600) / 16000
_tone = (0.3 * np.sin(2 * np.pi * 440 * _t)).astype(np.float32)
_stereo = np.stack([_tone, 0.5 * _tone], axis=1)
SEEDS = {
    "wav_pcm16": _encoded(_tone, 16000, "WAV", "PCM_16"),
    "wav_float_stereo": _encoded(_stereo, 8000, "WAV", "FLOAT"),
    "wav_u8": _encoded(_tone, 11025, "WAV", "PCM_U8"),
    "flac": _encoded(_tone, 16000, "FLAC", "PCM_16"),
    "flac_stereo_24": _encoded(_stereo, 44100, "FLAC", "PCM_24"),
    "ogg_vorbis": _encoded(np.tile(_tone, 4), 16000, "OGG", "VORBIS"),
    "ogg_opus": _encoded(np.tile(_tone, 4), 48000, "OGG", "OPUS"),
    "mp3": _encoded(np.tile(_tone, 4), 16000, "MP3", "MPEG_LAYER_III"),
}
MAGIC = [b"RIFF\x24\x00\x00\x00WAVEfmt ", b"fLaC", b"OggS", b"ID3", b"\xff\xfb", b"FORM", b".snd", b""]
HOSTILE_VALUES = [0, 1, 2, 3, 7, 8, 255, 999, 1000, 8000, 16000, 65535, 655350, 0x7FFFFFFF, 0xFFFFFFF0, 0xFFFFFFFF]


def _wav_fields(data: bytes) -> dict[str, tuple[int, int]]:
    """Header field -> (byte offset, width) in a WAV written by libsndfile."""
    fmt, chunk = data.index(b"fmt "), data.index(b"data")
    return {"riff_size": (4, 4), "format_tag": (fmt + 8, 2), "channels": (fmt + 10, 2), "sample_rate": (fmt + 12, 4),
            "byte_rate": (fmt + 16, 4), "block_align": (fmt + 20, 2), "bits": (fmt + 22, 2),
            "data_size": (chunk + 4, 4)}


def _set_wav_field(data: bytes, field: str, value: int) -> bytes:
    offset, width = _wav_fields(data)[field]
    patched = bytearray(data)
    patched[offset:offset + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(patched)


# FLAC STREAMINFO, bytes 18..25 (big-endian): sample rate 20 bits, channels - 1 3 bits, bits - 1 5 bits,
# total frames 36 bits (0: not said)
_FLAC_BITS = {"sample_rate": (44, 20), "channels": (41, 3), "bits": (36, 5), "total_frames": (0, 36)}


def _set_flac_field(data: bytes, field: str, value: int) -> bytes:
    shift, width = _FLAC_BITS[field]
    mask = ((1 << width) - 1) << shift
    packed = int.from_bytes(data[18:26], "big")
    packed = (packed & ~mask) | ((value << shift) & mask)
    return data[:18] + packed.to_bytes(8, "big") + data[26:]


def _ogg_crc(page: bytes) -> int:
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7 if crc & 0x80000000 else crc << 1) & 0xFFFFFFFF
    return crc


def _with_ogg_crcs(data: bytes) -> bytes:
    """Every whole Ogg page's checksum recomputed, so that a changed header field reaches the decoder instead of
    failing the page's CRC."""
    patched = bytearray(data)
    at = 0
    while at + 27 <= len(patched) and patched[at:at + 4] == b"OggS":
        segments = patched[at + 26]
        end = at + 27 + segments + sum(patched[at + 27:at + 27 + segments])
        if end > len(patched):
            break
        patched[at + 22:at + 26] = b"\x00\x00\x00\x00"
        patched[at + 22:at + 26] = struct.pack("<I", _ogg_crc(bytes(patched[at:end])))
        at = end
    return bytes(patched)


def _set_ogg_field(data: bytes, field: str, value: int) -> bytes:
    patched = bytearray(data)
    if b"\x01vorbis" in data:  # identification header: version (4), channels (1), rate (4)
        at = data.index(b"\x01vorbis") + 7
        offset, width = {"channels": (at + 4, 1), "sample_rate": (at + 5, 4)}[field]
    else:  # OpusHead: version (1), channels (1), pre-skip (2), input rate (4)
        at = data.index(b"OpusHead") + 8
        offset, width = {"channels": (at + 1, 1), "sample_rate": (at + 4, 4)}[field]
    patched[offset:offset + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return _with_ogg_crcs(bytes(patched))


def _check(data: bytes, offset_s: float = 0.0, duration_s: float | None = None, channel: int | None = None,
           limits: InputConfig = LIMITS) -> None:
    """The property: finite float32 samples within the limits, or AudioError naming the file; within time and
    memory bounds."""
    started = time.perf_counter()
    tracemalloc.start()
    try:
        audio = decode_audio(data, SAMPLE_RATE, offset_s, duration_s, channel, limits, name=NAME)
    except AudioError as error:
        message = str(error)
        assert message.startswith(NAME + ": "), message
        assert " at 0x" not in message and "<_io." not in message, message
        return
    finally:
        peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert time.perf_counter() - started < SLOW_S
        assert peak_bytes < PEAK_BYTES, f"peak {peak_bytes} bytes"
    samples = audio.samples
    assert samples.dtype == np.float32 and samples.ndim == 1 and samples.flags.c_contiguous
    assert 0 < len(samples) <= limits.max_row_duration_s * SAMPLE_RATE + 64
    assert np.isfinite(samples).all()
    assert audio.source_rate >= limits.min_sample_rate
    assert 0 < audio.duration_s <= limits.max_row_duration_s + 1 / audio.source_rate
    if duration_s:
        assert audio.duration_s <= duration_s + 1 / audio.source_rate
    assert 1 <= audio.channels and (channel is None or channel < audio.channels)


seed_names = st.sampled_from(sorted(SEEDS))
requests = st.tuples(st.sampled_from([0.0, 0.0, 0.01, 0.09, 3.0, 1e9]),
                     st.sampled_from([None, None, 0.0, 0.02, 0.05, 4.99, 5.0]),
                     st.sampled_from([None, None, 0, 1, 7]),
                     st.sampled_from([LIMITS, LIMITS, TIGHT]))


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A seed cut short, or with bits flipped, or bytes overwritten (mostly in the header), or all three."""
    data = bytearray(SEEDS[draw(seed_names)])
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "overwrite", "splice"]))
        if kind == "truncate":
            data = data[:draw(st.integers(0, len(data)))]
        elif kind == "flip" and data:
            for _ in range(draw(st.integers(1, 8))):
                index = draw(st.integers(0, min(len(data), 256) - 1) | st.integers(0, len(data) - 1))
                data[index] ^= 1 << draw(st.integers(0, 7))
        elif kind == "overwrite" and data:
            index = draw(st.integers(0, min(len(data), 128) - 1) | st.integers(0, len(data) - 1))
            data[index:index + 4] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "splice" and data:
            index = draw(st.integers(0, len(data)))
            data[index:index] = draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


@st.composite
def lying_headers(draw: st.DrawFn) -> bytes:
    """A seed with one header field set to a hostile value: sample rate, channel count, frame count, sizes."""
    name = draw(seed_names)
    data = SEEDS[name]
    value = draw(st.sampled_from(HOSTILE_VALUES) | st.integers(0, 0xFFFFFFFF))
    if name.startswith("wav"):
        return _set_wav_field(data, draw(st.sampled_from(sorted(_wav_fields(data)))), value)
    if name.startswith("flac"):
        field = draw(st.sampled_from(sorted(_FLAC_BITS)))
        big = draw(st.sampled_from([0, (1 << 36) - 1, 1 << 35, 5 * 16000, 5 * 16000 + 1]))
        return _set_flac_field(data, field, big if field == "total_frames" and draw(st.booleans()) else value)
    if name.startswith("ogg"):
        return _set_ogg_field(data, draw(st.sampled_from(["channels", "sample_rate"])), value)
    patched = bytearray(data)  # mp3: each frame header (4 bytes from 0xFF) carries the version, rate and mode
    frame_starts = [at for at in range(len(data) - 3) if data[at] == 0xFF and data[at + 1] & 0xE0 == 0xE0]
    at = draw(st.sampled_from(frame_starts[:8]))
    patched[at + draw(st.integers(1, 3))] = value & 0xFF
    return bytes(patched)


@FUZZ
@given(data=damaged(), request=requests)
def test_damaged_audio_decodes_within_bounds_or_raises_audio_error(data, request):
    _check(data, *request)


@FUZZ
@given(data=lying_headers(), request=requests)
def test_lying_headers_decode_within_bounds_or_raise_audio_error(data, request):
    _check(data, *request)


@FUZZ
@given(magic=st.sampled_from(MAGIC), body=st.binary(max_size=2048), request=requests)
def test_random_bytes_behind_a_magic_number_raise_audio_error_or_decode_within_bounds(magic, body, request):
    _check(magic + body, *request)


@settings(max_examples=500, deadline=None, database=None)
@given(data=damaged(), request=requests)
def test_each_damaged_seed_is_refused_or_decoded_the_same_way_twice(data, request):
    """Decoding is a function of the bytes: no state leaks between calls (a retried row gives the same answer)."""
    outcomes = []
    for _ in range(2):
        try:
            outcomes.append(decode_audio(data, SAMPLE_RATE, *request, name=NAME).samples)
        except AudioError as error:
            outcomes.append(str(error))
    first, second = outcomes
    if isinstance(first, str):
        assert first == second
    else:
        assert isinstance(second, np.ndarray) and np.array_equal(first, second)


def test_seeds_decode_whole():
    """The fuzz starts from audio that decodes: the bounds refuse damage, not the seeds themselves."""
    for name, data in SEEDS.items():
        audio = decode_audio(data, SAMPLE_RATE, limits=LIMITS, name=name)
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            assert audio.duration_s == sound.frames / sound.samplerate, name
        assert np.abs(audio.samples).max() > 0.1, name
