"""Waveforms -> text, tokens and word timestamps in seconds: encoder + decoder, end to end, in one process.

`transcript_of` turns one hypothesis into text and word spans (the writer stage calls it), the text as NeMo's decoding
writes it (`hypothesis_text`); `GreedyRecognizer`
and `recognize` decode waveforms with the greedy decoder of either head of an `AsrModel` (the transducer,
RNN-T or TDT, or the CTC head of CTC and hybrid models), planned by `pipeline/decoding/plan.py` as the job plans it.

Dims: B batch, S samples, T encoder frames, D encoder features.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from decoders.confidence import Aggregation, segment_reduce
from decoders.hypotheses import BatchedHypotheses
from decoders.timestamps import Span, SpanKind, refine_punctuation_spans, token_frame_spans, word_spans
from decoders.transducer import GreedyConfig
from pipeline.decoding.plan import GREEDY_BY_HEAD, DecodingConfig, plan_decoding
from pipeline.model import AsrModel, Head, ModelLayout


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
    word_confidence: list[float] | None = None  # one per word, where the decoder gave token confidence
    confidence: float | None = None  # the utterance's: the aggregate of its words' (the same aggregation)


def pad_waveforms(waveforms: Sequence[np.ndarray | Tensor]) -> tuple[Tensor, Tensor]:
    """1-D waveforms -> zero-padded waveforms [B, S] float32 and lengths [B] in samples.

    Each waveform is copied once, into the padded batch; read-only arrays (Arrow buffers) are fine.
    """
    arrays = [w.detach().cpu().numpy() if isinstance(w, Tensor) else np.asarray(w) for w in waveforms]
    for index, array in enumerate(arrays):
        if array.ndim != 1:
            raise ValueError(f"waveforms[{index}] must be 1-D samples, got {tuple(array.shape)}")
    lengths = torch.tensor([len(a) for a in arrays], dtype=torch.long)
    padded = np.zeros((len(arrays), int(lengths.max()) if arrays else 0), dtype=np.float32)
    for index, array in enumerate(arrays):
        padded[index, : len(array)] = array
    return torch.from_numpy(padded), lengths


@functools.cache
def _space_before(punctuation: frozenset[str]) -> re.Pattern[str]:
    marks = sorted(punctuation, key=lambda mark: (-len(mark), mark))
    return re.compile(r"(\s)(" + "|".join(re.escape(mark) for mark in marks) + ")")


def hypothesis_text(tokenizer, tokens: Sequence[int]) -> str:
    """Token ids -> the text NeMo 3.0's decoding gives a hypothesis: the tokenizer's text with the one space
    before each of the vocabulary's punctuation marks removed (`decode_tokens_to_str_with_strip_punctuation`).
    SentencePiece writes that space where a mark follows a lone "▁" piece or is a "▁," piece of its own,
    which cased, punctuated vocabularies have. `tokenizer` is an `AsrModel`'s or a `ModelLayout`'s."""
    text = tokenizer.ids_to_text([int(t) for t in tokens])
    if tokenizer.punctuation:
        text = _space_before(tokenizer.punctuation).sub(r"\2", text)
    return text


def transcript_of(model: AsrModel | ModelLayout, span_kind: SpanKind, tokens: Sequence[int],
                  frame_indices: Sequence[int], durations: Sequence[int] | None, score: float,
                  token_confidence: Sequence[float] | None = None, aggregation: Aggregation = "min") -> Transcript:
    """One hypothesis (token ids with their encoder frames) -> text, pieces and word spans in seconds; with
    `token_confidence`, each word's confidence (the `aggregation` of its tokens') and the utterance's (of its
    words')."""
    tokenizer = model.tokenizer
    tokens, frame_indices = [int(t) for t in tokens], [int(f) for f in frame_indices]
    durations = [int(d) for d in durations] if durations is not None else None
    pieces = tokenizer.ids_to_pieces(tokens)
    texts = [tokenizer.pieces_to_text([piece]) for piece in pieces]
    spans = refine_punctuation_spans(texts, token_frame_spans(frame_indices, durations, span_kind), span_kind,
                                     tokenizer.punctuation)
    words = word_spans(pieces, texts, spans, model.frame_shift_s, tokenizer.pieces_to_text, tokenizer.punctuation)
    word_confidence = confidence = None
    if token_confidence is not None:
        if len(token_confidence) != len(tokens):
            raise ValueError(f"got {len(token_confidence)} token confidences for {len(tokens)} tokens")
        word_confidence, confidence = _word_and_utterance_confidence(token_confidence, words, aggregation)
    return Transcript(
        text=hypothesis_text(tokenizer, tokens),
        tokens=tokens,
        pieces=pieces,
        frame_indices=frame_indices,
        durations=durations,
        words=words,
        score=float(score),
        word_confidence=word_confidence,
        confidence=confidence,
    )


def _word_and_utterance_confidence(token_confidence: Sequence[float], words: Sequence[Span],
                                   aggregation: Aggregation) -> tuple[list[float], float | None]:
    """Each word's confidence, the `aggregation` of its pieces' (`Span.pieces`), and the utterance's, the same
    aggregation of its words': one `segment_reduce` each, not a reduction per word."""
    if not words:
        return [], None
    segment_ids = torch.full((1, len(token_confidence)), -1, dtype=torch.long)
    for index, word in enumerate(words):
        segment_ids[0, word.pieces[0]: word.pieces[1] + 1] = index
    values = torch.tensor([token_confidence], dtype=torch.float64)
    per_word = segment_reduce(values, segment_ids, len(words), aggregation)  # [1, W]
    utterance = segment_reduce(per_word, torch.zeros_like(per_word, dtype=torch.long), 1, aggregation)
    return per_word[0].tolist(), float(utterance[0, 0])


class GreedyRecognizer:
    """Encoder + greedy decoding of one head of an `AsrModel`, with words timed as NeMo 3.0 times them."""

    def __init__(self, model: AsrModel, head: Head | None = None, config: GreedyConfig | None = None) -> None:
        """`config` None: the checkpoint's own `max_symbols`, as NeMo's transcribe() uses it."""
        head = head or model.heads[0]
        if head not in model.heads:
            raise ValueError(f"head must be one of {model.heads} for this {model.kind} model, got {head!r}")
        decoding = DecodingConfig(strategy=GREEDY_BY_HEAD[head],
                                  max_symbols=config.max_symbols if config is not None else None)
        plan = plan_decoding(model.facts, decoding, device=model.device.type)
        self.model = model
        self.head = head
        self.span_kind = plan.span_kind
        self.decode = plan.build_decoder(model)  # encoder_output [B, T, D], encoder_lengths [B] -> hypotheses

    def transcripts(self, hypotheses: BatchedHypotheses) -> list[Transcript]:
        """Hypotheses -> text, pieces and word spans in seconds."""
        return [transcript_of(self.model, self.span_kind, h.tokens, h.frame_indices, h.durations, h.score)
                for h in hypotheses.to_list()]

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


def head_agreement(text: str, other: str) -> float:
    """How far a hybrid model's other head agrees with the chosen head's `text`: 1 - the word error rate of `other`
    against `text` (jiwer), both in their plain form (`pipeline/lm/text.py::plain_text`: a comma or a capital one
    head writes and the other not is no disagreement), floored at 0; 1 where both are empty, 0 where only one is."""
    import jiwer

    from pipeline.lm.text import plain_text

    words, other_words = plain_text(text).split(), plain_text(other).split()
    if not words or not other_words:
        return float(not words and not other_words)
    return max(0.0, 1.0 - jiwer.wer(" ".join(words), " ".join(other_words)))

