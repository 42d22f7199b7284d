"""Token frames -> token and word spans, in encoder frames and in seconds, with NeMo 3.0's conventions.

- A transducer (RNN-T) label emitted at frame t spans frames [t, t + 1].
- A TDT label emitted at frame t with duration d spans [t, t + d] (d may be 0: an instant).
- A CTC label whose run starts at frame t_k spans [t_(k-1), t_k]: from the first frame of the previous label
  to its own first frame; the first label spans [max(t_0 - 1, 0), t_0]. NeMo derives it this way from the
  lengths between emissions (`ctc_decoding.py`, `_compute_offsets`), so a CTC word ends where its last piece
  starts.
- A word starts at a SentencePiece piece beginning with "▁" (or at the first piece of the utterance) and spans
  from its first piece's start to its last piece's end.
- Seconds = frame x `frame_shift_s`, where frame_shift_s = window stride x subsampling factor of the encoder
  (0.01 s x 8 = 0.08 s for a FastConformer).

`label_frame_spans` takes all three kinds; `token_frame_spans` keeps to the transducer kinds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

WORD_START = "\u2581"  # SentencePiece's "▁"

SpanKind = Literal["rnnt", "tdt", "ctc"]


@dataclass(frozen=True)
class Span:
    """A piece of text between two encoder frames and the same in seconds."""

    text: str
    start_frame: int
    end_frame: int
    start_s: float
    end_s: float


def token_frame_spans(
    frame_indices: Sequence[int],
    durations: Sequence[int] | None = None,
    kind: Literal["rnnt", "tdt"] = "rnnt",
) -> list[tuple[int, int]]:
    """Each emitted label's (start_frame, end_frame)."""
    if kind == "rnnt":
        return [(int(t), int(t) + 1) for t in frame_indices]
    if kind == "tdt":
        if durations is None or len(durations) != len(frame_indices):
            raise ValueError("TDT spans need one duration per label")
        return [(int(t), int(t) + int(d)) for t, d in zip(frame_indices, durations)]
    raise ValueError(f"kind must be 'rnnt' or 'tdt', got {kind!r}")


def ctc_frame_spans(frame_indices: Sequence[int]) -> list[tuple[int, int]]:
    """Each CTC label's (start_frame, end_frame), from the first frame of each label's run (NeMo 3.0)."""
    starts = [int(t) for t in frame_indices]
    if not starts:
        return []
    return [(max(starts[0] - 1, 0), starts[0])] + list(zip(starts[:-1], starts[1:]))


def label_frame_spans(
    frame_indices: Sequence[int],
    durations: Sequence[int] | None = None,
    kind: SpanKind = "rnnt",
) -> list[tuple[int, int]]:
    """Each emitted label's (start_frame, end_frame) for a transducer (RNN-T, TDT) or CTC decoder's output."""
    if kind == "ctc":
        return ctc_frame_spans(frame_indices)
    return token_frame_spans(frame_indices, durations, kind)


def token_spans(
    pieces: Sequence[str],
    frame_spans: Sequence[tuple[int, int]],
    frame_shift_s: float,
) -> list[Span]:
    """Pieces with their frame spans -> spans in frames and seconds (pieces keep their "▁")."""
    if len(pieces) != len(frame_spans):
        raise ValueError(f"got {len(pieces)} pieces but {len(frame_spans)} spans")
    return [Span(p, s, e, s * frame_shift_s, e * frame_shift_s) for p, (s, e) in zip(pieces, frame_spans)]


def word_spans(
    pieces: Sequence[str],
    frame_spans: Sequence[tuple[int, int]],
    frame_shift_s: float,
) -> list[Span]:
    """Pieces with their frame spans -> words with spans in frames and seconds."""
    if len(pieces) != len(frame_spans):
        raise ValueError(f"got {len(pieces)} pieces but {len(frame_spans)} spans")
    words: list[list] = []  # [text, start_frame, end_frame]
    for piece, (start, end) in zip(pieces, frame_spans):
        if piece.startswith(WORD_START) or not words:
            words.append([piece.lstrip(WORD_START), start, end])
        else:
            words[-1][0] += piece
            words[-1][2] = max(words[-1][2], end)
    return [
        Span(text, start, end, start * frame_shift_s, end * frame_shift_s)
        for text, start, end in words
        if text  # a lone "▁" with nothing after it is no word
    ]
