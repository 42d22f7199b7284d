"""Waveforms -> text, tokens and word timestamps in seconds: encoder + our greedy decoders, end to end.

Works on any `AsrModel` head: the transducer (RNN-T or TDT, `LabelLoopingGreedy`) or the CTC head
(`CtcGreedy`) of CTC and hybrid models. Ray-free: a pipeline stage calls it on a batch.

Dims: B batch, S samples, T encoder frames, D encoder features.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from decoders.ctc import CtcGreedy
from decoders.hypotheses import BatchedHypotheses
from decoders.timestamps import WORD_START, Span, SpanKind, label_frame_spans
from decoders.transducer_greedy import GreedyConfig, LabelLoopingGreedy
from pipeline.models import AsrModel, Head


@dataclass(frozen=True)
class Transcript:
    """One utterance's result: text, token ids and pieces with their frames, and words in seconds."""

    text: str
    tokens: list[int]
    pieces: list[str]
    frame_indices: list[int]  # encoder frame of each token (transducer: emission; CTC: first frame of its run)
    durations: list[int] | None  # TDT only
    words: list[Span]
    score: float


def pad_waveforms(waveforms: Sequence[np.ndarray | Tensor]) -> tuple[Tensor, Tensor]:
    """1-D waveforms -> zero-padded waveforms [B, S] float32 and lengths [B] in samples."""
    tensors = [torch.as_tensor(np.asarray(w, dtype=np.float32) if not isinstance(w, Tensor) else w,
                               dtype=torch.float32) for w in waveforms]
    for index, tensor in enumerate(tensors):
        if tensor.dim() != 1:
            raise ValueError(f"waveforms[{index}] must be 1-D samples, got {tuple(tensor.shape)}")
    lengths = torch.tensor([len(t) for t in tensors], dtype=torch.long)
    padded = torch.zeros(len(tensors), int(lengths.max()) if tensors else 0, dtype=torch.float32)
    for index, tensor in enumerate(tensors):
        padded[index, : len(tensor)] = tensor
    return padded, lengths


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


def nemo_word_spans(
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
    words: list[list] = []  # [text, start_frame, end_frame]
    built: list[str] = []
    first = 0  # index of the built word's first piece
    for index, (piece, text) in enumerate(zip(pieces, texts)):
        is_punctuation = text in punctuation and text != " "
        following = next((t for t in texts[index + 1:] if t != " "), None)
        opens = piece != text or (text == " " and following not in punctuation)
        if opens and not is_punctuation:
            if built:
                words.append([pieces_to_text(built), frame_spans[first][0], frame_spans[index - 1][1]])
            built = []
            if text != " ":
                built, first = [piece], index
        elif is_punctuation and not built and words:
            words[-1][2] = frame_spans[index][1]
            words[-1][0] = words[-1][0].removesuffix(" ") + text
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
                      frame_spans[-1][1]])
    if words:
        words[0][1] = frame_spans[0][0]
    return [Span(text, start, end, start * frame_shift_s, end * frame_shift_s) for text, start, end in words if text]


class GreedyRecognizer:
    """Encoder + greedy decoding of one head of an `AsrModel`, with words timed as NeMo 3.0 times them."""

    def __init__(self, model: AsrModel, head: Head | None = None, config: GreedyConfig | None = None) -> None:
        """`config` None: the checkpoint's own `max_symbols`, as NeMo's transcribe() uses it."""
        head = head or model.heads[0]
        config = config or GreedyConfig(max_symbols=model.max_symbols)
        if head not in model.heads:
            raise ValueError(f"head must be one of {model.heads} for this {model.kind} model, got {head!r}")
        self.model = model
        self.head = head
        if head == "transducer":
            self.decoder = LabelLoopingGreedy(model.transducer, config)
            self.span_kind = "tdt" if model.transducer.durations else "rnnt"
        else:
            self.decoder = CtcGreedy(blank_id=model.ctc.blank_id)
            self.span_kind = "ctc"

    def decode(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        """encoder_output [B, T, D], encoder_lengths [B] -> greedy hypotheses of the chosen head."""
        if self.head == "transducer":
            return self.decoder(encoder_output, encoder_lengths)
        with torch.no_grad():
            log_probs = self.model.ctc.log_probs(encoder_output)  # [B, T, V]
        return self.decoder(log_probs, encoder_lengths)

    def transcripts(self, hypotheses: BatchedHypotheses) -> list[Transcript]:
        """Hypotheses -> text, pieces and word spans in seconds."""
        tokenizer, frame_shift_s = self.model.tokenizer, self.model.frame_shift_s
        results = []
        for hypothesis in hypotheses.to_list():
            pieces = tokenizer.ids_to_pieces(hypothesis.tokens)
            texts = [tokenizer.pieces_to_text([piece]) for piece in pieces]
            spans = refine_punctuation_spans(
                texts, label_frame_spans(hypothesis.frame_indices, hypothesis.durations, self.span_kind),
                self.span_kind, tokenizer.punctuation)
            results.append(Transcript(
                text=tokenizer.ids_to_text(hypothesis.tokens),
                tokens=hypothesis.tokens,
                pieces=pieces,
                frame_indices=hypothesis.frame_indices,
                durations=hypothesis.durations,
                words=nemo_word_spans(pieces, texts, spans, frame_shift_s, tokenizer.pieces_to_text,
                                      tokenizer.punctuation),
                score=hypothesis.score,
            ))
        return results

    def __call__(self, waveforms: Tensor, lengths: Tensor) -> list[Transcript]:
        """waveforms [B, S] at the model's sample rate, lengths [B] in samples -> one transcript per row."""
        encoder_output, encoder_lengths = self.model.encode(waveforms, lengths)
        return self.transcripts(self.decode(encoder_output, encoder_lengths))


def recognize(
    model: AsrModel,
    waveforms: Tensor | Sequence[np.ndarray | Tensor],
    lengths: Tensor | None = None,
    head: Head | None = None,
    config: GreedyConfig | None = None,
) -> list[Transcript]:
    """Decode a batch end to end: [B, S] waveforms with lengths [B], or a list of 1-D waveforms (padded here).

    `head` picks the transducer or the CTC head of a hybrid model (default: the transducer where there is one).
    """
    if lengths is None:
        if isinstance(waveforms, Tensor) and waveforms.dim() == 2:
            lengths = torch.full((waveforms.shape[0],), waveforms.shape[1], dtype=torch.long)
        else:
            waveforms, lengths = pad_waveforms(waveforms)
    return GreedyRecognizer(model, head, config)(waveforms, lengths)
