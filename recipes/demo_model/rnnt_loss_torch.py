"""Vectorized RNN-T (Graves, 2012) and TDT (Xu et al., 2023) losses for CPU training, drop-ins for NeMo's
`RNNTLoss._loss`.

NeMo 3.0's CPU RNN-T loss (`warprnnt_numba` on CPU tensors) walks the T x U lattice in plain Python with
one torch scalar operation per cell: it took most of a training step here. This version loops over frames
only; the recursion along the label axis within one frame is a log-cumulative-sum:

    alpha[t, u] = logsumexp_k<=u (alpha[t-1, k] + blank[t-1, k] + sum_{k<=j<u} label[t, j])
                = C[u] + logcumsumexp_k(alpha[t-1, k] + blank[t-1, k] - C[k]),  C[u] = sum_{j<u} label[t, j]

and autograd gives the gradients. The recursion runs in float64 because C grows to thousands of nats.
Training only: the exported model's config still names NeMo's loss, and inference never calls it.

NeMo 3.0 has no CPU TDT loss at all (`tdt` is CUDA-only; `tdt_pytorch` loops over every lattice cell in
Python and calls `.cuda()`). The TDT recursion is the same idea: arcs from earlier frames (blank or label with
a duration of 1 or more) come from alphas already computed, and duration-0 label arcs within one frame are the
same log-cumulative-sum as above.

Dims: B batch, T frames, U target tokens, V vocabulary with blank.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def rnnt_log_likelihood(logits: Tensor, labels: Tensor, frame_lengths: Tensor, label_lengths: Tensor,
                        blank_id: int) -> Tensor:
    """logits [B, T, U+1, V], labels [B, U], frame_lengths [B], label_lengths [B] -> log p(labels | audio) [B]."""
    batch_size, max_frames, max_labels_plus_one, _ = logits.shape
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    blank = log_probs[..., blank_id].double()  # [B, T, U+1]
    max_labels = max_labels_plus_one - 1
    index = labels[:, None, :max_labels, None].long().expand(batch_size, max_frames, max_labels, 1)
    emit = log_probs[:, :, :max_labels, :].gather(-1, index).squeeze(-1).double()  # [B, T, U]
    zero = blank.new_zeros(batch_size, max_frames, 1)
    emit_prefix = torch.cat([zero, emit.cumsum(-1)], dim=-1)  # [B, T, U+1]: C[t, u] = sum_{j<u} emit[t, j]

    alphas = [emit_prefix[:, 0]]  # [B, U+1] at t = 0: emit labels only
    for t in range(1, max_frames):
        previous = alphas[-1] + blank[:, t - 1]
        alphas.append(emit_prefix[:, t] + torch.logcumsumexp(previous - emit_prefix[:, t], dim=-1))
    alpha = torch.stack(alphas, dim=1)  # [B, T, U+1]

    rows = torch.arange(batch_size, device=logits.device)
    last_frame = (frame_lengths.long() - 1).clamp(min=0)
    last_label = label_lengths.long()
    return alpha[rows, last_frame, last_label] + blank[rows, last_frame, last_label]


NEG = -1e30  # "impossible" in float64 without the NaN gradients of -inf - -inf


def tdt_log_likelihood(logits: Tensor, labels: Tensor, frame_lengths: Tensor, label_lengths: Tensor, blank_id: int,
                       durations: list[int], sigma: float = 0.0) -> Tensor:
    """logits [B, T, U+1, V + len(durations)] (token logits, blank last among them, then duration logits) -> log p
    [B] under the TDT model: a label or blank with duration d moves from frame t to t + d (d >= 1 for blank), and
    the last arc is a blank that reaches frame T exactly. `sigma`: logit under-normalization, as NeMo's loss."""
    batch_size, max_frames, max_labels_plus_one, _ = logits.shape
    n_durations = len(durations)
    token_lp = torch.log_softmax(logits[..., :-n_durations].float(), dim=-1) - sigma
    duration_lp = torch.log_softmax(logits[..., -n_durations:].float(), dim=-1).double()  # [B, T, U+1, D]
    blank = token_lp[..., blank_id].double()  # [B, T, U+1]
    max_labels = max_labels_plus_one - 1
    index = labels[:, None, :max_labels, None].long().expand(batch_size, max_frames, max_labels, 1)
    emit = token_lp[:, :, :max_labels, :].gather(-1, index).squeeze(-1).double()  # [B, T, U]
    zero = blank.new_zeros(batch_size, 1)

    alphas: list[Tensor] = []
    for t in range(max_frames):
        into = blank.new_full((batch_size, max_labels_plus_one), NEG)
        if t == 0:
            into = torch.cat([zero, into[:, 1:]], dim=-1)
        for n, d in enumerate(durations):
            if d == 0 or t - d < 0:
                continue
            source = alphas[t - d]
            via_blank = source + blank[:, t - d] + duration_lp[:, t - d, :, n]
            via_label = source[:, :-1] + emit[:, t - d] + duration_lp[:, t - d, :-1, n]
            into = torch.logaddexp(into, via_blank)
            into = torch.cat([into[:, :1], torch.logaddexp(into[:, 1:], via_label)], dim=-1)
        if 0 in durations:  # duration-0 labels within frame t: the log-cumulative-sum of the RNN-T recursion
            step = emit[:, t] + duration_lp[:, t, :-1, durations.index(0)]
            prefix = torch.cat([zero, step.cumsum(-1)], dim=-1)
            into = prefix + torch.logcumsumexp(into - prefix, dim=-1)
        alphas.append(into)
    alpha = torch.stack(alphas, dim=1)  # [B, T, U+1]

    rows = torch.arange(batch_size, device=logits.device)
    last_label = label_lengths.long()
    ends = []
    for n, d in enumerate(durations):
        if d == 0:
            continue
        frame = frame_lengths.long() - d
        valid = frame >= 0
        frame = frame.clamp(min=0)
        end = alpha[rows, frame, last_label] + blank[rows, frame, last_label] + duration_lp[rows, frame, last_label, n]
        ends.append(torch.where(valid, end, torch.full_like(end, NEG)))
    return torch.logsumexp(torch.stack(ends), dim=0)


def _reduce(losses: Tensor, label_lens: Tensor, reduction: str | None) -> Tensor:
    if reduction == "mean_batch":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        return (losses / label_lens).mean()
    return losses


class RNNTLossTorch(nn.Module):
    """Same call as NeMo's RNNTLossNumba: per-utterance negative log-likelihood when `reduction` is None."""

    def __init__(self, blank: int, reduction: str | None = None) -> None:
        super().__init__()
        self.blank = blank
        self.reduction = reduction

    def forward(self, acts: Tensor, labels: Tensor, act_lens: Tensor, label_lens: Tensor) -> Tensor:
        losses = -rnnt_log_likelihood(acts, labels, act_lens, label_lens, self.blank).to(acts.dtype)
        return _reduce(losses, label_lens, self.reduction)


class TDTLossTorch(nn.Module):
    """Same call as NeMo's TDTLossNumba (acts: token logits then duration logits). No `omega` (the share of
    plain RNN-T loss mixed in) and no FastEmit: the recipe sets both to 0."""

    def __init__(self, blank: int, durations: list[int], sigma: float = 0.0, reduction: str | None = None) -> None:
        super().__init__()
        if not durations or any(d < 0 for d in durations) or max(durations) < 1:
            raise ValueError(f"TDT durations must be >= 0 with at least one >= 1, got {durations}")
        self.blank, self.durations, self.sigma, self.reduction = blank, list(durations), sigma, reduction

    def forward(self, acts: Tensor, labels: Tensor, act_lens: Tensor, label_lens: Tensor) -> Tensor:
        log_likelihood = tdt_log_likelihood(acts, labels, act_lens, label_lens, self.blank, self.durations, self.sigma)
        return _reduce(-log_likelihood.to(acts.dtype), label_lens, self.reduction)


def use_torch_rnnt_loss(model: nn.Module) -> None:
    """Swap the loss function inside a NeMo transducer model's RNNTLoss (shared with its joint): the RNN-T
    loss, or for a TDT model (NeMo's `tdt` loss) the TDT loss with the same durations and sigma."""
    blank = model.loss._blank
    current = model.loss._loss
    if hasattr(current, "durations"):  # TDTLossNumba
        if getattr(current, "omega", 0.0) or getattr(current, "fastemit_lambda", 0.0):
            raise ValueError("the torch TDT loss has no omega or FastEmit; set model.loss.tdt_kwargs to 0 for both")
        model.loss._loss = TDTLossTorch(blank=blank, durations=current.durations, sigma=current.sigma,
                                        reduction=current.reduction)
    else:
        model.loss._loss = RNNTLossTorch(blank=blank, reduction=current.reduction)
