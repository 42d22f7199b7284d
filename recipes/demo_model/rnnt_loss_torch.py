"""A vectorized RNN-T loss for CPU training (Graves, 2012), a drop-in for NeMo's `RNNTLoss._loss`.

NeMo 3.0's CPU RNN-T loss (`warprnnt_numba` on CPU tensors) walks the T x U lattice in plain Python with
one torch scalar operation per cell: it took most of a training step here. This version loops over frames
only; the recursion along the label axis within one frame is a log-cumulative-sum:

    alpha[t, u] = logsumexp_k<=u (alpha[t-1, k] + blank[t-1, k] + sum_{k<=j<u} label[t, j])
                = C[u] + logcumsumexp_k(alpha[t-1, k] + blank[t-1, k] - C[k]),  C[u] = sum_{j<u} label[t, j]

and autograd gives the gradients. The recursion runs in float64 because C grows to thousands of nats.
Training only: the exported model's config still names NeMo's loss, and inference never calls it.

Dims: B batch, T frames, U target tokens, V vocabulary with blank.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def rnnt_log_likelihood(logits: Tensor, labels: Tensor, frame_lengths: Tensor, label_lengths: Tensor, blank_id: int) -> Tensor:
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


class RNNTLossTorch(nn.Module):
    """Same call as NeMo's RNNTLossNumba: per-utterance negative log-likelihood when `reduction` is None."""

    def __init__(self, blank: int, reduction: str | None = None) -> None:
        super().__init__()
        self.blank = blank
        self.reduction = reduction

    def forward(self, acts: Tensor, labels: Tensor, act_lens: Tensor, label_lens: Tensor) -> Tensor:
        losses = -rnnt_log_likelihood(acts, labels, act_lens, label_lens, self.blank).to(acts.dtype)
        if self.reduction == "mean_batch":
            return losses.mean()
        if self.reduction == "sum":
            return losses.sum()
        if self.reduction == "mean":
            return (losses / label_lens).mean()
        return losses


def use_torch_rnnt_loss(model: nn.Module) -> None:
    """Swap the loss function inside a NeMo transducer model's RNNTLoss (shared with its joint)."""
    blank = model.loss._blank
    model.loss._loss = RNNTLossTorch(blank=blank, reduction=model.loss._loss.reduction)
