"""Triton kernel for `NgramLm.advance`: the twin of `decoders.ngram.tensors.advance_torch`, same signature.

One program per (batch row, block of labels). The row's state is a scalar, so each level of the backoff
walk reads one arc range `arc_offsets[s] .. arc_offsets[s + 1]` and binary-searches it for every label of the
block at once; a label keeps the first (most specific) hit plus the backoff weights passed before it; the
empty context (arcs 0 .. V-1, one per label) ends the walk. No atomics and no host synchronization, so a
CUDA graph can capture it. On the CPU it runs under `TRITON_INTERPRET=1` (tests).

Dims: B batch, V labels, A arcs, S states, N order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from decoders.ngram.tensors import NgramTensors

BLOCK_LABELS = 128


@triton.jit
def _advance_kernel(
    states_ptr, arc_offsets_ptr, arc_keys_ptr, arc_weights_ptr, arc_targets_ptr,
    backoff_targets_ptr, backoff_weights_ptr, scores_ptr, next_states_ptr,
    vocab_size,
    LEVELS: tl.constexpr, SEARCH_STEPS: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    labels = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = labels < vocab_size
    labels64 = labels.to(tl.int64)
    state = tl.load(states_ptr + row).to(tl.int64)
    accumulated = tl.zeros([BLOCK], dtype=tl.float32)  # backoff weights passed, same for every label
    scores = tl.zeros([BLOCK], dtype=tl.float32)
    next_states = tl.zeros([BLOCK], dtype=tl.int64)
    found = labels < 0
    for _ in tl.static_range(LEVELS):
        first = tl.load(arc_offsets_ptr + state)
        end = tl.load(arc_offsets_ptr + state + 1)
        keys = state * vocab_size + labels64
        # lower bound of each key in the state's arcs [first, end)
        low = tl.zeros([BLOCK], dtype=tl.int64) + first
        high = tl.zeros([BLOCK], dtype=tl.int64) + end
        for _ in tl.static_range(SEARCH_STEPS):
            searching = low < high
            middle = (low + high) // 2
            middle_key = tl.load(arc_keys_ptr + middle, mask=searching & inside, other=0)
            right = searching & (middle_key < keys)
            low = tl.where(right, middle + 1, low)
            high = tl.where(searching & ~right, middle, high)
        in_range = (low < end) & inside
        hit_key = tl.load(arc_keys_ptr + low, mask=in_range, other=-1)
        hit = in_range & (hit_key == keys) & ~found & ((low * 0 + state) != 0)  # state 0 is handled below
        weight = tl.load(arc_weights_ptr + low, mask=hit, other=0.0)
        target = tl.load(arc_targets_ptr + low, mask=hit, other=0).to(tl.int64)
        scores = tl.where(hit, accumulated + weight, scores)
        next_states = tl.where(hit, target, next_states)
        found = found | hit
        accumulated = accumulated + tl.load(backoff_weights_ptr + state)
        state = tl.load(backoff_targets_ptr + state).to(tl.int64)
    # the empty context holds every label, at arc index == label
    root_weight = tl.load(arc_weights_ptr + labels64, mask=inside, other=0.0)
    root_target = tl.load(arc_targets_ptr + labels64, mask=inside, other=0).to(tl.int64)
    scores = tl.where(found, scores, accumulated + root_weight)
    next_states = tl.where(found, next_states, root_target)
    out = row.to(tl.int64) * vocab_size + labels64
    tl.store(scores_ptr + out, scores, mask=inside)
    tl.store(next_states_ptr + out, next_states, mask=inside)


def advance_triton(lm: NgramTensors, states: Tensor) -> tuple[Tensor, Tensor]:
    """states [B] -> (scores [B, V] float32, next_states [B, V] long) over the whole vocabulary."""
    batch_size, vocab_size = states.shape[0], lm.vocab_size
    scores = torch.empty(batch_size, vocab_size, dtype=torch.float32, device=states.device)
    next_states = torch.empty(batch_size, vocab_size, dtype=torch.long, device=states.device)
    if batch_size == 0:
        return scores, next_states
    search_steps = max(1, int(lm.max_state_arcs).bit_length())  # ceil(log2(arcs + 1)) halvings suffice
    grid = (batch_size, triton.cdiv(vocab_size, BLOCK_LABELS))
    _advance_kernel[grid](
        states.contiguous(), lm.arc_offsets, lm.arc_keys, lm.arc_weights, lm.arc_targets,
        lm.backoff_targets, lm.backoff_weights, scores, next_states,
        vocab_size,
        LEVELS=max(lm.max_order - 1, 0), SEARCH_STEPS=search_steps, BLOCK=BLOCK_LABELS,
    )
    return scores, next_states
