"""Small random NeMo models, a SentencePiece tokenizer and spoken audio files, made on the spot.

Used by the `nemo` tests and by `benchmarks/nemo_greedy.py`. Imports NeMo, so import this module only where
NeMo is installed. The model configs follow the layout of NeMo's example configs
(`examples/asr/conf/fastconformer/fast-conformer_transducer_bpe.yaml`, `fast-conformer_ctc_bpe.yaml`,
`hybrid_transducer_ctc/fastconformer_hybrid_tdt_ctc_bpe.yaml`), scaled down to 2 layers and d_model 128
(about 1 M parameters), without the training sections. The config writer and the calibration are the production
shapes' (`recipes/production_shapes/shapes.py`), which build the same models at the sizes users run.

A random transducer emits `max_symbols` labels on every frame, unlike a trained model; `calibrate_emission`
raises the blank logit's bias (joint and CTC head) until greedy decoding emits about one label per 3 frames.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import soundfile

from recipes.production_shapes.shapes import Shape, calibrate_emission, set_blank_bias  # noqa: F401 (used from here)
from recipes.production_shapes.shapes import build_random_model as build_shape
from recipes.production_shapes.shapes import fastconformer_config as shape_config

KINDS = ("rnnt", "tdt_ctc", "ctc")
SAMPLE_RATE = 16000

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore",
    "a stitch in time saves nine",
    "all that glitters is not gold",
    "the early bird catches the worm",
    "actions speak louder than words",
    "better late than never",
    "every cloud has a silver lining",
    "fortune favours the bold",
    "where there is a will there is a way",
    "birds of a feather flock together",
    "an apple a day keeps the doctor away",
]


def train_tokenizer(out_dir: Path, vocab_size: int = 64, sentences: Sequence[str] = SENTENCES) -> Path:
    """A SentencePiece BPE tokenizer in the folder layout NeMo expects (tokenizer.model, .vocab, vocab.txt)."""
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

    out_dir.mkdir(parents=True, exist_ok=True)
    text_file = out_dir / "text.txt"
    text_file.write_text("\n".join(list(sentences) * 4) + "\n")
    create_spt_model(str(text_file), vocab_size, sample_size=-1, do_lower_case=True, tokenizer_type="bpe",
                     output_dir=str(out_dir))
    return out_dir


def small_shape(kind: Literal["rnnt", "tdt_ctc", "ctc"], d_model: int = 128, n_layers: int = 2,
                hidden: int = 128, vocab_size: int = 64) -> Shape:
    """The small FastConformer of the given kind (4 heads, feed-forward expansion 2, 80 mel features)."""
    return Shape(f"small-{kind}", kind, vocab_size, "lower", n_layers=n_layers, d_model=d_model, n_heads=4,
                 ff_expansion_factor=2, features=80, subsampling_conv_channels=64, pred_hidden=hidden,
                 joint_hidden=hidden, pred_rnn_layers=1)


def fastconformer_config(kind: Literal["rnnt", "tdt_ctc", "ctc"], tokenizer_dir: Path, d_model: int = 128,
                         n_layers: int = 2, hidden: int = 128) -> dict:
    """A NeMo model config (the `model:` section) for a small FastConformer of the given kind."""
    return shape_config(small_shape(kind, d_model, n_layers, hidden), tokenizer_dir)


def build_random_model(kind: Literal["rnnt", "tdt_ctc", "ctc"], tokenizer_dir: Path, seed: int = 0, **sizes):
    """A randomly initialized NeMo ASR model in eval mode on the CPU."""
    return build_shape(small_shape(kind, **sizes), tokenizer_dir, seed)


def synthesize(out_dir: Path, sentences: Sequence[str] = SENTENCES, seed: int = 0) -> list[Path]:
    """16 kHz mono WAV files of the sentences: espeak-ng where installed, else a deterministic chirp-and-noise.

    Voices and speeds vary so the files have different lengths.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    espeak = shutil.which("espeak-ng")
    voices = ["en-us", "en-gb", "en-gb-scotland", "en-029"]
    for index, sentence in enumerate(sentences):
        path = out_dir / f"utt{index:03d}.wav"
        audio = None
        if espeak is not None:
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "raw.wav"
                speed = 140 + 20 * (index % 5)
                result = subprocess.run([espeak, "-v", voices[index % len(voices)], "-s", str(speed), "-w", str(raw),
                                         sentence], capture_output=True)
                if result.returncode == 0 and raw.exists():
                    audio, rate = soundfile.read(raw, dtype="float32")
                    audio = _resample(audio, rate, SAMPLE_RATE)
        if audio is None:
            seconds = 0.5 + 0.25 * len(sentence.split())
            time = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
            audio = 0.3 * np.sin(2 * np.pi * (200 + 300 * time) * time)
        audio = audio + 0.003 * rng.standard_normal(len(audio))
        soundfile.write(path, np.clip(audio, -1, 1).astype(np.float32), SAMPLE_RATE, subtype="PCM_16")
        paths.append(path)
    return paths


def _resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target:
        return audio
    positions = np.arange(int(len(audio) * target / rate)) * (rate / target)
    return np.interp(positions, np.arange(len(audio)), audio).astype(np.float32)
