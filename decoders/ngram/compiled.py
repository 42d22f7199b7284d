"""The n-gram LM's full-vocabulary `advance` compiled for the CPU (numba): what `NgramLm.advance` runs there.

For each state, its row of V scores and next states is built as the back-off formula reads (the same as
`tensors.scatter_arcs_torch` and `walk_torch`, bit for bit: the same float32 sums in the same order): every
label starts from the empty context's arc plus the back-off weights of the whole chain, then the arcs of each
state on the chain overwrite their labels, least specific first, each plus the back-offs passed before that
state. That is V + (the arcs on the chain) writes per state, in one pass, against the torch version's dozen
tensor ops with host synchronisation per call (which is what held it below the goal of 50x a KenLM per-label
loop: measured in docs/benchmarks.md, "N-gram LM"). `fill_row` is shared with the compiled CTC beam search,
which builds the same rows for the prefixes it scores densely.

The arrays are numpy views of the LM's tensors (`LmArrays.of`, no copies for an LM read or memory-mapped on
the CPU); the outputs are torch tensors whose memory the kernel writes. The first call of a process compiles
the kernel (a few seconds) or loads it from numba's cache (`cache=True`).

Dims: B states, V labels (no blank), L chain levels (at most N - 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numba import njit
from torch import Tensor

from decoders.ngram.tensors import NgramTensors

MAX_CHAIN = 64  # back-off chain levels a row may have: orders up to 65


@dataclass(frozen=True)
class LmArrays:
    """An `NgramTensors`' arrays as numpy views, in the dtypes the kernels take."""

    arc_offsets: np.ndarray  # int64
    arc_keys: np.ndarray  # int64
    arc_weights: np.ndarray  # float32
    arc_targets: np.ndarray  # int32
    backoff_targets: np.ndarray  # int64
    backoff_weights: np.ndarray  # float32
    vocab_size: int

    @classmethod
    def of(cls, lm: NgramTensors) -> LmArrays:
        def array(tensor: Tensor, dtype) -> np.ndarray:
            return np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=dtype)

        if lm.max_order > MAX_CHAIN + 1:
            raise ValueError(f"the compiled LM kernels take orders up to {MAX_CHAIN + 1}, got {lm.max_order}")
        return cls(array(lm.arc_offsets, np.int64), array(lm.arc_keys, np.int64), array(lm.arc_weights, np.float32),
                   array(lm.arc_targets, np.int32), array(lm.backoff_targets, np.int64),
                   array(lm.backoff_weights, np.float32), int(lm.vocab_size))


def advance_compiled(arrays: LmArrays, states: Tensor) -> tuple[Tensor, Tensor]:
    """states [B] (CPU) -> (scores [B, V] float32, next_states [B, V] long), as `tensors.advance_torch`."""
    batch_size, vocab_size = states.shape[0], arrays.vocab_size
    scores = torch.empty((batch_size, vocab_size), dtype=torch.float32)
    next_states = torch.empty((batch_size, vocab_size), dtype=torch.long)
    if batch_size:
        rows = np.ascontiguousarray(states.detach().numpy(), dtype=np.int64)
        _advance_rows(rows, scores.numpy(), next_states.numpy(), vocab_size, arrays.arc_offsets, arrays.arc_keys,
                      arrays.arc_weights, arrays.arc_targets, arrays.backoff_targets, arrays.backoff_weights)
    return scores, next_states


@njit(cache=True, nogil=True)
def _advance_rows(states, scores, next_states, vocab_size, arc_offsets, arc_keys, arc_weights, arc_targets,
                  backoff_targets, backoff_weights):
    for b in range(states.shape[0]):
        fill_row(states[b], scores[b], next_states[b], vocab_size, arc_offsets, arc_keys, arc_weights, arc_targets,
                 backoff_targets, backoff_weights)


@njit(cache=True, nogil=True)
def fill_row(state, row_scores, row_next, vocab_size, arc_offsets, arc_keys, arc_weights, arc_targets,
             backoff_targets, backoff_weights):
    """`state`'s scores and next states of every label into row_scores [V] and row_next [V] (module docstring)."""
    chain = np.empty(MAX_CHAIN, dtype=np.int64)
    accumulated = np.empty(MAX_CHAIN, dtype=np.float32)
    depth = 0
    total = np.float32(0.0)
    while state != 0:
        chain[depth] = state
        accumulated[depth] = total
        depth += 1
        total = total + backoff_weights[state]
        state = backoff_targets[state]
    for label in range(vocab_size):  # the empty context holds every label, at arc index == label
        row_scores[label] = total + arc_weights[label]
        row_next[label] = arc_targets[label]
    for level in range(depth - 1, -1, -1):  # more specific contexts overwrite: the most specific last
        context = chain[level]
        base = context * vocab_size
        for arc in range(arc_offsets[context], arc_offsets[context + 1]):
            label = arc_keys[arc] - base
            row_scores[label] = accumulated[level] + arc_weights[arc]
            row_next[label] = arc_targets[arc]


__all__ = ["LmArrays", "advance_compiled", "fill_row"]
