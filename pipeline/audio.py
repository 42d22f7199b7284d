"""Audio in: fetch bytes through fsspec, decode with soundfile, mix down to mono, slice, resample with soxr.

Any failure raises `AudioError` with a message naming the file and the cause; stages turn it into an error
row, so one corrupt file never fails a batch.
"""

from __future__ import annotations

import io

import fsspec
import numpy as np
import soundfile
import soxr


class AudioError(Exception):
    """Audio that cannot be used, with the reason."""


def read_bytes(uri: str) -> bytes:
    try:
        with fsspec.open(uri, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise AudioError(f"{uri}: file not found") from None
    except Exception as error:  # fsspec backends raise their own types (botocore, gcsfs, aiohttp ...)
        raise AudioError(f"{uri}: cannot read ({type(error).__name__}: {error})") from error


def decode_audio(
    data: bytes,
    sample_rate: int,
    offset_s: float = 0.0,
    duration_s: float | None = None,
    name: str = "<bytes>",
) -> np.ndarray:
    """Encoded audio -> float32 mono samples at `sample_rate`, from `offset_s` for `duration_s` seconds
    (None or 0 = to the end)."""
    if not data:
        raise AudioError(f"{name}: empty file")
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            source_rate = sound.samplerate
            start = int(round(offset_s * source_rate))
            if start > sound.frames:
                length_s = sound.frames / source_rate
                raise AudioError(f"{name}: offset {offset_s:.3f} s is past the end ({length_s:.3f} s)")
            sound.seek(start)
            frames = int(round(duration_s * source_rate)) if duration_s else -1
            samples = sound.read(frames=frames, dtype="float32", always_2d=True)
    except AudioError:
        raise
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as error:
        raise AudioError(f"{name}: not decodable audio ({error})") from None
    if samples.shape[0] == 0:
        raise AudioError(f"{name}: no audio samples in the requested range")
    mono = samples.mean(axis=1) if samples.shape[1] > 1 else samples[:, 0]
    if source_rate != sample_rate:
        mono = soxr.resample(mono, source_rate, sample_rate, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def load_audio(uri: str, sample_rate: int, offset_s: float = 0.0, duration_s: float | None = None) -> np.ndarray:
    """Fetch and decode one utterance (see `decode_audio`)."""
    return decode_audio(read_bytes(uri), sample_rate, offset_s, duration_s, name=uri)
