"""Check rnnt_loss_torch against NeMo's own RNN-T loss (warprnnt_numba), values and gradients, and time it.

    python check_rnnt_loss.py
"""

import time

import torch
from nemo.collections.asr.losses.rnnt import RNNTLoss
from rnnt_loss_torch import RNNTLossTorch


def main() -> None:
    torch.manual_seed(0)
    batch_size, frames, labels_max, vocab = 5, 13, 6, 11  # vocab includes blank, the last label
    logits = torch.randn(batch_size, frames, labels_max + 1, vocab, requires_grad=True)
    labels = torch.randint(0, vocab - 1, (batch_size, labels_max))
    frame_lengths = torch.tensor([13, 10, 7, 13, 1])
    label_lengths = torch.tensor([6, 3, 0, 5, 1])  # an empty target and a one-frame input included

    nemo_loss = RNNTLoss(num_classes=vocab - 1, reduction=None, loss_name="warprnnt_numba")
    expected = nemo_loss(log_probs=logits, targets=labels, input_lengths=frame_lengths, target_lengths=label_lengths)
    (expected_grad,) = torch.autograd.grad(expected.sum(), logits)
    got = RNNTLossTorch(blank=vocab - 1)(logits, labels, frame_lengths, label_lengths)
    (got_grad,) = torch.autograd.grad(got.sum(), logits)
    loss_error = (expected - got).abs().max().item()
    grad_error = (expected_grad - got_grad).abs().max().item()
    print(f"max |loss difference| {loss_error:.2e}, max |gradient difference| {grad_error:.2e}")
    assert loss_error < 1e-4 and grad_error < 1e-4

    batch_size, frames, labels_max, vocab = 8, 30, 15, 257  # a small batch: NeMo's CPU loss is slow
    logits = torch.randn(batch_size, frames, labels_max + 1, vocab, requires_grad=True)
    labels = torch.randint(0, vocab - 1, (batch_size, labels_max))
    lengths = (torch.full((batch_size,), frames), torch.full((batch_size,), labels_max))
    for name, loss in (("torch", RNNTLossTorch(blank=vocab - 1)), ("nemo numba cpu", nemo_loss)):
        started = time.time()
        if name == "torch":
            loss(logits, labels, *lengths).sum().backward()
        else:
            loss(log_probs=logits, targets=labels, input_lengths=lengths[0], target_lengths=lengths[1]).sum().backward()
        print(f"{name}: forward + backward on {list(logits.shape)} in {time.time() - started:.2f} s")


if __name__ == "__main__":
    main()
