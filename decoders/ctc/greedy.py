"""CTC blank collapse and batched CTC greedy decoding, with optional n-gram LM fusion.

- `collapse_blanks`: blank collapse (Jung et al., 2023, "Blank Collapse: Compressing CTC Emission for the
  Faster Decoding"). Frames marked blank are dropped at the start and end of each utterance, and each interior
  run of them shrinks to its last frame; every other frame is kept. A frame is marked blank when
  p(blank) > threshold, or, with `threshold=None` (the weak variant), when its argmax is blank, which leaves
  greedy output unchanged (the paper's eq. 1). The map from collapsed to original frames lets decoders report
  original frames.
- `CtcGreedy`: best label per frame, repeats merged, blanks dropped. With an LM it fuses the way NeMo's
  `GreedyBatchedCTCInfer` does (see the class docstring).

Labels are `0 .. V-1` with blank at `blank_id`; an LM sees the non-blank labels renumbered without blank
(`lm_label = label - (label > blank_id)`), which for NeMo's layout (`blank_id == V - 1`) is the identity.

Dims: B batch, T frames, T' collapsed frames, V labels with blank, U emitted labels.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from decoders.confidence import ConfidenceConfig, ctc_token_confidence
from decoders.fusion import check_lm_device, check_lm_vocab_size, lm_for_fusion
from decoders.hypotheses import BatchedHypotheses
from decoders.protocols import LanguageModel


def check_ctc_inputs(log_probs: Tensor, lengths: Tensor, blank_id: int) -> None:
    """The checks every CTC entry point makes, with messages that name the tensor."""
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be [B, T, V], got {tuple(log_probs.shape)}")
    if not log_probs.dtype.is_floating_point:
        raise ValueError(f"log_probs must be floating point, got {log_probs.dtype}")
    if lengths.dim() != 1 or lengths.shape[0] != log_probs.shape[0]:
        raise ValueError(f"lengths must be [B] with B={log_probs.shape[0]}, got {tuple(lengths.shape)}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must hold integers, got {lengths.dtype}")
    if not 0 <= blank_id < log_probs.shape[2]:
        raise ValueError(f"blank_id must lie in [0, V={log_probs.shape[2]}), got {blank_id}")
    if lengths.numel() > 0:
        low, high = int(lengths.min()), int(lengths.max())
        if low < 0 or high > log_probs.shape[1]:
            raise ValueError(f"lengths must lie in [0, T={log_probs.shape[1]}], got values in [{low}, {high}]")


def lm_to_ctc_labels(lm_values: Tensor, blank_id: int, blank_value: float) -> Tensor:
    """[..., V-1] over LM labels -> [..., V] over CTC labels, with `blank_value` in the blank column."""
    blank_column = lm_values.new_full((*lm_values.shape[:-1], 1), blank_value)
    return torch.cat([lm_values[..., :blank_id], blank_column, lm_values[..., blank_id:]], dim=-1)


def ctc_to_lm_labels(labels: Tensor, blank_id: int) -> Tensor:
    """CTC labels -> LM labels (blank itself maps to 0, a valid index; callers mask it)."""
    return torch.where(labels == blank_id, 0, labels - (labels > blank_id).long())


def blank_frame_mask(log_probs: Tensor, lengths: Tensor, blank_id: int, threshold: float | None) -> Tensor:
    """[B, T] bool: frames inside each utterance marked blank (argmax is blank, or p(blank) > threshold)."""
    if threshold is None:
        is_blank = log_probs.max(dim=-1).indices == blank_id
    else:
        is_blank = log_probs[..., blank_id] > math.log(threshold)
    inside = torch.arange(log_probs.shape[1], device=log_probs.device) < lengths.unsqueeze(1)
    return is_blank & inside


@torch.no_grad()
def collapse_blanks(
    log_probs: Tensor, lengths: Tensor, blank_id: int, threshold: float | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Blank collapse of a padded batch (module docstring).

    log_probs [B, T, V], lengths [B] -> (collapsed_log_probs [B, T', V], collapsed_lengths [B],
    frame_map [B, T'] long: original frame of each collapsed frame). T' is the longest collapsed length (one host
    synchronization). Entries past `collapsed_lengths[b]` are padding: `frame_map` holds 0 there and the
    log-probs are copies of frame 0. An utterance of only blank frames collapses to length 0.
    """
    check_ctc_inputs(log_probs, lengths, blank_id)
    if threshold is not None and not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie in (0, 1) or be None (weak collapse), got {threshold}")
    lengths = lengths.to(device=log_probs.device, dtype=torch.long)
    batch_size, max_time, _ = log_probs.shape
    is_blank = blank_frame_mask(log_probs, lengths, blank_id, threshold)  # [B, T]
    inside = torch.arange(max_time, device=log_probs.device) < lengths.unsqueeze(1)
    is_label = inside & ~is_blank
    # a blank frame survives when it ends an interior run: a label frame before it and one right after it
    labels_before = (torch.cumsum(is_label.long(), dim=1) - is_label.long()) > 0
    label_next = torch.zeros_like(is_label)
    label_next[:, :-1] = is_label[:, 1:]
    keep = is_label | (is_blank & labels_before & label_next)  # [B, T]

    collapsed_lengths = keep.sum(dim=1)
    new_time = int(collapsed_lengths.max()) if batch_size > 0 else 0
    # a stable sort puts the kept frames first, in order
    order = torch.sort((~keep).to(torch.uint8), dim=1, stable=True).indices[:, :new_time]  # [B, T']
    valid = torch.arange(new_time, device=log_probs.device) < collapsed_lengths.unsqueeze(1)
    frame_map = torch.where(valid, order, 0)
    collapsed = torch.gather(log_probs, 1, frame_map.unsqueeze(-1).expand(-1, -1, log_probs.shape[2]))
    return collapsed, collapsed_lengths, frame_map


class CtcGreedy:
    """Batched CTC greedy decoding: the best label per frame, repeats merged, blanks dropped.

    Each token is reported at the first frame of its run (`frame_indices`, in the frames given), with the
    log-probability of its label on that frame (`token_scores`); `scores` is their sum plus `lm_weight` times
    the LM log-probability of the tokens (no end-of-sentence term); `durations` is None.

    LM fusion follows NeMo's `GreedyBatchedCTCInfer` with `ngram_lm_alpha`: a frame whose plain argmax is blank
    or repeats the label chosen on the previous frame keeps it; any other frame re-picks among the labels
    except blank and the previous frame's label by `log_probs + lm_weight * lm_scores`, emits the pick, and
    advances the LM state with it. The LM covers the non-blank labels: `lm.vocab_size == V - 1`, blank
    anywhere (NeMo puts it last, `blank_id == lm.vocab_size`; other positions renumber, see module docstring).
    With `lm_weight` 0 the LM is dropped when the decoder is built; a fused LM is moved to `device` then, once
    (None: it stays where it is), and `log_probs` must come from that device.
    """

    def __init__(
        self,
        blank_id: int,
        lm: LanguageModel | None = None,
        lm_weight: float = 0.0,
        *,
        device: torch.device | str | None = None,
        confidence: ConfidenceConfig | None = None,
    ) -> None:
        """`confidence`: carry per-token confidence (`hypotheses.token_confidence`, NeMo's CTC rules, see
        `decoders.confidence`); None costs nothing."""
        if blank_id < 0:
            raise ValueError(f"blank_id must be >= 0, got {blank_id}")
        self.blank_id = blank_id
        self.lm_weight = float(lm_weight)
        # the labels come with each input: lm.vocab_size is checked against them per call
        self.lm = lm_for_fusion(lm, self.lm_weight, None, device)
        self.confidence = confidence

    @torch.no_grad()
    def __call__(self, log_probs: Tensor, lengths: Tensor) -> BatchedHypotheses:
        """log_probs [B, T, V] (log-softmax output), lengths [B] -> the greedy hypothesis of each utterance."""
        check_ctc_inputs(log_probs, lengths, self.blank_id)
        lengths = lengths.to(device=log_probs.device, dtype=torch.long)
        if self.lm is not None:
            check_lm_vocab_size(self.lm, log_probs.shape[2] - 1)
            check_lm_device(self.lm, log_probs.device, "log_probs")
            if log_probs.shape[2] > 1:  # with blank alone there is nothing to fuse
                return self._with_confidence(log_probs, lengths, *self._decode_with_lm(log_probs, lengths))
        best_scores, labels = log_probs.max(dim=-1)  # [B, T]
        previous = torch.cat([torch.full_like(labels[:, :1], self.blank_id), labels[:, :-1]], dim=1)
        inside = torch.arange(log_probs.shape[1], device=log_probs.device) < lengths.unsqueeze(1)
        emitted = inside & (labels != self.blank_id) & (labels != previous)
        hypotheses = _gather_emitted(emitted, labels, best_scores, torch.zeros_like(best_scores))
        return self._with_confidence(log_probs, lengths, hypotheses, labels, emitted)

    def _with_confidence(self, log_probs: Tensor, lengths: Tensor, hypotheses: BatchedHypotheses, labels: Tensor,
                         emitted: Tensor) -> BatchedHypotheses:
        """Attach per-token confidence from the frame measures of log_probs [B, T, V] (if configured)."""
        if self.confidence is not None:
            hypotheses.token_confidence = ctc_token_confidence(
                log_probs, labels, emitted, lengths, self.blank_id, self.confidence, hypotheses.capacity)
        return hypotheses

    def _decode_with_lm(self, log_probs: Tensor, lengths: Tensor) -> tuple[BatchedHypotheses, Tensor, Tensor]:
        """-> hypotheses, and the label [B, T] and whether a token starts [B, T] of every frame."""
        batch_size, max_time, _ = log_probs.shape
        device, blank_id, lm = log_probs.device, self.blank_id, self.lm
        batch_indices = torch.arange(batch_size, device=device)
        lm_states = lm.initial_states(batch_size)  # [B]
        last_labels = torch.full((batch_size,), blank_id, dtype=torch.long, device=device)
        all_labels = torch.zeros(batch_size, max_time, dtype=torch.long, device=device)
        all_scores = torch.zeros(batch_size, max_time, dtype=log_probs.dtype, device=device)
        all_lm_scores = torch.zeros_like(all_scores)
        emitted = torch.zeros(batch_size, max_time, dtype=torch.bool, device=device)
        active_time = int(lengths.max()) if batch_size > 0 else 0
        for t in range(active_time):
            frame = log_probs[:, t]  # [B, V]
            labels = frame.max(dim=-1).indices
            lm_scores, next_states = lm.advance(lm_states)  # [B, V-1] each
            lm_scores = lm_to_ctc_labels(lm_scores.to(frame.dtype), blank_id, float("-inf"))  # [B, V]
            fused = frame + self.lm_weight * lm_scores
            fused.scatter_(1, last_labels.unsqueeze(1), float("-inf"))
            fused_labels = fused.max(dim=-1).indices
            keep_plain = (labels == blank_id) | (labels == last_labels)
            labels = torch.where(keep_plain, labels, fused_labels)
            emit = ~keep_plain & (t < lengths)
            lm_labels = ctc_to_lm_labels(labels, blank_id)
            lm_states = torch.where(emit, next_states[batch_indices, lm_labels], lm_states)
            all_labels[:, t] = labels
            all_scores[:, t] = frame[batch_indices, labels]
            all_lm_scores[:, t] = torch.where(emit, lm_scores[batch_indices, labels], 0.0)
            emitted[:, t] = emit
            last_labels = labels
        hypotheses = _gather_emitted(emitted, all_labels, all_scores, self.lm_weight * all_lm_scores)
        return hypotheses, all_labels, emitted


def _gather_emitted(emitted: Tensor, labels: Tensor, token_scores: Tensor, extra_scores: Tensor) -> BatchedHypotheses:
    """Pack the frames in emitted [B, T] into hypotheses: labels, frames and token scores [B, T] -> [B, U].

    `extra_scores` [B, T] (LM terms) is added to the utterance scores only.
    """
    batch_size = emitted.shape[0]
    token_lengths = emitted.sum(dim=1)
    capacity = int(token_lengths.max()) if batch_size > 0 else 0
    hypotheses = BatchedHypotheses(batch_size, capacity, emitted.device, token_scores.dtype)
    rows, frames = emitted.nonzero(as_tuple=True)
    positions = (torch.cumsum(emitted.long(), dim=1) - 1)[rows, frames]
    hypotheses.tokens[rows, positions] = labels[rows, frames]
    hypotheses.frame_indices[rows, positions] = frames
    hypotheses.token_scores[rows, positions] = token_scores[rows, frames]
    hypotheses.token_lengths.copy_(token_lengths)
    hypotheses.scores.copy_(torch.where(emitted, token_scores + extra_scores, 0.0).sum(dim=1))
    return hypotheses
