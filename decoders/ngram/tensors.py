"""A token-level back-off n-gram LM as tensors (`NgramTensors`), and its torch `advance`: the twin of the
Triton kernel in `decoders/ngram/triton.py`.

Structure (the GPU n-gram LM of NeMo's `NGramGPULanguageModel`, rebuilt here from the ARPA semantics):
- a state is a context (an n-gram of order < N that appears in the ARPA file, or a missing prefix the
  compiler created); state 0 is the empty context and owns exactly V arcs, one per label, so that every label
  is found there at the latest (labels absent from the ARPA file get the `<unk>` probability, as in KenLM);
  state 1 is the context `<s>`;
- arcs are sorted by (state, label) and stored as keys `state * V + label`, so the arcs of state s are the
  contiguous range `arc_offsets[s] .. arc_offsets[s + 1]`, sorted by label; an arc holds the n-gram's
  log-probability and the state after the label (the longest suffix of context + label that is a state);
- each state has a backoff weight and a backoff target (its longest proper suffix that is a state), and a
  final weight: log p(</s> | context), resolved through backoffs when compiled.

`advance` walks from each state down its backoff chain (at most N - 1 steps), looking up every label at
every level and keeping the most specific hit, plus the backoff weights passed on the way: exactly the
backoff formula `p(w | h) = p_arpa(h w)` if `h w` is listed, else `backoff(h) + p(w | h[1:])`.

Scores are natural logs. Dims: B batch, V labels (no blank), S states, A arcs, N order, K labels queried per
state, L chain levels (at most N - 1).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import Tensor

EMPTY_STATE = 0
BOS_STATE = 1


@dataclass(frozen=True)
class NgramTensors:
    """The LM's arrays. Arcs are sorted by `arc_keys = state * vocab_size + label`."""

    arc_offsets: Tensor  # [S + 1] long: arcs of state s are arc_offsets[s] .. arc_offsets[s + 1]
    arc_keys: Tensor  # [A] long
    arc_weights: Tensor  # [A] float32, natural log
    arc_targets: Tensor  # [A] int32: state after the label
    backoff_targets: Tensor  # [S] long
    backoff_weights: Tensor  # [S] float32, natural log
    final_weights: Tensor  # [S] float32: log p(</s> | state), resolved through backoffs
    vocab_size: int
    max_order: int
    max_state_arcs: int  # most arcs of any state other than state 0 (bounds the binary search)

    @property
    def num_states(self) -> int:
        return self.backoff_targets.shape[0]

    @property
    def num_arcs(self) -> int:
        return self.arc_keys.shape[0]

    @property
    def device(self) -> torch.device:
        return self.arc_keys.device

    def to(self, device: torch.device | str) -> NgramTensors:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, Tensor):
                moved[name] = value.to(device)
        return NgramTensors(**moved)


def walk_torch(lm: NgramTensors, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """states [B], labels [B, K] -> (scores [B, K] float32, next_states [B, K] long): the backoff walk.

    On a GPU the loop has a fixed length and no host synchronization (CUDA graphs can capture it); on the CPU
    it stops as soon as every row has reached the empty context.
    """
    if labels.dim() != 2 or labels.shape[0] != states.shape[0]:
        raise ValueError(f"labels must be [B, K] with B={states.shape[0]}, got {tuple(labels.shape)}")
    vocab_size = lm.vocab_size
    scores = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
    next_states = torch.zeros(labels.shape, dtype=torch.long, device=labels.device)
    found = torch.zeros(labels.shape, dtype=torch.bool, device=labels.device)
    accumulated = torch.zeros(states.shape, dtype=torch.float32, device=labels.device)  # backoffs passed
    last_arc = lm.num_arcs - 1
    state = states
    for _ in range(lm.max_order - 1):
        if not state.is_cuda and not bool(state.any()):
            break
        keys = state.unsqueeze(1) * vocab_size + labels
        index = torch.searchsorted(lm.arc_keys, keys).clamp_(max=last_arc)
        hit = (lm.arc_keys[index] == keys) & ~found & (state != EMPTY_STATE).unsqueeze(1)
        torch.where(hit, accumulated.unsqueeze(1) + lm.arc_weights[index], scores, out=scores)
        torch.where(hit, lm.arc_targets[index].long(), next_states, out=next_states)
        found |= hit
        accumulated = accumulated + lm.backoff_weights[state]
        state = lm.backoff_targets[state]
    # the empty context holds every label, at arc index == label
    torch.where(found, scores, accumulated.unsqueeze(1) + lm.arc_weights[labels], out=scores)
    torch.where(found, next_states, lm.arc_targets[labels].long(), out=next_states)
    return scores, next_states


# The Triton kernel's first compile or launch failure in this process (then the torch twin runs): a Triton that
# cannot compile or launch (a Triton, driver or GPU it does not support, a missing C compiler for its launcher,
# resources a GPU lacks) fails alike for every LM and every call, so it is tried once per process.
_triton_failure: list[str] = []


def triton_failure() -> str | None:
    """Why the Triton `advance` was turned off in this process (its first compile or launch failure), or None."""
    return _triton_failure[0] if _triton_failure else None


def runs_triton(states: Tensor, use_triton: bool | None) -> bool:
    """Whether an `advance` of these states runs the Triton kernel (`decoders/ngram/triton.py`): never once it has
    failed in this process (`triton_failure`), else as `use_triton` says, else for CUDA tensors where Triton is
    importable."""
    if _triton_failure:
        return False
    if use_triton is not None:
        return use_triton
    if not states.is_cuda:
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def advance_torch(lm: NgramTensors, states: Tensor) -> tuple[Tensor, Tensor]:
    """states [B] -> (scores [B, V] float32, next_states [B, V] long) over the whole vocabulary.

    On a GPU: the backoff walk for every label (`walk_torch`: fixed shapes, no host synchronization, so CUDA
    graphs can capture it). On the CPU: `scatter_arcs_torch`, which touches only the arcs of the states on
    each backoff chain and is several times faster there. Both give bit-identical results.
    """
    if states.is_cuda:
        labels = torch.arange(lm.vocab_size, device=states.device).expand(states.shape[0], lm.vocab_size)
        return walk_torch(lm, states, labels)
    return scatter_arcs_torch(lm, states)


def dispatch_advance(lm: NgramTensors, states: Tensor, use_triton: bool | None,
                     advance_cpu: Callable[[Tensor], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """The `advance` of a model over `lm` (the n-gram LM, a boosting tree): states [B] -> (scores [B, V],
    next_states [B, V]) by the Triton kernel where `runs_triton` says, by its torch twin for other CUDA tensors
    (fixed shapes, no host synchronization, so CUDA graphs can capture either), else by `advance_cpu(states)`, the
    model's own CPU path.

    A Triton kernel that fails to compile or launch is reported once (a `RuntimeWarning` with the error) and
    replaced by its torch twin, `advance_torch`, for this call and every later one in the process: the same scores
    (the parity tests compare the two). The first call compiles the kernel; a decoder that replays CUDA graphs
    makes it in its warm-up, outside capture, so the graphs capture whichever runs."""
    if states.dim() != 1:
        raise ValueError(f"states must be [B], got {tuple(states.shape)}")
    if runs_triton(states, use_triton):
        try:
            from decoders.ngram.triton import advance_triton

            return advance_triton(lm, states)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as error:  # noqa: BLE001  (whatever Triton raised: its compiler's, its launcher's, CUDA's)
            first_line = (str(error).strip().splitlines() or [""])[0]
            _triton_failure.append(f"{type(error).__name__}: {first_line}")
            warnings.warn(f"the Triton n-gram kernel failed ({_triton_failure[0]}); the torch advance runs instead, "
                          "with the same scores", RuntimeWarning, stacklevel=2)
        return advance_torch(lm, states)
    if states.is_cuda:
        return advance_torch(lm, states)
    return advance_cpu(states)


def scatter_arcs_torch(lm: NgramTensors, states: Tensor) -> tuple[Tensor, Tensor]:
    """states [B] -> (scores [B, V], next_states [B, V]): start from the empty context's arcs plus every backoff
    weight of the chain, then write the arcs of the states on the chain, where for each label the most
    specific state's arc wins (found with one scatter-min over the chain level of every gathered arc). Sizes
    depend on the data (host synchronization): meant for the CPU.
    """
    vocab_size = lm.vocab_size
    batch_size = states.shape[0]
    chain, accumulated = [states], [torch.zeros(batch_size, dtype=torch.float32, device=states.device)]
    for _ in range(lm.max_order - 1):
        if not bool(chain[-1].any()):
            break
        accumulated.append(accumulated[-1] + lm.backoff_weights[chain[-1]])
        chain.append(lm.backoff_targets[chain[-1]])
    scores = (accumulated[-1].unsqueeze(1) + lm.arc_weights[:vocab_size]).contiguous()
    next_states = lm.arc_targets[:vocab_size].long().expand(batch_size, vocab_size).contiguous()
    levels = len(chain) - 1  # chain[-1] is the empty context everywhere
    if levels == 0 or batch_size == 0:
        return scores, next_states
    level_states = torch.stack(chain[:-1]).reshape(-1)  # [L * B], level-major
    first = lm.arc_offsets[level_states]
    counts = torch.where(level_states != EMPTY_STATE, lm.arc_offsets[level_states + 1] - first, 0)
    total = int(counts.sum())
    if total == 0:
        return scores, next_states
    items = torch.repeat_interleave(torch.arange(levels * batch_size, device=states.device), counts,
                                    output_size=total)  # the (level, row) each gathered arc belongs to
    starts = torch.cumsum(counts, 0) - counts
    arcs = torch.arange(total, device=states.device) - starts[items] + first[items]
    cells = (items % batch_size) * vocab_size + lm.arc_keys[arcs] - level_states[items] * vocab_size
    level = items // batch_size
    most_specific = torch.full((batch_size * vocab_size,), levels, dtype=torch.long, device=states.device)
    most_specific.scatter_reduce_(0, cells, level, reduce="amin")
    keep = most_specific[cells] == level
    cells, arcs, items = cells[keep], arcs[keep], items[keep]
    scores.view(-1)[cells] = torch.stack(accumulated[:-1]).reshape(-1)[items] + lm.arc_weights[arcs]
    next_states.view(-1)[cells] = lm.arc_targets[arcs].long()
    return scores, next_states


__all__ = ["BOS_STATE", "EMPTY_STATE", "NgramTensors", "advance_torch", "dispatch_advance", "runs_triton",
           "scatter_arcs_torch", "walk_torch"]
