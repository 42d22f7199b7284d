"""Check rnnt_loss_torch against NeMo's own losses, values and gradients, and time them: the RNN-T loss against
warprnnt_numba, the TDT loss against NeMo's pure-PyTorch TDT reference (`tdt_pytorch`, which loops over every
lattice cell and calls `.cuda()`: run here on the CPU with `.cuda()` made a no-op). tests/recipes runs the two
comparisons in CI.

    python check_rnnt_loss.py
"""

from __future__ import annotations

import time

import torch
from nemo.collections.asr.losses.rnnt import RNNTLoss
from nemo.collections.asr.losses.rnnt_pytorch import TDTLossPytorch
from rnnt_loss_torch import RNNTLossTorch, TDTLossTorch

TDT_DURATIONS = [0, 1, 2, 3, 4]


def _errors(expected: torch.Tensor, got: torch.Tensor, logits: torch.Tensor) -> tuple[float, float]:
    (expected_grad,) = torch.autograd.grad(expected.sum(), logits)
    (got_grad,) = torch.autograd.grad(got.sum(), logits)
    return (expected - got).abs().max().item(), (expected_grad - got_grad).abs().max().item()


def compare_rnnt() -> tuple[float, float]:
    """Max |loss| and |gradient| differences from NeMo's warprnnt_numba on a small random batch."""
    torch.manual_seed(0)
    batch_size, frames, labels_max, vocab = 5, 13, 6, 11  # vocab includes blank, the last label
    logits = torch.randn(batch_size, frames, labels_max + 1, vocab, requires_grad=True)
    labels = torch.randint(0, vocab - 1, (batch_size, labels_max))
    frame_lengths = torch.tensor([13, 10, 7, 13, 1])
    label_lengths = torch.tensor([6, 3, 0, 5, 1])  # an empty target and a one-frame input included
    nemo_loss = RNNTLoss(num_classes=vocab - 1, reduction=None, loss_name="warprnnt_numba")
    expected = nemo_loss(log_probs=logits, targets=labels, input_lengths=frame_lengths, target_lengths=label_lengths)
    got = RNNTLossTorch(blank=vocab - 1)(logits, labels, frame_lengths, label_lengths)
    return _errors(expected, got, logits)


def compare_tdt() -> tuple[float, float]:
    """Max |loss| and |gradient| differences from NeMo's tdt_pytorch (durations 0-4, sigma 0.05)."""
    torch.manual_seed(1)
    batch_size, frames, labels_max, vocab = 4, 9, 5, 7  # vocab includes blank, the last token
    logits = torch.randn(batch_size, frames, labels_max + 1, vocab + len(TDT_DURATIONS), requires_grad=True)
    labels = torch.randint(0, vocab - 1, (batch_size, labels_max))
    frame_lengths = torch.tensor([9, 6, 3, 2])
    label_lengths = torch.tensor([5, 2, 0, 3])  # an empty target, and more labels than frames (duration 0)
    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # NeMo's reference hard-codes .cuda()
    try:
        expected = TDTLossPytorch(blank=vocab - 1, durations=TDT_DURATIONS, reduction=None, sigma=0.05)(
            acts=logits, labels=labels, act_lens=frame_lengths, label_lens=label_lengths)
        got = TDTLossTorch(blank=vocab - 1, durations=TDT_DURATIONS, sigma=0.05)(
            logits, labels, frame_lengths, label_lengths)
        return _errors(expected, got, logits)
    finally:
        torch.Tensor.cuda = cuda


def main() -> None:
    for name, compare in (("RNN-T vs warprnnt_numba", compare_rnnt), ("TDT vs tdt_pytorch", compare_tdt)):
        loss_error, grad_error = compare()
        print(f"{name}: max |loss difference| {loss_error:.2e}, max |gradient difference| {grad_error:.2e}")
        assert loss_error < 1e-4 and grad_error < 1e-4

    torch.manual_seed(0)
    batch_size, frames, labels_max, vocab = 8, 30, 15, 257  # a small batch: NeMo's CPU loss is slow
    logits = torch.randn(batch_size, frames, labels_max + 1, vocab, requires_grad=True)
    labels = torch.randint(0, vocab - 1, (batch_size, labels_max))
    lengths = (torch.full((batch_size,), frames), torch.full((batch_size,), labels_max))
    nemo_loss = RNNTLoss(num_classes=vocab - 1, reduction=None, loss_name="warprnnt_numba")
    for name, loss in (("torch", RNNTLossTorch(blank=vocab - 1)), ("nemo numba cpu", nemo_loss)):
        started = time.time()
        if name == "torch":
            loss(logits, labels, *lengths).sum().backward()
        else:
            loss(log_probs=logits, targets=labels, input_lengths=lengths[0], target_lengths=lengths[1]).sum().backward()
        print(f"RNN-T {name}: forward + backward on {list(logits.shape)} in {time.time() - started:.2f} s")

    batch_size, frames, labels_max = 32, 100, 40  # a training batch of about 8 s utterances
    logits = torch.randn(batch_size, frames, labels_max + 1, vocab + len(TDT_DURATIONS), requires_grad=True)
    labels = torch.randint(0, vocab - 1, (batch_size, labels_max))
    lengths = (torch.full((batch_size,), frames), torch.full((batch_size,), labels_max))
    for name, loss, width in (("RNN-T torch", RNNTLossTorch(blank=vocab - 1), vocab),
                              ("TDT torch", TDTLossTorch(blank=vocab - 1, durations=TDT_DURATIONS), None)):
        started = time.time()
        loss(logits[..., :width], labels, *lengths).sum().backward()
        print(f"{name}: forward + backward on {list(logits[..., :width].shape)} in {time.time() - started:.2f} s")


if __name__ == "__main__":
    main()
