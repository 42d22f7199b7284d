"""Production-shaped NeMo models for tests, built once per test session (`recipes/production_shapes/shapes.py`),
and NeMo as their peer: its own `transcribe(timestamps=True)` on the same in-memory model, compared with ours.

Imports NeMo: import this module only where NeMo is installed. Models stay in memory (a 2-layer 0.6b shape is
about 65 M parameters, 260 MB); nothing is saved unless a test saves it.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np
import soundfile

from recipes.production_shapes.shapes import (
    PRODUCTION_CALIBRATION,
    Shape,
    build_random_model,
    calibrate_emission,
    shape_named,
    train_tokenizer,
)
from tests.support import random_nemo


@functools.cache
def _folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="production_shapes_"))


@functools.cache
def tokenizer_dir(text: str, vocab_size: int) -> Path:
    """The shapes' tokenizer of that text style and size, trained once per session."""
    return train_tokenizer(_folder() / f"tokenizer_{text}_{vocab_size}", vocab_size, text)


@functools.cache
def speech_files() -> tuple[Path, ...]:
    """Twelve spoken sentences (espeak-ng where installed), 1.5 to 4 s each."""
    return tuple(random_nemo.synthesize(_folder() / "audio", random_nemo.SENTENCES))


def waveforms() -> list[np.ndarray]:
    return [soundfile.read(path, dtype="float32")[0] for path in speech_files()]


def tiny(shape: Shape) -> Shape:
    """`shape`'s vocabulary, kind and durations on a tiny encoder: for tests of text and timestamps only."""
    return Shape(f"tiny-{shape.name}", shape.kind, shape.vocab_size, shape.text, n_layers=1, d_model=64, n_heads=2,
                 ff_expansion_factor=2, features=shape.features, subsampling_conv_channels=32, pred_hidden=64,
                 joint_hidden=64, pred_rnn_layers=1, durations=shape.durations)


@functools.cache
def calibrated_model(name: str, n_layers: int | None, tiny_encoder: bool = False, seed: int = 0):
    """The shape `name` at `n_layers` (None: full depth) with random weights, calibrated on the first 8 of the
    speech files as the recipe calibrates (`PRODUCTION_CALIBRATION`: one label per 3 frames, a tenth of them
    punctuation where the vocabulary has any)."""
    shape = shape_named(name, n_layers)
    shape = tiny(shape) if tiny_encoder else shape
    model = build_random_model(shape, tokenizer_dir(shape.text, shape.vocab_size), seed=seed)
    calibrate_emission(model, waveforms()[:8], **PRODUCTION_CALIBRATION)
    return model


def nemo_transcribe(nemo_model, files, head: str = "transducer", strategy: str = "greedy_batch",
                    beam_size: int | None = None, batch_size: int = 1) -> list:
    """NeMo's own hypotheses of `files`, with timestamps, by one head and strategy of the in-memory model.

    Batch size 1 by default: NeMo 3.0's batched TDT greedy records wrong token durations
    (tests/pipeline/model/test_production_shapes.py shows it)."""
    from omegaconf import open_dict

    hybrid = hasattr(nemo_model, "ctc_decoder")
    decoding = nemo_model.cfg.aux_ctc.decoding if hybrid and head == "ctc" else nemo_model.cfg.decoding
    with open_dict(decoding):
        decoding.strategy = strategy
        if beam_size is not None:
            decoding.beam.beam_size = beam_size
    options = {"decoder_type": "rnnt" if head == "transducer" else "ctc"} if hybrid else {}
    nemo_model.change_decoding_strategy(decoding, verbose=False, **options)
    hypotheses = nemo_model.transcribe([str(p) for p in files], batch_size=batch_size, timestamps=True,
                                       num_workers=0, verbose=False)
    nemo_model.eval()  # transcribe() leaves the encoder in training mode
    return hypotheses


def our_transcripts(model, waveforms_: list[np.ndarray], strategy: str, beam_size: int = 4,
                    batch_size: int = 4) -> list:
    """Our transcripts of the waveforms by `strategy`, decoded as the job decodes them, in batches."""
    from pipeline.decoding.plan import DecodingConfig, decode_in_process, plan_decoding
    from pipeline.decoding.recognize import pad_waveforms, transcript_of

    plan = plan_decoding(model.facts, DecodingConfig(strategy=strategy, beam_size=beam_size))
    decode = decode_in_process(model, plan)
    transcripts = []
    for start in range(0, len(waveforms_), batch_size):
        encoder_output, encoder_lengths = model.encode(*pad_waveforms(waveforms_[start:start + batch_size]))
        transcripts += [transcript_of(model, plan.span_kind, h.tokens, h.frame_indices, h.durations, h.score)
                        for h in decode(encoder_output, encoder_lengths)]
    return transcripts


def differences(ours: list, theirs: list, compare_tokens: bool = True) -> list[str]:
    """Where our transcripts differ from NeMo's hypotheses: text, tokens, words with their frames and seconds."""
    found = []
    for index, (transcript, hypothesis) in enumerate(zip(ours, theirs, strict=True)):
        if transcript.text != hypothesis.text:
            found.append(f"file {index}: text {transcript.text!r} against NeMo's {hypothesis.text!r}")
        if compare_tokens and transcript.tokens != [int(t) for t in hypothesis.y_sequence]:
            found.append(f"file {index}: tokens {transcript.tokens} against NeMo's "
                         f"{[int(t) for t in hypothesis.y_sequence]}")
        nemo_words = [(w["word"], int(w["start_offset"]), int(w["end_offset"])) for w in hypothesis.timestamp["word"]
                      if w["word"]]
        our_words = [(w.text, w.start_frame, w.end_frame) for w in transcript.words]
        if our_words != nemo_words:
            found.append(f"file {index}: words {our_words} against NeMo's {nemo_words}")
        nemo_seconds = [(w["start"], w["end"]) for w in hypothesis.timestamp["word"] if w["word"]]
        our_seconds = [(w.start_s, w.end_s) for w in transcript.words]
        if len(our_seconds) == len(nemo_seconds) and not np.allclose(our_seconds, nemo_seconds, atol=1e-6):
            found.append(f"file {index}: word seconds {our_seconds} against NeMo's {nemo_seconds}")
    return found


def punctuation_count(model, transcripts: list) -> int:
    """How many of the transcripts' tokens are punctuation marks."""
    from recipes.production_shapes.shapes import punctuation_ids

    marks = set(punctuation_ids(model))
    return sum(token in marks for transcript in transcripts for token in transcript.tokens)

