"""Waveforms -> text, tokens and word timestamps in seconds: encoder + our greedy decoders, end to end.

Works on any `AsrModel` head: the transducer (RNN-T or TDT, `LabelLoopingGreedy`) or the CTC head
(`CtcGreedy`) of CTC and hybrid models. Ray-free: a pipeline stage calls it on a batch.

Dims: B batch, S samples, T encoder frames, D encoder features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from decoders.ctc import CtcGreedy
from decoders.hypotheses import BatchedHypotheses
from decoders.timestamps import Span, refine_punctuation_spans, token_frame_spans, word_spans
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
                texts, token_frame_spans(hypothesis.frame_indices, hypothesis.durations, self.span_kind),
                self.span_kind, tokenizer.punctuation)
            results.append(Transcript(
                text=tokenizer.ids_to_text(hypothesis.tokens),
                tokens=hypothesis.tokens,
                pieces=pieces,
                frame_indices=hypothesis.frame_indices,
                durations=hypothesis.durations,
                words=word_spans(pieces, texts, spans, frame_shift_s, tokenizer.pieces_to_text,
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
