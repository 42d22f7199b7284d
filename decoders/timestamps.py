"""Token frames -> token and word spans, in encoder frames and in seconds, with NeMo 3.0's conventions.

- A transducer (RNN-T) label emitted at frame t spans frames [t, t + 1].
- A TDT label emitted at frame t with duration d spans [t, t + d] (d may be 0: an instant).
- A CTC label whose run starts at frame t_k spans [t_(k-1), t_k]: from the first frame of the previous label
  to its own first frame; the first label spans [max(t_0 - 1, 0), t_0]. NeMo derives it this way from the
  lengths between emissions (`ctc_decoding.py`, `_compute_offsets`), so a CTC word ends where its last piece
  starts.
- Words follow NeMo 3.0's `get_words_offsets` for BPE (`word_spans`): a piece whose text differs from the piece
  (it carries "▁", or is special such as `<unk>`) opens a word, punctuation joins the word before it, and a
  word spans its first piece's start to its last piece's end; NeMo first moves punctuation marks' frames
  (`refine_punctuation_spans`).
- Seconds = frame x `frame_shift_s`, where frame_shift_s = window stride x subsampling factor of the encoder
  (0.01 s x 8 = 0.08 s for a FastConformer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from decoders.pieces import WORD_START

SpanKind = Literal["rnnt", "tdt", "ctc"]


@dataclass(frozen=True)
class Span:
    """A piece of text between two encoder frames and the same in seconds."""

    text: str
    start_frame: int
    end_frame: int
    start_s: float
    end_s: float
    pieces: tuple[int, int] | None = None  # words: the first and last index of the pieces it is made of


def ctc_frame_spans(frame_indices: Sequence[int]) -> list[tuple[int, int]]:
    """Each CTC label's (start_frame, end_frame), from the first frame of each label's run (NeMo 3.0)."""
    starts = [int(t) for t in frame_indices]
    if not starts:
        return []
    return [(max(starts[0] - 1, 0), starts[0])] + list(zip(starts[:-1], starts[1:]))


def token_frame_spans(
    frame_indices: Sequence[int],
    durations: Sequence[int] | None = None,
    kind: SpanKind = "rnnt",
) -> list[tuple[int, int]]:
    """Each emitted label's (start_frame, end_frame) for a transducer (RNN-T, TDT) or CTC decoder's output."""
    if kind == "rnnt":
        return [(int(t), int(t) + 1) for t in frame_indices]
    if kind == "tdt":
        if durations is None or len(durations) != len(frame_indices):
            raise ValueError("TDT spans need one duration per label")
        return [(int(t), int(t) + int(d)) for t, d in zip(frame_indices, durations)]
    if kind == "ctc":
        return ctc_frame_spans(frame_indices)
    raise ValueError(f"kind must be 'rnnt', 'tdt' or 'ctc', got {kind!r}")


def token_spans(
    pieces: Sequence[str],
    frame_spans: Sequence[tuple[int, int]],
    frame_shift_s: float,
) -> list[Span]:
    """Pieces with their frame spans -> spans in frames and seconds (pieces keep their "▁")."""
    if len(pieces) != len(frame_spans):
        raise ValueError(f"got {len(pieces)} pieces but {len(frame_spans)} spans")
    return [Span(p, s, e, s * frame_shift_s, e * frame_shift_s) for p, (s, e) in zip(pieces, frame_spans)]


def refine_punctuation_spans(texts: Sequence[str], frame_spans: Sequence[tuple[int, int]], kind: SpanKind,
                              punctuation: frozenset[str]) -> list[tuple[int, int]]:
    """NeMo's fix-up of punctuation marks' frames (after the first token): TDT pins a mark to the end of the
    token before it, CTC shrinks it to its start, RNN-T leaves it."""
    spans = list(frame_spans)
    if not punctuation or kind == "rnnt":
        return spans
    for index in range(1, len(spans)):
        text = texts[index]
        if kind == "tdt" and text in punctuation:  # NeMo compares the whole text for TDT, its first mark for CTC
            spans[index] = (spans[index - 1][1], spans[index - 1][1])
        elif kind == "ctc" and text and text[0] in punctuation:
            spans[index] = (spans[index][0], spans[index][0])
    return spans


def word_spans(
    pieces: Sequence[str],
    texts: Sequence[str],
    frame_spans: Sequence[tuple[int, int]],
    frame_shift_s: float,
    pieces_to_text: Callable[[Sequence[str]], str],
    punctuation: frozenset[str] = frozenset(),
) -> list[Span]:
    """Words from SentencePiece pieces as NeMo 3.0 builds them (`get_words_offsets`, BPE, word separator " ").

    A piece opens a word when it differs from its own text (it carries "▁", or is a special piece such as
    `<unk>`); a punctuation mark joins the word before it. A word spans its first piece's start to its last
    piece's end, and the first word starts where the first piece starts. `texts[k]` is `pieces_to_text([piece])`.
    Unlike NeMo, words whose text is empty (a lone "▁") are left out.
    """
    if not (len(pieces) == len(texts) == len(frame_spans)):
        raise ValueError(f"got {len(pieces)} pieces, {len(texts)} texts and {len(frame_spans)} spans")
    words: list[list] = []  # [text, start_frame, end_frame, first piece, last piece]
    built: list[str] = []
    first = 0  # index of the built word's first piece
    for index, (piece, text) in enumerate(zip(pieces, texts)):
        is_punctuation = text in punctuation and text != " "
        following = next((t for t in texts[index + 1:] if t != " "), None)
        opens = piece != text or (text == " " and following not in punctuation)
        if opens and not is_punctuation:
            if built:
                words.append([pieces_to_text(built), frame_spans[first][0], frame_spans[index - 1][1], first,
                              index - 1])
            built = []
            if text != " ":
                built, first = [piece], index
        elif is_punctuation and not built and words:
            words[-1][2] = frame_spans[index][1]
            words[-1][0] = words[-1][0].removesuffix(" ") + text
            words[-1][4] = index
        elif is_punctuation and built:
            if built[-1] in (" ", "_", WORD_START):
                built.pop()
            built.append(piece)
        else:
            if not built:
                first = index
            built.append(piece)
    if built:
        words.append([pieces_to_text(built), frame_spans[first][0] if words else frame_spans[0][0],
                      frame_spans[-1][1], first, len(pieces) - 1])
    if words:
        words[0][1] = frame_spans[0][0]
    return [Span(text, start, end, start * frame_shift_s, end * frame_shift_s, (first_piece, last_piece))
            for text, start, end, first_piece, last_piece in words if text]
