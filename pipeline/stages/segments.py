"""Speech segments of a long recording, from a voice-activity model's speech probabilities (`pipeline/io/vad.py`).

`speech_spans` is silero's `get_speech_timestamps_from_probs` (silero-vad 6.2, `utils_vad.py`) without its
length cap: speech starts at a window whose probability reaches `threshold` and ends where it stays below
`neg_threshold` (`threshold - 0.15` unless given) for `min_silence_s`, so gaps shorter than that are merged; spans
of at most `min_speech_s` are dropped; each is padded by `pad_s`, or by half the gap where two are closer than twice
that (tests/pipeline/stages/test_segments.py compares the two on the same probabilities). The cap is ours
(`cap_spans`): a span longer than `max_segment_s` is cut at its quietest window (the lowest speech probability) in
the second half of its allowed length, and again while the rest is too long (silero cuts at the longest silence
seen, or hard at the cap, and can leave 60-70 s turns). `plan_segments` puts the spans on a 10 ms grid in samples
at the model's rate: the audio stage's segment table (`LoadAudio`), which the ASR stage turns into chunks on whole
encoder frames (`TranscribeBatch`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.io.vad import VAD_SAMPLE_RATE, WINDOW_SAMPLES

GRID_S = 0.01  # segment boundaries are whole 10 ms steps of the recording


@dataclass(frozen=True)
class SegmentRules:
    """How speech probabilities become segments (the `long_audio.vad_*` settings, `pipeline/config.py`)."""

    threshold: float = 0.5
    min_speech_s: float = 0.25
    min_silence_s: float = 0.1
    pad_s: float = 0.03
    max_segment_s: float = 20.0
    neg_threshold: float | None = None  # None: max(threshold - 0.15, 0.01), as silero

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1 or self.min_speech_s < 0 or self.min_silence_s < 0 or self.pad_s < 0 or \
                not self.max_segment_s > 2 * self.pad_s + WINDOW_SAMPLES / VAD_SAMPLE_RATE:
            raise ValueError(f"segment rules out of range: {self}")


def speech_spans(probabilities: np.ndarray, rules: SegmentRules, num_samples: int) -> list[tuple[int, int]]:
    """Speech probabilities of 512-sample windows at 16 kHz -> padded speech spans [start, end) in samples at
    16 kHz of a recording of `num_samples` of them, as silero's `get_speech_timestamps_from_probs` makes them with
    `max_speech_duration_s` infinite (module docstring)."""
    rate = VAD_SAMPLE_RATE
    neg_threshold = rules.neg_threshold if rules.neg_threshold is not None else max(rules.threshold - 0.15, 0.01)
    min_speech, min_silence = rate * rules.min_speech_s, rate * rules.min_silence_s
    pad = rate * rules.pad_s
    spans: list[list[int]] = []
    triggered, start, temp_end = False, 0, 0
    for index, probability in enumerate(np.asarray(probabilities, np.float64)):
        sample = WINDOW_SAMPLES * index
        if probability >= rules.threshold and temp_end:
            temp_end = 0
        if probability >= rules.threshold and not triggered:
            triggered, start = True, sample
            continue
        if probability < neg_threshold and triggered:
            if not temp_end:
                temp_end = sample
            if sample - temp_end < min_silence:
                continue
            if temp_end - start > min_speech:
                spans.append([start, temp_end])
            triggered, temp_end = False, 0
    if triggered and num_samples - start > min_speech:
        spans.append([start, num_samples])
    for k, span in enumerate(spans):
        if k == 0:
            span[0] = int(max(0, span[0] - pad))
        if k + 1 < len(spans):
            gap = spans[k + 1][0] - span[1]
            if gap < 2 * pad:
                span[1] += int(gap // 2)
                spans[k + 1][0] = int(max(0, spans[k + 1][0] - gap // 2))
            else:
                span[1] = int(min(num_samples, span[1] + pad))
                spans[k + 1][0] = int(max(0, spans[k + 1][0] - pad))
        else:
            span[1] = int(min(num_samples, span[1] + pad))
    return [(int(a), int(b)) for a, b in spans]


def cap_spans(spans: Sequence[tuple[int, int]], probabilities: np.ndarray, max_samples: int
              ) -> list[tuple[int, int]]:
    """Spans (16 kHz samples) of at most `max_samples` each: a longer one cut at the start of its lowest-probability
    window between half and all of `max_samples` from its start, repeatedly; the pieces meet exactly."""
    probabilities = np.asarray(probabilities, np.float64)
    capped: list[tuple[int, int]] = []
    for start, end in spans:
        while end - start > max_samples:
            low = -(-(start + max_samples // 2) // WINDOW_SAMPLES)  # windows starting in the allowed stretch
            high = (start + max_samples) // WINDOW_SAMPLES
            if high < low:
                cut = start + max_samples
            else:
                window = low + int(np.argmin(probabilities[low: high + 1]))
                cut = window * WINDOW_SAMPLES
            capped.append((start, cut))
            start = cut
        capped.append((start, end))
    return capped


def plan_segments(probabilities: np.ndarray, rules: SegmentRules, num_samples: int, sample_rate: int
                  ) -> list[tuple[int, int]]:
    """A recording's speech segments, [start, end) in samples at `sample_rate` on the `GRID_S` grid (starts
    rounded down, ends up, clipped to `num_samples`; segments that met still meet), from its VAD probabilities."""
    num_16k = math.ceil(num_samples * VAD_SAMPLE_RATE / sample_rate)
    spans = speech_spans(probabilities, rules, num_16k)
    grid_16k = round(GRID_S * VAD_SAMPLE_RATE)
    # the cap leaves room for the grid's rounding, so a segment is at most max_segment_s
    spans = cap_spans(spans, probabilities, int(rules.max_segment_s * VAD_SAMPLE_RATE) - 2 * grid_16k)
    steps_per_grid = GRID_S * sample_rate
    segments = []
    for start, end in spans:
        first = math.floor(start / grid_16k) * steps_per_grid
        last = math.ceil(end / grid_16k) * steps_per_grid
        segment = (int(round(first)), min(int(round(last)), num_samples))
        if segments and segment[0] < segments[-1][1]:  # pieces of a capped span: they meet where they met
            segment = (segments[-1][1], segment[1])
        if segment[1] > segment[0]:
            segments.append(segment)
    return segments
