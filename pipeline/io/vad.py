"""Silero VAD (silero-vad 6.2, MIT) run with onnxruntime, without torch: audio -> speech probability per window.

The model is the ONNX file the `silero-vad` wheel ships (`silero_vad/data/silero_vad.onnx`), found without importing
the package: its `__init__` imports torch and its `model.py` calls `torch.set_num_threads(1)` for the whole process,
and the audio actors import no torch at all (tests/pipeline/stages/test_stages.py). The session's threads are set
here (`threads`, 1 per audio actor by default), so a process that loads the VAD keeps torch's thread count.

What a call computes is what silero's `OnnxWrapper` computes window by window at 16 kHz (`utils_vad.py`): windows of
`WINDOW_SAMPLES` (512) samples, each fed with the `CONTEXT_SAMPLES` (64) samples before it (zeros before the first)
and the recurrent state of the window before; the last window padded with zeros. Other sample rates are resampled
to 16 kHz for the VAD only (soxr). Windows are batched: the rows of a call, and a long row cut into `stream_s`
streams that run side by side, each starting from a zero state and context as a recording of its own would
(`benchmarks/long_audio.py` measures how little the segments change for it).

Dims: N streams, W windows per stream.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

VAD_SAMPLE_RATE = 16000
WINDOW_SAMPLES = 512  # 32 ms at 16 kHz: one speech probability each
CONTEXT_SAMPLES = 64  # the samples before a window that silero feeds with it, at 16 kHz
STATE_SIZE = 128
STREAM_S = 48.0  # a long row runs as parallel streams of this length (a whole number of windows), each from zero state
MODEL_FILE = "silero_vad.onnx"

log = logging.getLogger(__name__)


class VadUnavailable(RuntimeError):
    """The VAD model cannot be loaded: the silero-vad wheel or onnxruntime is missing, or the file is unusable."""


def silero_model_path() -> Path:
    """The ONNX file inside the installed silero-vad wheel, found without importing it (module docstring)."""
    try:
        spec = importlib.util.find_spec("silero_vad")
    except (ImportError, ValueError) as error:
        raise VadUnavailable(f"silero-vad cannot be found ({error}): pip install 'silero-vad==6.2.*'") from error
    if spec is None or not spec.submodule_search_locations:
        raise VadUnavailable("silero-vad is not installed: pip install 'silero-vad==6.2.*' (or --segment pauses)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "data" / MODEL_FILE
        if path.is_file():
            return path
    raise VadUnavailable(f"silero-vad is installed without its data/{MODEL_FILE}: reinstall it")


def vad_problem(segment: str, chunk_s: float) -> str | None:
    """Why a job's `long_audio.segment` cannot run here (`vad`, with rows to cut, and a VAD that does not load), or
    None; for `auto`, None and one warning where the VAD does not load (the job cuts at pauses)."""
    if segment not in ("vad", "auto") or not chunk_s:
        return None
    try:
        SileroVad()
    except VadUnavailable as error:
        if segment == "vad":
            return f"--segment vad: {error} (or --segment pauses, or auto: the VAD where it loads, else pauses)"
        log.warning("loopscribe: --segment auto: the VAD cannot load (%s); long rows are cut at pauses", error)
    return None


class SileroVad:
    """Speech probabilities of 32 ms windows at 16 kHz, for a batch of recordings (module docstring)."""

    def __init__(self, threads: int = 1, stream_s: float = STREAM_S, path: str | Path | None = None) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        try:
            import onnxruntime
        except ImportError as error:
            raise VadUnavailable(f"onnxruntime is not installed ({error}): pip install onnxruntime") from error
        model_path = Path(path) if path is not None else silero_model_path()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self.session = onnxruntime.InferenceSession(os.fspath(model_path), options,
                                                        providers=["CPUExecutionProvider"])
        except Exception as error:  # a truncated or foreign file
            raise VadUnavailable(f"{model_path}: cannot load the VAD model ({type(error).__name__}: {error})") \
                from error
        self.threads = threads
        self.stream_windows = max(1, round(stream_s * VAD_SAMPLE_RATE / WINDOW_SAMPLES))

    @property
    def window_s(self) -> float:
        return WINDOW_SAMPLES / VAD_SAMPLE_RATE

    def __call__(self, recordings: Sequence[np.ndarray], sample_rate: int) -> list[np.ndarray]:
        """Recordings (float32 [S] at `sample_rate`) -> each one's speech probability per 32 ms window,
        float32 [ceil(S16 / 512)] where S16 is its length at 16 kHz."""
        audio = [_to_16k(np.asarray(samples, np.float32), sample_rate) for samples in recordings]
        windows = [-(-len(samples) // WINDOW_SAMPLES) for samples in audio]
        streams: list[tuple[int, int, int]] = []  # (recording, first window, windows)
        for number, count in enumerate(windows):
            streams += [(number, first, min(self.stream_windows, count - first))
                        for first in range(0, count, self.stream_windows)]
        probabilities = [np.zeros(count, np.float32) for count in windows]
        if not streams:
            return probabilities
        steps = max(count for _, _, count in streams)
        # [N, W, 512]: each stream's windows, zero-padded past its end (those steps' outputs are dropped)
        framed = np.zeros((len(streams), steps * WINDOW_SAMPLES), np.float32)
        for row, (number, first, count) in enumerate(streams):
            piece = audio[number][first * WINDOW_SAMPLES: (first + count) * WINDOW_SAMPLES]
            framed[row, : len(piece)] = piece
        framed = framed.reshape(len(streams), steps, WINDOW_SAMPLES)
        state = np.zeros((2, len(streams), STATE_SIZE), np.float32)
        context = np.zeros((len(streams), CONTEXT_SAMPLES), np.float32)
        rate = np.array(VAD_SAMPLE_RATE, dtype=np.int64)
        outputs = np.zeros((len(streams), steps), np.float32)
        for step in range(steps):
            window = np.concatenate([context, framed[:, step]], axis=1)  # [N, 576]
            out, state = self.session.run(None, {"input": window, "state": state, "sr": rate})
            outputs[:, step] = out[:, 0]
            context = window[:, -CONTEXT_SAMPLES:]
        for row, (number, first, count) in enumerate(streams):
            probabilities[number][first: first + count] = outputs[row, :count]
        return probabilities


def _to_16k(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    if sample_rate == VAD_SAMPLE_RATE:
        return samples
    import soxr

    return soxr.resample(samples, sample_rate, VAD_SAMPLE_RATE).astype(np.float32, copy=False)
