"""Waveforms -> text, tokens and word timestamps in seconds: encoder + our greedy decoders, end to end.

Works on any `AsrModel` head: the transducer (RNN-T or TDT, `LabelLoopingGreedy`) or the CTC head
(`CtcGreedy`) of CTC and hybrid models. Ray-free: a pipeline stage calls it on a batch.

Dims: B batch, S samples, T encoder frames, D encoder features.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from decoders.ctc import CtcGreedy, collapse_blanks
from decoders.ctc_beam import CtcBeamConfig, CtcBeamSearch
from decoders.hypotheses import BatchedHypotheses, Hypothesis
from decoders.ngram.lm import NgramLm
from decoders.timestamps import Span, SpanKind, refine_punctuation_spans, token_frame_spans, word_spans
from decoders.transducer_beam import AesBeamSearch, AlsdBeamSearch, BeamSearchConfig, WindBeamSearch
from decoders.transducer_greedy import GreedyConfig, LabelLoopingGreedy
from pipeline.config import DecodingConfig
from pipeline.models import AsrModel, Head, ModelLayout, fetch_model


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


def transcript_of(model: AsrModel | ModelLayout, span_kind: SpanKind, tokens: Sequence[int],
                  frame_indices: Sequence[int], durations: Sequence[int] | None, score: float) -> Transcript:
    """One hypothesis (token ids with their encoder frames) -> text, pieces and word spans in seconds."""
    tokenizer = model.tokenizer
    tokens, frame_indices = [int(t) for t in tokens], [int(f) for f in frame_indices]
    durations = [int(d) for d in durations] if durations is not None else None
    pieces = tokenizer.ids_to_pieces(tokens)
    texts = [tokenizer.pieces_to_text([piece]) for piece in pieces]
    spans = refine_punctuation_spans(texts, token_frame_spans(frame_indices, durations, span_kind), span_kind,
                                     tokenizer.punctuation)
    return Transcript(
        text=tokenizer.ids_to_text(tokens),
        tokens=tokens,
        pieces=pieces,
        frame_indices=frame_indices,
        durations=durations,
        words=word_spans(pieces, texts, spans, model.frame_shift_s, tokenizer.pieces_to_text,
                         tokenizer.punctuation),
        score=float(score),
    )


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


# --- any decoding strategy ---------------------------------------------------------------------------------
Decode = Callable[[Tensor, Tensor], BatchedHypotheses]


def load_language_model(decoding: DecodingConfig, vocab_size: int, cache_dir: str,
                        device: torch.device | str = "cpu") -> NgramLm | None:
    """The n-gram LM of `decoding` (None without one), fetched once per node through the cache.

    A name containing `.arpa` is read as a token-level ARPA file (plain or gzip); anything else as the binary
    written by `python -m decoders.ngram.build`, which is memory-mapped.
    """
    if not decoding.lm_uri or decoding.lm_weight == 0.0:
        return None
    is_arpa = ".arpa" in decoding.lm_uri.rsplit("/", 1)[-1]
    path = fetch_model(decoding.lm_uri, sha256=decoding.lm_sha256, cache_dir=f"{cache_dir}/lms",
                       suffix=".arpa" if is_arpa else ".lm")
    lm = NgramLm.from_arpa(path, vocab_size) if is_arpa else NgramLm.load(path)
    if lm.vocab_size != vocab_size:
        raise ValueError(f"{decoding.lm_uri}: the LM covers {lm.vocab_size} labels but the model has {vocab_size} "
                         "(build it with this model's tokenizer)")
    return lm.to(device)


def head_vocab_size(model: AsrModel | ModelLayout, decoding: DecodingConfig) -> int:
    head = decoding_head(model, decoding)
    return model.transducer.vocab_size if head == "transducer" else model.ctc.vocab_size


def decoding_head(model: AsrModel | ModelLayout, decoding: DecodingConfig) -> Head:
    """The head a strategy decodes; plain `greedy` of a CTC-only model is CTC greedy."""
    if decoding.head == "ctc" or (decoding.strategy == "greedy" and model.transducer is None):
        if model.ctc is None:
            raise ValueError(f"decoding strategy {decoding.strategy!r} needs a CTC head; this {model.kind} model has "
                             f"none (use greedy, wind_greedy, alsd, aes or wind_beam)")
        return "ctc"
    if model.transducer is None:
        raise ValueError(f"decoding strategy {decoding.strategy!r} needs a transducer head; this {model.kind} model "
                         f"is CTC only (use greedy, ctc_greedy or ctc_beam)")
    return "transducer"


def build_decoder(model: AsrModel, decoding: DecodingConfig, lm: NgramLm | None = None) -> tuple[Decode, SpanKind]:
    """encoder_output [B, T, D], encoder_lengths [B] -> hypotheses, for every strategy except `ctc_beam` (which
    `ctc_beam_decoder` runs on CTC log-probs), and the span kind its token frames follow."""
    head = decoding_head(model, decoding)
    strategy = decoding.strategy
    if head == "ctc":
        if strategy == "ctc_beam":
            raise ValueError("ctc_beam runs on CTC log-probs: use compact_ctc_log_probs and ctc_beam_decoder")
        greedy = CtcGreedy(blank_id=model.ctc.blank_id, lm=lm, lm_weight=decoding.lm_weight if lm else 0.0)

        def decode_ctc(encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
            with torch.no_grad():
                return greedy(model.ctc.log_probs(encoder_output), encoder_lengths)

        return decode_ctc, "ctc"
    transducer = model.transducer
    span_kind: SpanKind = "tdt" if transducer.durations else "rnnt"
    max_symbols = decoding.max_symbols or model.max_symbols
    lm_weight = decoding.lm_weight if lm is not None else 0.0
    if strategy in ("greedy", "wind_greedy"):
        window = decoding.window_size if strategy == "wind_greedy" else 1
        return LabelLoopingGreedy(transducer, GreedyConfig(
            max_symbols=max_symbols, window_size=window, lm_weight=lm_weight,
            use_cuda_graphs=decoding.use_cuda_graphs), lm), span_kind
    if strategy == "wind_beam" and transducer.durations:
        raise ValueError("decoding strategy 'wind_beam' supports RNN-T only; this model is TDT (use alsd or aes)")
    config = BeamSearchConfig(beam_size=decoding.beam_size, max_symbols_per_frame=max_symbols, lm_weight=lm_weight,
                              blank_lm_scoring=decoding.blank_lm_scoring, pruning=decoding.pruning,
                              window_size=decoding.window_size, use_cuda_graphs=decoding.use_cuda_graphs)
    search = {"alsd": AlsdBeamSearch, "aes": AesBeamSearch, "wind_beam": WindBeamSearch}[strategy]
    return search(transducer, config, lm), span_kind


@torch.no_grad()
def compact_ctc_log_probs(model: AsrModel, encoder_output: Tensor, encoder_lengths: Tensor,
                          collapse_threshold: float | str | None) -> list[CompactCtc]:
    """The CTC head's log-probs, blank-collapsed, per utterance: ([T', V] float16, [T'] original frames).

    What the GPU stage hands to the CPU stage for `ctc_beam`: collapse drops most frames of a trained model,
    and float16 halves the rest.
    """
    log_probs = model.ctc.log_probs(encoder_output).float()  # [B, T, V]
    lengths = encoder_lengths.to(log_probs.device)
    if collapse_threshold is not None:  # "weak": frames whose argmax is blank
        threshold = None if collapse_threshold == "weak" else float(collapse_threshold)
        log_probs, lengths, frame_map = collapse_blanks(log_probs, lengths, model.ctc.blank_id, threshold)
    else:
        frame_map = torch.arange(log_probs.shape[1], device=log_probs.device).expand(log_probs.shape[0], -1)
    log_probs, lengths, frame_map = log_probs.half().cpu(), lengths.cpu(), frame_map.cpu()
    return [(log_probs[b, : lengths[b]].numpy(), frame_map[b, : lengths[b]].numpy().astype(np.int32))
            for b in range(log_probs.shape[0])]


CompactCtc = tuple[np.ndarray, np.ndarray]  # ([T', V] float16 log-probs, [T'] original frames) of one utterance


def ctc_beam_decoder(model: AsrModel | ModelLayout, decoding: DecodingConfig,
                     lm: NgramLm | None = None) -> Callable[[Sequence[CompactCtc]], list[Hypothesis]]:
    """Compact CTC log-probs of utterances (see `compact_ctc_log_probs`) -> the best hypothesis of each, with
    tokens at original encoder frames."""
    decoding_head(model, decoding)
    search = CtcBeamSearch(model.ctc.blank_id, CtcBeamConfig(
        beam_size=decoding.beam_size, lm_weight=decoding.lm_weight if lm is not None else 0.0,
        insertion_bonus=decoding.ctc_insertion_bonus, beam_threshold=decoding.ctc_beam_threshold,
        collapse_threshold=None), lm)

    def decode(compact: Sequence[CompactCtc]) -> list[Hypothesis]:
        if not compact:
            return []
        lengths = torch.tensor([len(frames) for _, frames in compact], dtype=torch.long)
        num_labels = model.ctc.vocab_size + 1
        log_probs = torch.zeros(len(compact), max(int(lengths.max()), 1), num_labels)
        for b, (values, _) in enumerate(compact):
            log_probs[b, : len(values)] = torch.from_numpy(np.asarray(values, dtype=np.float32))
        return [dataclasses.replace(hypothesis, frame_indices=[int(frames[f]) for f in hypothesis.frame_indices])
                for hypothesis, (_, frames) in zip(search(log_probs, lengths).to_list(), compact)]

    return decode


def decode_in_process(model: AsrModel, decoding: DecodingConfig,
                      lm: NgramLm | None = None) -> tuple[Callable[[Tensor, Tensor], list[Hypothesis]], SpanKind]:
    """Any strategy in one process, as the job's stages run it across actors: encoder_output [B, T, D] and
    encoder_lengths [B] -> the best hypothesis of each utterance (tokens at encoder frames), and the span kind
    its frames follow. For evaluations and benchmarks; the LM is fused only where `decoding.lm_weight` > 0."""
    lm = lm if decoding.lm_weight > 0 else None
    if decoding.strategy == "ctc_beam":
        search = ctc_beam_decoder(model, decoding, lm)
        return (lambda encoder_output, encoder_lengths: search(compact_ctc_log_probs(
            model, encoder_output, encoder_lengths, decoding.ctc_collapse_threshold))), "ctc"
    decode, span_kind = build_decoder(model, decoding, lm)
    return (lambda encoder_output, encoder_lengths: decode(encoder_output, encoder_lengths).to_list()), span_kind
