"""Batched greedy decoding for RNN-T and TDT: label-looping (with an optional WIND window).

- `LabelLoopingGreedy`: Bataev et al., 2024, "Label-Looping: Highly Efficient Decoding for Transducers",
  Algorithm 3. The outer loop runs once per emitted label for the whole batch; the inner loop re-runs only the
  joint, moving each utterance over its blank frames until it finds a label. The prediction network runs once
  per label, batched over all utterances. With `window_size` W > 1 the inner search evaluates the joint on W
  frames at once and jumps to the first label among them (WIND, "Windowed Non-blank Detection", Algorithm 2);
  since the prediction output does not change over blank frames, the labels are exactly those of plain greedy.
  The loop here is shaped for CUDA graphs (fixed shapes, masks, no host reads); on a CPU the same search runs
  with its bookkeeping on the host instead (`decoders/transducer/label_looping_cpu.py`).
- `FrameLoopingGreedy` (`decoders/transducer/frame_looping.py`), the conventional batched baseline (label-looping paper,
  Algorithm 2), loops over frames, and on each frame over labels, running the joint and the prediction network
  for the whole batch.

Shallow fusion with a label-level LM (`LabelLoopingGreedy(model, config, lm=...)`, `config.lm_weight`), as NeMo
defines it for greedy transducer decoding: the plain argmax over all labels decides blank or not; when it is
not blank, the label is re-picked among the non-blank labels by `logits + lm_weight * lm_scores`. The re-pick
uses the joint's raw logits, as NeMo does on a GPU (on the CPU NeMo's joint returns log-probs): both give the
same label, since log-softmax shifts every label of a row by the same constant. LM states advance only on
emitted labels; blanks and durations are untouched. `token_scores` stay the joint's log-probability of each
emitted label, and `scores` add `lm_weight` times the LM log-probability of each emitted label (no
end-of-sentence term, as in NeMo's transducer decoders). The LM needs `blank_id == vocab_size` (NeMo's
layout), so that LM label i is model label i. With `lm_weight` 0 the LM is dropped when the decoder is built:
the result is plain greedy's. The LM is moved to the decoder's `device` once, when it is built.

Both follow NeMo's rules, so they give NeMo's `greedy_batch` tokens: blank is fed first; a blank moves
`max(duration, 1)` frames (RNN-T: 1); a label stays on its frame (RNN-T) or moves `duration` frames (TDT, any
duration set), even past the end; after `max_symbols` labels in a row on one frame, the frame moves on.

Dims: B batch, T frames, D encoder features, H joint hidden, V labels with blank, N durations, W window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from decoders.confidence import (
    ConfidenceConfig,
    aggregate_pair,
    aggregation_identity,
    combine,
    reduce_masked,
    token_confidence,
)
from decoders.fusion import lm_for_fusion
from decoders.hypotheses import BatchedHypotheses
from decoders.protocols import LanguageModel, TransducerModel
from decoders.transducer.label_looping_cpu import label_looping_cpu
from decoders.transducer.shared import CudaGraphFallback, capture_cuda_graphs, checked_inputs, replays_cuda_graphs


@dataclass(frozen=True)
class GreedyConfig:
    max_symbols: int = 10  # labels per frame before the frame is forced on (NeMo's max_symbols)
    window_size: int = 1  # WIND window W; 1 is plain label looping
    use_cuda_graphs: bool = True  # replay CUDA graphs of the loop bodies when decoding on a GPU
    # on a CPU, keep the loop's bookkeeping on the host (decoders/transducer/label_looping_cpu.py); False runs the
    # tensor loop a GPU runs (tests and benchmarks compare the two)
    host_loop: bool = True
    lm_weight: float = 0.0  # shallow-fusion weight of the LM passed to the decoder (NeMo's ngram_lm_alpha)

    def __post_init__(self) -> None:
        if self.max_symbols < 1:
            raise ValueError(f"max_symbols must be >= 1, got {self.max_symbols}")
        if self.window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {self.window_size}")


def best_label_scores(logits: Tensor, num_labels: int) -> tuple[Tensor, Tensor, Tensor]:
    """logits [..., V (+N)] -> (log-probability of the best label, best label, logsumexp of the label logits),
    all [...] (confidence reuses the logsumexp)."""
    label_logits = logits[..., :num_labels]
    best_logits, labels = label_logits.max(dim=-1)
    log_norm = torch.logsumexp(label_logits, dim=-1)
    return best_logits - log_norm, labels, log_norm


def _fused_label_scores(logits: Tensor, num_labels: int, lm_term: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Like `best_label_scores`, with a non-blank winner re-picked by `logits + lm_term` (blank is the last
    label).

    logits [..., V (+N)], lm_term [..., V - 1] (lm_weight * LM scores) -> (the joint's log-probability of the
    chosen label, chosen label, logsumexp of the label logits), all [...].
    """
    label_logits = logits[..., :num_labels]
    _, labels = label_logits.max(dim=-1)  # the same call as `best_label_scores`: the same blank decision on ties
    fused_labels = (label_logits[..., : num_labels - 1] + lm_term).argmax(dim=-1)
    labels = torch.where(labels == num_labels - 1, labels, fused_labels)
    chosen = label_logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    log_norm = torch.logsumexp(label_logits, dim=-1)
    return chosen - log_norm, labels, log_norm


class _LoopState:
    """Every tensor the label-looping loop reads or writes, preallocated so CUDA graphs can replay over it.

    All per-utterance vectors are [B]; `encoder_projected` is [B, T, H].
    """

    def __init__(self, model: TransducerModel, encoder_projected: Tensor, hypotheses_capacity: int,
                 lm: LanguageModel | None = None, with_confidence: bool = False) -> None:
        batch_size, max_time, _ = encoder_projected.shape
        device, dtype = encoder_projected.device, encoder_projected.dtype
        long = dict(dtype=torch.long, device=device)
        boolean = dict(dtype=torch.bool, device=device)
        self.batch_size = batch_size
        self.max_time = max_time
        self.encoder_projected = encoder_projected
        self.encoder_lengths = torch.zeros(batch_size, **long)
        self.last_frames = torch.zeros(batch_size, **long)
        self.batch_indices = torch.arange(batch_size, **long)
        self.time = torch.zeros(batch_size, **long)
        self.label_time = torch.zeros(batch_size, **long)  # frame at which `labels` were found
        self.labels = torch.zeros(batch_size, **long)
        self.label_scores = torch.zeros(batch_size, dtype=dtype, device=device)
        self.label_durations = torch.zeros(batch_size, **long)
        self.active = torch.zeros(batch_size, **boolean)
        self.active_before = torch.zeros(batch_size, **boolean)
        self.step_mask = torch.zeros(batch_size, **boolean)
        self.advance = torch.zeros(batch_size, **boolean)
        self.found = torch.zeros(batch_size, **boolean)
        self.prediction = encoder_projected.new_zeros(batch_size, encoder_projected.shape[-1])  # projected
        self.predictor_state = model.initial_state(batch_size, device, dtype)
        self.hypotheses = BatchedHypotheses(batch_size, hypotheses_capacity, device, dtype,
                                            with_durations=len(model.durations) > 0,
                                            with_confidence=with_confidence)
        # confidence: that of the step that found `labels`, and the running aggregate (mean: sum) and count
        # of the blank steps since each row's last label (they join that label when the next one is stored).
        # With exclude_blank only the label's step is measured: the search keeps its logits (one masked copy
        # a step) and the measure runs once per label, batched, after the search (not on every search step).
        confidence_size = batch_size if with_confidence else 0
        num_outputs = model.vocab_size + 1 + len(model.durations)
        self.label_confidence = torch.zeros(confidence_size, dtype=dtype, device=device)
        self.label_logits = torch.zeros(confidence_size, num_outputs, dtype=dtype, device=device)  # [B, V (+N)]
        self.label_steps: _LabelSteps | None = None  # eager mode: the measure runs K labels at a time
        self.blank_confidence = torch.zeros(confidence_size, dtype=dtype, device=device)
        self.blank_count = torch.zeros(confidence_size, **long)
        # shallow fusion: each row's LM state, and lm_weight * the LM's scores and the next states for every
        # label from it (computed once per label emitted, read by every search step until the next one)
        self.lm_states = torch.zeros(batch_size if lm is not None else 0, **long)
        vocab = lm.vocab_size if lm is not None else 0
        self.lm_weighted_scores = torch.zeros(self.lm_states.shape[0], vocab, dtype=dtype, device=device)  # [B, V-1]
        self.lm_next_states = torch.zeros(self.lm_states.shape[0], vocab, **long)  # [B, V - 1]


class _LabelSteps:
    """Eager mode with exclude_blank: where each row's label was found (its frame and the prediction it was
    found with) over the last K outer iterations; every K labels the joint is run again on those steps, for the
    rows that found a label, and measured, batched. The search then keeps nothing per step, and at batch 1 the
    measure's dozen small ops run once per K labels, not once per label. Memory: [B, K, H]."""

    def __init__(self, state: _LoopState, slots: int = 64) -> None:
        batch_size, hidden = state.prediction.shape
        self.predictions = state.prediction.new_zeros(batch_size, slots, hidden)  # [B, K, H]
        self.frames = torch.zeros(batch_size, slots, dtype=torch.long, device=state.prediction.device)
        self.found = torch.zeros(batch_size, slots, dtype=torch.bool, device=state.prediction.device)
        self.start_lengths = torch.zeros_like(state.hypotheses.token_lengths)  # token_lengths at slot 0
        self.used = 0

    def record_(self, state: _LoopState) -> None:
        """Before the found labels are appended and the prediction network moves on."""
        if self.used == 0:
            self.start_lengths.copy_(state.hypotheses.token_lengths)
        self.predictions[:, self.used].copy_(state.prediction)
        self.frames[:, self.used].copy_(state.label_time)
        self.found[:, self.used].copy_(state.found)
        self.used += 1

    def flush_(self, decoder: LabelLoopingGreedy, state: _LoopState, force: bool = False) -> None:
        """When K steps are kept (or with `force`): write their labels' confidence into the hypotheses."""
        if self.used == 0 or (self.used < self.found.shape[1] and not force):
            return
        found = self.found[:, :self.used]
        positions = state.hypotheses.token_lengths.new_zeros(found.shape)
        torch.cumsum(found.long(), dim=1, out=positions)
        rows, slots = found.nonzero(as_tuple=True)
        # the joint of each label's own step: the frame it was found on, with the prediction it was found with
        logits = decoder.model.joint_after_projection(
            state.encoder_projected[rows, self.frames[rows, slots]], self.predictions[rows, slots])  # [labels, V (+N)]
        token_confidence = state.hypotheses.token_confidence
        token_positions = self.start_lengths[rows] + positions[rows, slots] - 1
        token_confidence[rows, token_positions] = decoder._step_confidence(logits).to(token_confidence.dtype)
        self.used = 0


class LabelLoopingGreedy:
    """Label-looping greedy search for RNN-T and TDT, optionally with a WIND window (see module docstring)."""

    def __init__(self, model: TransducerModel, config: GreedyConfig = GreedyConfig(),
                 lm: LanguageModel | None = None, *, device: torch.device | str | None = None,
                 confidence: ConfidenceConfig | None = None) -> None:
        """`device`: where inputs will be, so where the LM is moved, once (None: the LM stays where it is).
        `confidence`: carry per-token confidence (`hypotheses.token_confidence`), NeMo's rules (see
        `decoders.confidence`); None costs nothing."""
        if lm is not None and model.blank_id != model.vocab_size:
            raise ValueError(f"LM fusion needs blank_id == vocab_size (NeMo's layout), got {model.blank_id}")
        self.model = model
        self.config = config
        self.lm = lm_for_fusion(lm, config.lm_weight, model.vocab_size, device)  # None at lm_weight 0
        self.num_labels = model.vocab_size + 1
        self.is_tdt = len(model.durations) > 0
        self._durations_cache: dict[torch.device, Tensor] = {}
        self._graphs: _CudaGraphsRunner | None = None
        self.graph_fallback = CudaGraphFallback(type(self).__name__)  # graphs failing -> eager, warned once
        self.confidence = confidence

    # --- public face -----------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        """encoder_output [B, T, D], encoder_lengths [B] -> the greedy hypothesis of each utterance."""
        encoder_lengths = checked_inputs(encoder_output, encoder_lengths, self.lm)
        if replays_cuda_graphs(self.config.use_cuda_graphs, encoder_output) and self.graph_fallback.graphs_on:
            return self.graph_fallback.run(lambda: self._replay_graphs(encoder_output, encoder_lengths),
                                           lambda: self._decode_without_graphs(encoder_output, encoder_lengths))
        return self._decode_without_graphs(encoder_output, encoder_lengths)

    def _replay_graphs(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        if self._graphs is None:
            self._graphs = _CudaGraphsRunner(self)
        return self._graphs(encoder_output, encoder_lengths)

    def _decode_without_graphs(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        self._graphs = None  # after a graph failure: its preallocated state is of no further use
        if self.config.host_loop and encoder_output.device.type == "cpu":
            return label_looping_cpu(self.model, encoder_output, encoder_lengths, self.config.max_symbols,
                                     self.config.window_size, self.lm, self.config.lm_weight, self.confidence)
        return self._decode_eager(encoder_output, encoder_lengths)

    # --- the loop, as step functions over a _LoopState ---------------------------------------------------
    def _durations_on(self, device: torch.device) -> Tensor:
        if device not in self._durations_cache:
            self._durations_cache[device] = torch.tensor(self.model.durations, dtype=torch.long, device=device)
        return self._durations_cache[device]

    def _decode_eager(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        max_time = encoder_output.shape[1]
        encoder_projected = self.model.project_encoder(encoder_output)
        # one label per utterance per outer iteration: start small and grow between iterations (no sync)
        state = _LoopState(self.model, encoder_projected, hypotheses_capacity=max_time + 1, lm=self.lm,
                           with_confidence=self.confidence is not None)
        state.encoder_lengths.copy_(encoder_lengths)
        if self.confidence is not None and self.confidence.exclude_blank:
            state.label_steps = _LabelSteps(state)
        self._start(state)
        outer_iterations = 0
        while bool(state.active.any()):
            self._first_search(state)
            while bool(state.advance.any()):
                self._inner_search(state)
            outer_iterations += 1
            state.hypotheses.ensure_capacity_(outer_iterations)
            self._after_search(state, compact=True)
        if state.label_steps is not None:
            state.label_steps.flush_(self, state, force=True)
        self._finish_confidence(state)
        return state.hypotheses

    def _start(self, state: _LoopState) -> None:
        """Before the outer loop: feed the blank, reset time, masks and results."""
        torch.clamp(state.encoder_lengths - 1, min=0, out=state.last_frames)
        state.time.zero_()
        torch.less(state.time, state.encoder_lengths, out=state.active)
        state.labels.fill_(self.model.blank_id)
        initial = self.model.initial_state(state.batch_size, state.prediction.device, state.prediction.dtype)
        prediction, predictor_state = self.model.predict(state.labels, initial)
        state.prediction.copy_(self.model.project_prediction(prediction))
        for buffer, value in zip(state.predictor_state, predictor_state):
            buffer.copy_(value)
        state.hypotheses.reset_()
        if self.confidence is not None:
            state.blank_confidence.fill_(aggregation_identity(self.confidence.aggregation))
            state.blank_count.zero_()
        if self.lm is not None:
            state.lm_states.copy_(self.lm.initial_states(state.batch_size))
            self._advance_lm(state)

    def _advance_lm(self, state: _LoopState) -> None:
        """lm_weight * the LM's scores, and the next states, of every label from each row's current LM state."""
        lm_scores, lm_next_states = self.lm.advance(state.lm_states)
        state.lm_weighted_scores.copy_(lm_scores)
        state.lm_weighted_scores.mul_(self.config.lm_weight)
        state.lm_next_states.copy_(lm_next_states)

    def _lm_term(self, state: _LoopState) -> Tensor | None:
        return state.lm_weighted_scores if self.lm is not None else None  # [B, V - 1]

    def _first_search(self, state: _LoopState) -> None:
        state.active_before.copy_(state.active)
        state.step_mask.copy_(state.active)
        self._search(state)

    def _inner_search(self, state: _LoopState) -> None:
        state.step_mask.copy_(state.advance)
        self._search(state)

    def _search(self, state: _LoopState) -> None:
        """For rows in step_mask: look for a label from `time` on (one frame, or a window of W frames).

        Afterwards a row that found a label holds it in `labels` with `label_time`, and `time` has moved by
        the label's duration; a row that found only blanks has moved past them (`labels` is blank) and is
        marked in `advance` if it is still inside its utterance.
        """
        window = self.config.window_size
        if window == 1:
            frames = torch.minimum(state.time, state.last_frames)
            logits = self.model.joint_after_projection(
                state.encoder_projected[state.batch_indices, frames], state.prediction)  # [B, V (+N)]
            lm_term = self._lm_term(state)
            if lm_term is None:
                scores, labels, log_norm = best_label_scores(logits, self.num_labels)
            else:
                scores, labels, log_norm = _fused_label_scores(logits, self.num_labels, lm_term)
            is_blank = labels == self.model.blank_id
            if self.is_tdt:
                durations = self._durations_on(logits.device)[logits[:, self.num_labels:].argmax(dim=-1)]
                jumps = torch.where(is_blank, durations.clamp(min=1), durations)
            else:
                durations = None
                jumps = is_blank.long()
            offsets = torch.zeros_like(state.time)
            confidence_parts = None
            if self.confidence is not None and state.label_steps is None:
                if self.confidence.exclude_blank:
                    confidence_parts = (logits,)
                else:
                    step_confidence = self._step_confidence(logits, log_norm)  # [B]
                    counted = is_blank & self._counts_blank(state, frames)
                    blank_confidence = torch.where(counted, step_confidence,
                                                   aggregation_identity(self.confidence.aggregation))
                    confidence_parts = step_confidence, blank_confidence, counted.long()
        else:
            labels, scores, durations, offsets, jumps, confidence_parts = self._search_window(state, window)

        mask = state.step_mask
        if confidence_parts is not None:
            if self.confidence.exclude_blank:
                # keep the step's logits: the measure of the label's step runs in `_after_search`
                torch.where(mask.unsqueeze(1), confidence_parts[0].to(state.label_logits.dtype), state.label_logits,
                            out=state.label_logits)
            else:
                label_confidence, blank_confidence, blank_count = confidence_parts
                torch.where(mask, label_confidence.to(state.label_confidence.dtype), state.label_confidence,
                            out=state.label_confidence)
                merged = combine(self.confidence.aggregation, state.blank_confidence,
                                 blank_confidence.to(state.blank_confidence.dtype))
                torch.where(mask, merged, state.blank_confidence, out=state.blank_confidence)
                state.blank_count += torch.where(mask, blank_count, 0)
        torch.where(mask, labels, state.labels, out=state.labels)
        torch.where(mask, scores.to(state.label_scores.dtype), state.label_scores, out=state.label_scores)
        if durations is not None:
            torch.where(mask, durations, state.label_durations, out=state.label_durations)
        torch.where(mask, state.time + offsets, state.label_time, out=state.label_time)
        torch.where(mask, state.time + jumps, state.time, out=state.time)
        torch.less(state.time, state.encoder_lengths, out=state.active)
        torch.logical_and(state.active, state.labels == self.model.blank_id, out=state.advance)

    def _step_confidence(self, logits: Tensor, log_norm: Tensor | None = None) -> Tensor:
        """logits [..., V (+N)] -> the confidence of each step [...] (TDT with durations: label and duration
        measures aggregated, as NeMo does). `log_norm` [...]: the logsumexp of the label logits, if the search
        has it already."""
        config = self.confidence
        label_logits = logits[..., :self.num_labels]
        if log_norm is None:
            label_log_probs = torch.log_softmax(label_logits, dim=-1)
        else:
            label_log_probs = label_logits - log_norm.unsqueeze(-1)
        confidence = token_confidence(label_log_probs, config, self.num_labels)
        if self.is_tdt and config.tdt_include_duration:
            duration_log_probs = torch.log_softmax(logits[..., self.num_labels:], dim=-1)
            duration_confidence = token_confidence(duration_log_probs, config, self.num_labels)  # NeMo: V labels
            confidence = aggregate_pair(config.aggregation, confidence, duration_confidence)
        return confidence

    def _counts_blank(self, state: _LoopState, frames: Tensor) -> Tensor:
        """frames [B] or [B, W] -> whether a blank step there joins the row's last label (NeMo): any blank
        after a label for TDT; for RNN-T, blanks on frames after the label's own frame."""
        hypotheses = state.hypotheses
        token_lengths, last_frame = hypotheses.token_lengths, hypotheses.last_frame
        if frames.dim() == 2:
            token_lengths, last_frame = token_lengths.unsqueeze(1), last_frame.unsqueeze(1)
        counted = (token_lengths > 0).expand_as(frames)
        if not self.is_tdt:
            counted = counted & (frames != last_frame)
        return counted

    def _search_window(
        self, state: _LoopState, window: int
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor, tuple[Tensor, ...] | None]:
        """WIND: the joint on frames time .. time+W-1 at once; follow blanks to the first label among them.

        Returns labels, scores, durations (TDT), the offset of the label within the window, how far
        `time` moves (to after the label's duration, or past the blanks when the window holds no label), and,
        with confidence, that of the label's step and the aggregate and count of the blank steps before it
        (exclude_blank: the label step's logits, measured after the search).
        """
        offsets = torch.arange(window, device=state.time.device)
        frames = state.time.unsqueeze(1) + offsets  # [B, W]
        inside = frames < state.encoder_lengths.unsqueeze(1)
        frames = torch.minimum(frames, state.last_frames.unsqueeze(1))
        logits = self.model.joint_after_projection(
            state.encoder_projected[state.batch_indices.unsqueeze(1), frames],  # [B, W, H]
            state.prediction.unsqueeze(1),
        )  # [B, W, V (+N)]
        lm_term = self._lm_term(state)
        if lm_term is None:
            scores, labels, log_norm = best_label_scores(logits, self.num_labels)  # [B, W]
        else:  # the LM state is the same on every frame of the window: no label is emitted inside it
            scores, labels, log_norm = _fused_label_scores(logits, self.num_labels, lm_term.unsqueeze(1))  # [B, W]
        is_label = (labels != self.model.blank_id) & inside
        with_blanks = self.confidence is not None and not self.confidence.exclude_blank
        step_confidence = self._step_confidence(logits, log_norm) if with_blanks else None  # [B, W]
        visited_blanks = torch.zeros_like(inside)  # [B, W] blank steps on the way to the label
        if self.is_tdt:
            durations = self._durations_on(logits.device)[logits[..., self.num_labels:].argmax(dim=-1)]  # [B, W]
            # follow the chain of blanks, each moving max(duration, 1) frames, until a label or the window end
            position = torch.zeros_like(state.time)
            blank_jumps = durations.clamp(min=1)
            for _ in range(window):
                safe = position.clamp(max=window - 1).unsqueeze(1)
                moving = (position < window) & ~is_label.gather(1, safe).squeeze(1) & inside.gather(1, safe).squeeze(1)
                visited_blanks.scatter_(1, safe, moving.unsqueeze(1) | visited_blanks.gather(1, safe))
                position = position + torch.where(moving, blank_jumps.gather(1, safe).squeeze(1), 0)
            safe = position.clamp(max=window - 1).unsqueeze(1)
            found = (position < window) & is_label.gather(1, safe).squeeze(1)
            label_durations = durations.gather(1, safe).squeeze(1)
        else:
            found = is_label.any(dim=1)
            position = torch.where(found, is_label.int().argmax(dim=1), window)  # argmax: the first label
            safe = position.clamp(max=window - 1).unsqueeze(1)
            label_durations = None
            visited_blanks = inside & (offsets < position.unsqueeze(1))
        labels = torch.where(found, labels.gather(1, safe).squeeze(1), self.model.blank_id)
        scores = scores.gather(1, safe).squeeze(1)
        jumps = position + label_durations * found if label_durations is not None else position
        confidence_parts = None
        if step_confidence is not None:
            counted = visited_blanks & self._counts_blank(state, state.time.unsqueeze(1) + offsets)
            blank_confidence, blank_count = reduce_masked(self.confidence.aggregation, step_confidence, counted)
            confidence_parts = step_confidence.gather(1, safe).squeeze(1), blank_confidence, blank_count
        elif self.confidence is not None and state.label_steps is None:
            # exclude_blank (CUDA graphs): the label step's logits, measured after the search
            label_logits = logits.gather(1, safe.unsqueeze(2).expand(-1, -1, logits.shape[2])).squeeze(1)
            confidence_parts = (label_logits,)
        return labels, scores, label_durations, position, jumps, confidence_parts

    def _after_search(self, state: _LoopState, compact: bool = False) -> None:
        """Store found labels, run the prediction network once for the batch, apply max_symbols.

        With `compact` (eager mode only: it reads the found rows on the host), the prediction network runs on
        the rows that found a label and no others; CUDA graphs need the fixed-shape step over every row.
        """
        torch.logical_and(state.active_before, state.labels != self.model.blank_id, out=state.found)
        label_steps = state.label_steps
        if label_steps is not None:
            label_steps.record_(state)
        elif self.confidence is not None:
            if self.confidence.exclude_blank:  # one measure per label, batched (rows not found are ignored)
                state.label_confidence.copy_(self._step_confidence(state.label_logits))
            self._close_label_confidence(state, state.found)
        state.hypotheses.append_(state.found, state.labels, state.label_time, state.label_scores,
                                 state.label_durations if self.is_tdt else None,
                                 state.label_confidence if self.confidence is not None and label_steps is None
                                 else None)
        if label_steps is not None:
            label_steps.flush_(self, state)
        rows = state.found.nonzero().squeeze(1) if compact else None
        if rows is not None and len(rows) < state.batch_size:
            if len(rows) > 0:
                prediction, predictor_state = self.model.predict(
                    state.labels[rows], self.model.select_states(state.predictor_state, rows))
                state.prediction[rows] = self.model.project_prediction(prediction)
                # back to batch rows: row b takes compacted row position[b] (rows not found are not replaced)
                position = torch.zeros_like(state.labels)
                position[rows] = torch.arange(len(rows), device=rows.device)
                self.model.replace_states_(state.predictor_state,
                                           self.model.select_states(predictor_state, position), state.found)
        else:
            prediction, predictor_state = self.model.predict(state.labels, state.predictor_state)
            torch.where(state.found.unsqueeze(1), self.model.project_prediction(prediction), state.prediction,
                        out=state.prediction)
            self.model.replace_states_(state.predictor_state, predictor_state, state.found)
        if self.lm is not None:
            emitted = torch.where(state.found, state.labels, 0).unsqueeze(1)
            lm_label_scores = state.lm_weighted_scores.gather(1, emitted).squeeze(1)
            state.hypotheses.scores += torch.where(state.found, lm_label_scores, 0.0)
            torch.where(state.found, state.lm_next_states.gather(1, emitted).squeeze(1), state.lm_states,
                        out=state.lm_states)
            self._advance_lm(state)
        # after max_symbols labels in a row on the current frame, move one frame on
        hypotheses = state.hypotheses
        forced = state.found & state.active & (hypotheses.last_frame == state.time)
        forced &= hypotheses.last_frame_count >= self.config.max_symbols
        state.time += forced
        torch.less(state.time, state.encoder_lengths, out=state.active)


    def _close_label_confidence(self, state: _LoopState, rows: Tensor) -> None:
        """For rows [B] (bool), fold the blank steps counted since the last label into that label's
        confidence and start the count again (exclude_blank: nothing to fold)."""
        config = self.confidence
        if config.exclude_blank:
            return
        hypotheses = state.hypotheses
        positions = (hypotheses.token_lengths - 1).clamp(min=0)
        batch_rows = state.batch_indices
        own = hypotheses.token_confidence[batch_rows, positions]
        if config.aggregation == "mean":
            closed = (own + state.blank_confidence) / (1 + state.blank_count).to(own.dtype)
        else:
            closed = combine(config.aggregation, own, state.blank_confidence)
        write = rows & (hypotheses.token_lengths > 0)
        hypotheses.token_confidence[batch_rows, positions] = torch.where(write, closed, own)
        state.blank_confidence.masked_fill_(rows, aggregation_identity(config.aggregation))
        state.blank_count.masked_fill_(rows, 0)

    def _finish_confidence(self, state: _LoopState) -> None:
        """After the loop: each row's last label takes the blank steps after it."""
        if self.confidence is not None:
            self._close_label_confidence(state, torch.ones_like(state.found))


class _CudaGraphsRunner:
    """Replays CUDA graphs of the label-looping loop bodies (NeMo's "no_while_loops" mode).

    Four graphs (start, first search, inner search, after search) are captured once over a preallocated
    `_LoopState` sized for the largest batch seen; the two loop conditions are read on the host. Hypotheses
    are preallocated at the bound frames x max_symbols, since buffers cannot grow inside a graph. A capture or
    replay that raises leaves the decoder to `CudaGraphFallback` (eager from then on, warned once).
    """

    def __init__(self, decoder: LabelLoopingGreedy) -> None:
        self.decoder = decoder
        self.state: _LoopState | None = None
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self.replays: dict[str, Callable[[], None]] = {}  # name -> its graph's replay

    def _capture(self, encoder_projected: Tensor, batch_size: int, max_time: int) -> None:
        decoder = self.decoder
        device = encoder_projected.device
        max_time = max(64, ((max_time + 63) // 64) * 64)  # round up so nearby lengths reuse the graphs
        buffer = encoder_projected.new_zeros(batch_size, max_time, encoder_projected.shape[-1])
        self.state = _LoopState(decoder.model, buffer, hypotheses_capacity=max_time * decoder.config.max_symbols,
                                lm=decoder.lm, with_confidence=decoder.confidence is not None)
        steps = {
            "start": lambda: decoder._start(self.state),
            "first": lambda: decoder._first_search(self.state),
            "inner": lambda: decoder._inner_search(self.state),
            "after": lambda: decoder._after_search(self.state),
        }
        self.replays = {}  # a failed capture leaves none behind
        self.graphs = capture_cuda_graphs(steps, device)
        self.replays = {name: graph.replay for name, graph in self.graphs.items()}

    def __call__(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        batch_size, max_time, _ = encoder_output.shape
        encoder_projected = self.decoder.model.project_encoder(encoder_output)
        state = self.state
        if (state is None or state.batch_size < batch_size or state.max_time < max_time
                or state.encoder_projected.device != encoder_projected.device
                or state.encoder_projected.dtype != encoder_projected.dtype):
            self._capture(encoder_projected, batch_size, max_time)
            state = self.state
        state.encoder_projected[:batch_size, :max_time].copy_(encoder_projected)
        state.encoder_lengths.zero_()  # rows past the batch stay empty
        state.encoder_lengths[:batch_size].copy_(encoder_lengths)
        replays = self.replays
        replays["start"]()
        while bool(state.active.any()):
            replays["first"]()
            while bool(state.advance.any()):
                replays["inner"]()
            replays["after"]()
        self.decoder._finish_confidence(state)
        return state.hypotheses.select(batch_size)
