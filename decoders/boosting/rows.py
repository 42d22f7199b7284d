"""Per-utterance phrase boosting: the boosting trees of several phrase sets in one automaton, each row of a batch
boosted by its own set (NeMo's per-stream biasing, `GPUBiasingMultiModel`, holds many trees in one structure too).

The layout (`union_tensors`) is the n-gram LM's (`decoders/ngram/tensors.py`), so `advance` is the n-gram LM's walk
or Triton kernel unchanged; it holds the disjoint union of the sets' trees
(`decoders.boosting.tree.build_boosting_tensors`):
- state 0 is the root of no set: every label scores 0 and stays there (a row without phrases of its own);
- set j's states follow at `bases[j]` (its state s at `bases[j] + s`), its root at `bases[j]` with one arc per
  label, as the n-gram LM's state 0 has: the set's own root arcs (a label that starts none of its phrases scores
  0 and goes back to the set's root); the root backs off to state 0, which no walk reaches (the root has every
  label);
- the set's failure arcs, backoff weights and final weights, its states moved by `bases[j]`.
A row's walk never leaves its set, and adds the same float32 numbers in the same order as its set's own tree
(`PhraseBoosting`) does: only the root's lookup is one level later (an arc of state `bases[j]` where the tree reads
its state 0's). So each row's scores are bit for bit those of its set's tree, on the CPU (`ResolvedArcs`, which
starts each row from its set root's arcs) and on a GPU (the walk, one level deeper than the deepest set's).

Why a tree per distinct set and not one shared tree with a per-row mask: a node's score (the largest of its
phrases'), its failure arc (the longest suffix that begins one of *the row's* phrases) and so its backoff weight
all depend on which phrases the row has; a mask over a shared tree cannot give each row its own failure arcs, so it
cannot be exact. Rows listing the same set share its tree, and a set's tree is built once (`PhraseBoosting`; the
pipeline caches them per actor).

Rows: decoders ask only `initial_states(n)`, with n = B (greedy, CTC) or B*K hypotheses laid out [B, K] row-major
(transducer beam search), so a `RowPhraseBoosting` is bound to one batch's rows (`set_of_row`, -1 for none) and
repeats each row's root n // B times. Build one per batch.

Dims: B batch (rows), V labels (no blank), S states, J sets, K hypotheses per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from decoders.boosting.tree import PhraseBoosting, ResolvedArcs
from decoders.ngram import NgramTensors, dispatch_advance, walk_torch

NO_SET = -1  # `set_of_row` of a row without phrases of its own


def union_tensors(trees: Sequence[NgramTensors], vocab_size: int) -> tuple[NgramTensors, Tensor]:
    """Boosting trees (each from `build_boosting_tensors`, on the CPU) -> (their disjoint union as one tensor
    structure, bases [J] long: the state of each tree's root). See the module docstring."""
    for tree in trees:
        if tree.vocab_size != vocab_size:
            raise ValueError(f"every tree must cover {vocab_size} labels, got {tree.vocab_size}")
        if tree.arc_keys.shape[0] < vocab_size or int(tree.arc_offsets[1]) != vocab_size:
            raise ValueError("a tree's state 0 must own one arc per label (build_boosting_tensors' layout)")
    labels = torch.arange(vocab_size, dtype=torch.long)
    # state 0: every label scores 0 and goes back to state 0
    offsets, keys = [torch.tensor([0, vocab_size], dtype=torch.long)], [labels]
    weights, targets = [torch.zeros(vocab_size, dtype=torch.float32)], [torch.zeros(vocab_size, dtype=torch.int32)]
    backoff_targets, backoff_weights = [torch.zeros(1, dtype=torch.long)], [torch.zeros(1, dtype=torch.float32)]
    final_weights = [torch.zeros(1, dtype=torch.float32)]
    bases = []
    base, arcs = 1, vocab_size
    for tree in trees:
        bases.append(base)
        offsets.append(tree.arc_offsets[1:] + arcs)
        keys.append(tree.arc_keys + base * vocab_size)  # state s's key s * V + label -> (base + s) * V + label
        weights.append(tree.arc_weights)
        targets.append(tree.arc_targets + base)
        moved = tree.backoff_targets + base
        moved[0] = 0  # the set's root backs off to state 0 (never taken: the root has every label)
        backoff_targets.append(moved)
        backoff_weights.append(tree.backoff_weights)
        final_weights.append(tree.final_weights)
        base += tree.num_states
        arcs += tree.num_arcs
    tensors = NgramTensors(
        arc_offsets=torch.cat(offsets), arc_keys=torch.cat(keys), arc_weights=torch.cat(weights),
        arc_targets=torch.cat(targets), backoff_targets=torch.cat(backoff_targets),
        backoff_weights=torch.cat(backoff_weights), final_weights=torch.cat(final_weights), vocab_size=vocab_size,
        # a walk from a set's state passes its chain and then the set's root: one level more than in the set's tree
        max_order=max((tree.max_order for tree in trees), default=0) + 1,
        max_state_arcs=vocab_size if trees else 0,  # the set roots own every label
    )
    return tensors, torch.tensor(bases, dtype=torch.long)


def union_resolved_arcs(trees: Sequence[PhraseBoosting], bases: Tensor, num_states: int) -> ResolvedArcs:
    """The union's `ResolvedArcs` (each state's failure chain flattened, the set root's own arcs excepted): the
    trees' own, their states moved by `bases`; state 0 has none."""
    offsets, labels, scores, targets = [torch.zeros(2, dtype=torch.long)], [], [], []
    total = 0
    for tree, base in zip(trees, bases.tolist()):
        resolved = tree.resolved_arcs()
        offsets.append(resolved.offsets[1:] + total)
        labels.append(resolved.labels)
        scores.append(resolved.scores)
        targets.append(resolved.targets + base)
        total += resolved.labels.shape[0]
    offsets = torch.cat(offsets)
    if offsets.shape[0] != num_states + 1:
        raise ValueError(f"the trees' resolved arcs cover {offsets.shape[0] - 1} states, the union has {num_states}")
    empty = [torch.zeros(0, dtype=torch.long)]
    return ResolvedArcs(offsets, torch.cat(labels or empty), torch.cat(scores or [torch.zeros(0)]).float(),
                        torch.cat(targets or empty))


class RowPhraseBoosting:
    """The boosting trees of a batch's phrase sets, each row boosted by its own (module docstring), satisfying the
    `LanguageModel` protocol for one batch of `len(set_of_row)` rows. Scores are rewards, fused at the decoder's
    weight as `PhraseBoosting`'s are.

    `advance` runs the n-gram LM's Triton kernel for CUDA tensors when Triton is importable (`use_triton=None`), or
    as `use_triton` says; the torch twin otherwise; on the CPU, the sets' resolved arcs.
    """

    def __init__(self, tensors: NgramTensors, row_roots: Tensor, state_sets: Tensor, root_scores: Tensor,
                 root_targets: Tensor, trees: Sequence[PhraseBoosting] = (), bases: Tensor | None = None,
                 use_triton: bool | None = None) -> None:
        self.tensors = tensors
        self.vocab_size = tensors.vocab_size
        self.num_states = tensors.num_states
        self.row_roots = row_roots  # [B] long: each row's set root (0: no set)
        # for the CPU's `advance`: each state's set (0: none, j + 1: set j) and each set's root arcs as rows,
        # root_scores [J + 1, V] float32 and root_targets [J + 1, V] long (row 0: state 0's), so that a batch's
        # rows start from their roots with one row gather
        self.state_sets, self.root_scores, self.root_targets = state_sets, root_scores, root_targets
        self.use_triton = use_triton
        self._trees, self._bases = tuple(trees), bases  # what the CPU's resolved arcs are made of
        self._resolved: ResolvedArcs | None = None

    @classmethod
    def from_sets(cls, trees: Sequence[PhraseBoosting], set_of_row: Sequence[int], vocab_size: int,
                  use_triton: bool | None = None) -> RowPhraseBoosting:
        """The trees of the distinct phrase sets (on the CPU) and each row's set (an index into `trees`, or
        `NO_SET`) -> the batch's model."""
        set_of_row = torch.as_tensor(list(set_of_row), dtype=torch.long)
        if set_of_row.numel() and not bool(((set_of_row >= NO_SET) & (set_of_row < len(trees))).all()):
            raise ValueError(f"set_of_row must hold indices of the {len(trees)} trees or {NO_SET}, got "
                             f"{set_of_row.tolist()}")
        tensors, bases = union_tensors([tree.tensors for tree in trees], vocab_size)
        with_root = torch.cat([torch.zeros(1, dtype=torch.long), bases])  # NO_SET (-1) + 1 -> state 0
        row_roots = with_root[set_of_row + 1]
        sizes = torch.tensor([1] + [tree.num_states for tree in trees], dtype=torch.long)
        state_sets = torch.repeat_interleave(torch.arange(len(trees) + 1), sizes)
        vocab = torch.arange(vocab_size)
        root_arcs = tensors.arc_offsets[with_root].unsqueeze(1) + vocab  # [J + 1, V]: the roots own every label
        return cls(tensors, row_roots, state_sets, tensors.arc_weights[root_arcs],
                   tensors.arc_targets[root_arcs].long(), trees, bases, use_triton)

    @property
    def num_rows(self) -> int:
        return self.row_roots.shape[0]

    @property
    def device(self) -> torch.device:
        return self.tensors.device

    def to(self, device: torch.device | str) -> RowPhraseBoosting:
        if torch.device(device) == self.tensors.device:
            return self
        return RowPhraseBoosting(self.tensors.to(device), self.row_roots.to(device), self.state_sets.to(device),
                                 self.root_scores.to(device), self.root_targets.to(device), self._trees, self._bases,
                                 self.use_triton)

    def initial_states(self, batch_size: int) -> Tensor:
        """-> states [N]: each row's set root, repeated N // B times (N = B, or B*K hypotheses laid out [B, K])."""
        rows = self.num_rows
        if batch_size % max(rows, 1) or (rows == 0 and batch_size):
            raise ValueError(f"this model is bound to a batch of {rows} rows: asked for {batch_size} states, not a "
                             "multiple of it (build a RowPhraseBoosting per batch)")
        return self.row_roots.repeat_interleave(batch_size // rows) if rows else self.row_roots.clone()

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """states [N] -> (scores [N, V] float32 rewards, next_states [N, V] long); see `PhraseBoosting.advance`."""
        return dispatch_advance(self.tensors, states, self.use_triton, self._advance_resolved)

    def _advance_resolved(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """On the CPU: from each row's set root, overwritten by the sets' resolved arcs."""
        if self._resolved is None:
            self._resolved = union_resolved_arcs(self._trees, self._bases, self.num_states)
        sets = self.state_sets[states]
        scores = self.tensors.final_weights[states].unsqueeze(1) + self.root_scores.index_select(0, sets)
        return self._resolved.overwrite_(states, scores, self.root_targets.index_select(0, sets))

    def final_scores(self, states: Tensor) -> Tensor:
        """states [N] -> [N]: the reward of an unfinished match taken back (0 at a root and after a phrase)."""
        return self.tensors.final_weights[states]

    def score_labels(self, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """states [N], labels [N, M] -> (scores [N, M], next_states [N, M]) for just those labels."""
        return walk_torch(self.tensors, states, labels)


__all__ = ["NO_SET", "RowPhraseBoosting", "union_resolved_arcs", "union_tensors"]
