"""Phrase boosting: a token-level boosting tree over tokenized phrases (NeMo 3.0's GPU-PB), as a `LanguageModel`,
and `WeightedSum`, which fuses it with an n-gram LM as one `LanguageModel`.

The tree (Aho-Corasick automaton over the phrases' token sequences, as NeMo's `ContextGraph` and
`GPUBoostingTreeModel`, rebuilt here from their definitions):
- a node is a prefix of some phrase's tokens; the root is the empty prefix;
- the arc into a node at depth `d + 1` (`d` = 0 for a phrase's first token) scores `w` for `d = 0` and
  `w * depth_scaling + ln(d + 1)` deeper, where `w` is the phrase's weight (`context_score` 1.0 unless the phrase
  carries its own); a node shared by several phrases takes the largest of their scores; a node's `node_score` is
  the sum of the arc scores from the root;
- a token that continues no phrase from a node backs off along the node's failure arc (to its longest proper
  suffix that is a node) with weight `node_score(fail) - node_score(node)`: the partial match's reward is taken
  back, except for what the suffix keeps; from the end of a whole phrase the backoff weight is 0 (the match keeps
  its reward); tokens that start no phrase score 0 at the root and stay there;
- `final_scores` take back what an unfinished match was given: the backoff weights down the failure chain to the
  root (NeMo's tree has no such term for transducers and CTC; here it makes the end of an utterance in the middle
  of a phrase earn nothing, which the CTC beam search uses with `lm_end_of_sentence`).

That is a back-off acceptor with the layout of the n-gram LM (`decoders/ngram/tensors.py`: state 0 owns every
label, arcs sorted by (state, label), a backoff target and weight per state), as NeMo builds its tree, so `advance`
is the n-gram LM's torch walk or Triton kernel. Per-phrase weights where phrases share a node: NeMo keeps the
first phrase's depth-scaled score and compares a later phrase's *unscaled* weight with it (so the result depends
on the order of the phrases); here each node takes the largest depth-scaled score of its phrases, which is the
same when all weights are equal (NeMo's only case) and does not depend on order.

`WeightedSum(lm, lm_weight, boosting, boost_weight)`: scores `lm_weight * lm + boost_weight * boosting`, the state
`lm_state * boosting.num_states + boosting_state` (int64). Decoders multiply whatever they fuse by their own
`lm_weight`; how the two weights split between the sum and the decoder is decided once, in the decoding plan
(`pipeline/decoding/plan.py`).

Phrase lists (`read_phrase_list`): one phrase a line, optionally `phrase<TAB>weight`; every refusal names the
file and line. Tokenizing (`phrase_token_sequences`) takes the tokenizer as plain callables, so this module stays
free of tokenizer libraries: each word of a phrase is spelled with its word-start piece (`▁rachel` -> `▁r ac he l`)
and also as the lone word-start piece followed by the word's inner pieces (`▁ r ac he l`), as models emit both;
for a cased tokenizer the caller also spells a lower-case phrase in the casings the model writes
(`decoders/boosting/phrase_list.py::phrase_casings`: "paris" as "Paris").

Dims: B batch, V labels (no blank), S states, A arcs, K labels queried per state.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from numba import njit
from torch import Tensor

from decoders.boosting.phrase_list import Phrase, PhraseListError, parse_phrase_lines, read_phrase_list
from decoders.ngram import EMPTY_STATE, NgramTensors, dispatch_advance, walk_torch

CONTEXT_SCORE = 1.0  # NeMo's BoostingTreeModelConfig.context_score
DEPTH_SCALING = 2.0  # NeMo's depth_scaling for CTC, RNN-T and TDT
MAX_VARIANT_WORDS = 3  # words of a phrase spelled both ways (2**3 spellings at most)


def phrase_token_sequences(
    words: Sequence[str], encode_word: Callable[[str], list[int]], encode_inner: Callable[[str], list[int]] | None,
    word_start_id: int | None,
) -> list[list[int]]:
    """The token spellings of one phrase (its words, already normalised for the tokenizer): each word as
    `encode_word(word)` (starting with its word-start piece), and, where the tokenizer has a lone word-start
    piece `word_start_id`, also as that piece followed by `encode_inner(word)` (the word without a word start);
    every combination for the first `MAX_VARIANT_WORDS` words. The canonical spelling comes first."""
    choices = []
    for index, word in enumerate(words):
        canonical = list(encode_word(word))
        spellings = [canonical]
        if encode_inner is not None and word_start_id is not None and index < MAX_VARIANT_WORDS:
            split = [word_start_id, *encode_inner(word)]
            if split != canonical:
                spellings.append(split)
        choices.append(spellings)
    return [[token for word in combination for token in word] for combination in itertools.product(*choices)]


# --- the tree ----------------------------------------------------------------------------------------------
def depth_score(weight: float, depth: int, depth_scaling: float = DEPTH_SCALING) -> float:
    """The score of a phrase's token at `depth` (0 for its first token), NeMo's per-depth definition."""
    return weight if depth == 0 else weight * depth_scaling + math.log(depth + 1)


def build_boosting_tensors(sequences: Sequence[Sequence[int]], weights: Sequence[float], vocab_size: int,
                           depth_scaling: float = DEPTH_SCALING) -> NgramTensors:
    """Token sequences with their weights (context scores) -> the tree as back-off tensors (module docstring).
    States are numbered breadth-first, so the root is 0 and the arcs come out sorted by (state, label)."""
    if len(sequences) != len(weights):
        raise ValueError(f"{len(sequences)} sequences but {len(weights)} weights")
    # the trie: children per node, each node's token score (max over its phrases) and whether a phrase ends there
    children: list[dict[int, int]] = [{}]
    token_scores, is_end = [0.0], [False]
    for tokens, weight in zip(sequences, weights):
        if not tokens:
            raise ValueError("an empty token sequence cannot be boosted")
        node = 0
        for depth, token in enumerate(tokens):
            token = int(token)
            if not 0 <= token < vocab_size:
                raise ValueError(f"token {token} outside the vocabulary [0, {vocab_size})")
            score = depth_score(float(weight), depth, depth_scaling)
            child = children[node].get(token)
            if child is None:
                child = len(children)
                children[node][token] = child
                children.append({})
                token_scores.append(score)
                is_end.append(False)
            else:
                token_scores[child] = max(token_scores[child], score)
            node = child
        is_end[node] = True

    # breadth-first: new ids, node scores and failure arcs (Aho-Corasick)
    order, labels_of, parent_of = [0], [-1], [-1]
    queue = deque([0])
    while queue:
        node = queue.popleft()
        for token in sorted(children[node]):
            order.append(children[node][token])
            labels_of.append(token)
            parent_of.append(node)
            queue.append(children[node][token])
    new_id = {old: new for new, old in enumerate(order)}
    num_states = len(order)
    node_score = [0.0] * num_states
    fail = [0] * num_states
    depth = [0] * num_states
    new_children: list[dict[int, int]] = [{} for _ in range(num_states)]
    for new, old in enumerate(order):
        new_children[new] = {token: new_id[child] for token, child in children[old].items()}
    for new in range(1, num_states):
        parent, token = new_id[parent_of[new]], labels_of[new]
        node_score[new] = node_score[parent] + token_scores[order[new]]
        depth[new] = depth[parent] + 1
        if parent == 0:
            fail[new] = 0
        else:
            suffix = fail[parent]
            while token not in new_children[suffix] and suffix != 0:
                suffix = fail[suffix]
            fail[new] = new_children[suffix].get(token, 0)
    ends = [is_end[old] for old in order]
    backoff_weights = [0.0 if (s == 0 or ends[s]) else node_score[fail[s]] - node_score[s] for s in range(num_states)]
    final = [0.0] * num_states
    for s in range(1, num_states):  # breadth-first: the failure target (shallower) is done already
        final[s] = backoff_weights[s] + final[fail[s]]

    # arcs: the root owns one per label (score 0 back to the root where no phrase starts), others their children
    root_weights = torch.zeros(vocab_size, dtype=torch.float32)
    root_targets = torch.zeros(vocab_size, dtype=torch.int32)
    for token, child in new_children[0].items():
        root_weights[token] = token_scores[order[child]]
        root_targets[token] = child
    arc_states, arc_labels, arc_weights, arc_targets = [], [], [], []
    for s in range(1, num_states):
        for token, child in sorted(new_children[s].items()):
            arc_states.append(s)
            arc_labels.append(token)
            arc_weights.append(token_scores[order[child]])
            arc_targets.append(child)
    counts = torch.zeros(num_states, dtype=torch.long)
    counts[0] = vocab_size
    if arc_states:
        counts[1:] = torch.bincount(torch.tensor(arc_states), minlength=num_states)[1:]
    offsets = torch.zeros(num_states + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(counts, 0)
    child_keys = torch.tensor(arc_states, dtype=torch.long) * vocab_size + torch.tensor(arc_labels, dtype=torch.long)
    keys = torch.cat([torch.arange(vocab_size, dtype=torch.long), child_keys])
    return NgramTensors(
        arc_offsets=offsets, arc_keys=keys,
        arc_weights=torch.cat([root_weights, torch.tensor(arc_weights, dtype=torch.float32)]),
        arc_targets=torch.cat([root_targets, torch.tensor(arc_targets, dtype=torch.int32)]),
        backoff_targets=torch.tensor(fail, dtype=torch.long),
        backoff_weights=torch.tensor(backoff_weights, dtype=torch.float32),
        final_weights=torch.tensor(final, dtype=torch.float32),
        vocab_size=vocab_size, max_order=max(depth) + 1,
        max_state_arcs=int(counts[1:].max()) if num_states > 1 else 0,
    )


class PhraseBoosting:
    """The boosting tree (module docstring) satisfying the `LanguageModel` protocol. Scores are rewards, not
    log-probabilities: the decoder's fusion weight is NeMo's `boosting_tree_alpha`.

    `advance` runs the n-gram LM's Triton kernel for CUDA tensors when Triton is importable (`use_triton=None`),
    or as `use_triton` says; the torch twin otherwise.
    """

    def __init__(self, tensors: NgramTensors, num_phrases: int = 0, use_triton: bool | None = None) -> None:
        self.tensors = tensors
        self.vocab_size = tensors.vocab_size
        self.num_states = tensors.num_states
        self.num_phrases = num_phrases
        self.use_triton = use_triton
        self._resolved: ResolvedArcs | None = None  # built on the first CPU `advance`

    @classmethod
    def from_token_sequences(cls, sequences: Sequence[Sequence[int]], vocab_size: int,
                             weights: Sequence[float | None] | None = None, context_score: float = CONTEXT_SCORE,
                             depth_scaling: float = DEPTH_SCALING, num_phrases: int | None = None,
                             use_triton: bool | None = None) -> PhraseBoosting:
        """Token sequences (one per phrase spelling) and their weights (None: `context_score`) -> the tree."""
        resolved = [context_score if w is None else float(w) for w in (weights or [None] * len(sequences))]
        tensors = build_boosting_tensors(sequences, resolved, vocab_size, depth_scaling)
        return cls(tensors, len(sequences) if num_phrases is None else num_phrases, use_triton)

    @property
    def device(self) -> torch.device:
        return self.tensors.device

    def to(self, device: torch.device | str) -> PhraseBoosting:
        if torch.device(device) == self.tensors.device:
            return self
        return PhraseBoosting(self.tensors.to(device), self.num_phrases, self.use_triton)

    def initial_states(self, batch_size: int) -> Tensor:
        """-> states [B]: the root (nothing matched)."""
        return torch.full((batch_size,), EMPTY_STATE, dtype=torch.long, device=self.device)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """states [B] -> (scores [B, V] float32 rewards, next_states [B, V] long).

        On a GPU: the n-gram LM's backoff walk (Triton, or its torch twin): fixed shapes, no host synchronization,
        so CUDA graphs can capture it. On the CPU: the resolved arcs (`ResolvedArcs`), one scatter instead of a
        walk as deep as the longest phrase."""
        return dispatch_advance(self.tensors, states, self.use_triton,
                                lambda cpu_states: self.resolved_arcs().advance(self.tensors, cpu_states))

    def resolved_arcs(self) -> ResolvedArcs:
        """The tree's failure chains flattened (`ResolvedArcs`): built on the first call, then kept."""
        if self._resolved is None:
            self._resolved = ResolvedArcs.of(self.tensors)
        return self._resolved

    def final_scores(self, states: Tensor) -> Tensor:
        """states [B] -> [B]: the reward of an unfinished match taken back (0 at the root and after a phrase)."""
        return self.tensors.final_weights[states]

    def score_labels(self, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """states [B], labels [B, K] -> (scores [B, K], next_states [B, K]) for just those labels."""
        return walk_torch(self.tensors, states, labels)

    def score_sequence(self, tokens: Sequence[int], final: bool = True) -> float:
        """The total reward of one token sequence (with the final take-back where `final`): for tests and tools."""
        state = self.initial_states(1)
        total = 0.0
        for token in tokens:
            scores, next_states = self.score_labels(state, torch.tensor([[int(token)]], device=self.device))
            total += float(scores[0, 0])
            state = next_states[:, 0]
        return total + (float(self.final_scores(state)[0]) if final else 0.0)


@dataclass(frozen=True)
class ResolvedArcs:
    """Every state's arcs with its failure chain resolved: for each label that some state on the chain (the root
    excepted) continues, the most specific such arc, its score plus the backoff weights passed to reach it, and
    its target. Every other label goes to the root arc, after all the chain's backoffs (`final_weights`). A few
    arcs per state (about 2.5 for contact names), so `advance` is one gather and one scatter per batch."""

    offsets: Tensor  # [S + 1] long: the resolved arcs of state s are offsets[s] .. offsets[s + 1]
    labels: Tensor  # [R] long
    scores: Tensor  # [R] float32
    targets: Tensor  # [R] long
    _arrays: tuple | None = field(default=None, compare=False, repr=False)  # numpy views for the compiled loop

    @classmethod
    def of(cls, tensors: NgramTensors) -> ResolvedArcs:
        vocab_size = tensors.vocab_size
        offsets = tensors.arc_offsets.tolist()
        keys, weights = tensors.arc_keys.tolist(), tensors.arc_weights.tolist()
        targets, fail = tensors.arc_targets.tolist(), tensors.backoff_targets.tolist()
        backoffs = tensors.backoff_weights.tolist()
        resolved: list[dict[int, tuple[float, int]]] = [{}]
        for state in range(1, tensors.num_states):  # breadth-first: every failure target comes first
            inherited = resolved[fail[state]]
            arcs = {label: (backoffs[state] + score, target) for label, (score, target) in inherited.items()}
            for arc in range(offsets[state], offsets[state + 1]):
                arcs[keys[arc] - state * vocab_size] = (weights[arc], targets[arc])
            resolved.append(arcs)
        counts = torch.tensor([len(arcs) for arcs in resolved], dtype=torch.long)
        starts = torch.zeros(len(resolved) + 1, dtype=torch.long)
        starts[1:] = torch.cumsum(counts, 0)
        flat = [(label, score, target) for arcs in resolved for label, (score, target) in sorted(arcs.items())]
        labels, scores, next_states = zip(*flat) if flat else ((), (), ())
        return cls(starts, torch.tensor(labels, dtype=torch.long), torch.tensor(scores, dtype=torch.float32),
                   torch.tensor(next_states, dtype=torch.long))

    def advance(self, tensors: NgramTensors, states: Tensor) -> tuple[Tensor, Tensor]:
        """states [B] -> (scores [B, V], next_states [B, V]); sizes depend on the data: meant for the CPU."""
        batch_size, vocab_size = states.shape[0], tensors.vocab_size
        scores = tensors.final_weights[states].unsqueeze(1) + tensors.arc_weights[:vocab_size]  # via the root
        next_states = tensors.arc_targets[:vocab_size].long().expand(batch_size, vocab_size).clone()
        return self.overwrite_(states, scores, next_states)

    def overwrite_(self, states: Tensor, scores: Tensor, next_states: Tensor) -> tuple[Tensor, Tensor]:
        """In place: each row's resolved arcs written over scores and next_states [B, V], which hold what the
        root gives each label (its arc plus the backoff weights of the row's chain); returns them. A tensor of
        several trees fills them from each row's own tree's root (`decoders.boosting.rows`)."""
        if states.shape[0] == 0:
            return scores, next_states
        if scores.dtype == torch.float32 and next_states.dtype == torch.long and scores.is_contiguous() \
                and next_states.is_contiguous():  # a compiled loop over the few arcs of each row
            if self._arrays is None:
                object.__setattr__(self, "_arrays", tuple(np.ascontiguousarray(t.numpy()) for t in (
                    self.offsets, self.labels, self.scores, self.targets)))
            _overwrite_rows(np.ascontiguousarray(states.numpy(), dtype=np.int64), scores.numpy(), next_states.numpy(),
                            *self._arrays)
            return scores, next_states
        batch_size, vocab_size = scores.shape
        first = self.offsets[states]
        counts = self.offsets[states + 1] - first
        total = int(counts.sum())
        if total:
            rows = torch.repeat_interleave(torch.arange(batch_size), counts, output_size=total)
            arcs = torch.arange(total) - (torch.cumsum(counts, 0) - counts)[rows] + first[rows]
            cells = rows * vocab_size + self.labels[arcs]
            scores.view(-1)[cells] = self.scores[arcs]
            next_states.view(-1)[cells] = self.targets[arcs]
        return scores, next_states


@njit(cache=True, nogil=True)
def _overwrite_rows(states, scores, next_states, offsets, labels, arc_scores, targets):
    """`ResolvedArcs.overwrite_` as a loop: row b's resolved arcs over scores[b] and next_states[b]."""
    for b in range(states.shape[0]):
        state = states[b]
        for arc in range(offsets[state], offsets[state + 1]):
            scores[b, labels[arc]] = arc_scores[arc]
            next_states[b, labels[arc]] = targets[arc]


class WeightedSum:
    """Two label models as one `LanguageModel`: scores `first_weight * first + second_weight * second`, state
    `first_state * second.num_states + second_state` (int64), final scores weighted the same way.

    `second` must say how many states it has (`num_states`, as `PhraseBoosting` does); so does the sum, where
    `first` does (a sum of two boosting models, fused with an n-gram LM as a second sum)."""

    def __init__(self, first, first_weight: float, second, second_weight: float) -> None:
        if first.vocab_size != second.vocab_size:
            raise ValueError(f"both models must cover the same labels, got {first.vocab_size} and "
                             f"{second.vocab_size}")
        self.first, self.second = first, second
        self.first_weight, self.second_weight = float(first_weight), float(second_weight)
        self.vocab_size = first.vocab_size
        self.second_states = int(second.num_states)
        if not (hasattr(first, "score_labels") and hasattr(second, "score_labels")):
            self.score_labels = None  # the CTC beam search then asks `advance`

    @property
    def device(self) -> torch.device:
        return self.first.device

    @property
    def num_states(self) -> int:
        return int(self.first.num_states) * self.second_states

    def to(self, device: torch.device | str) -> WeightedSum:
        first, second = self.first.to(device), self.second.to(device)
        if first is self.first and second is self.second:
            return self
        return WeightedSum(first, self.first_weight, second, self.second_weight)

    def _split(self, states: Tensor) -> tuple[Tensor, Tensor]:
        return torch.div(states, self.second_states, rounding_mode="floor"), torch.remainder(states, self.second_states)

    def initial_states(self, batch_size: int) -> Tensor:
        first = self.first.initial_states(batch_size).long()
        return first * self.second_states + self.second.initial_states(batch_size)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """states [B] -> (scores [B, V], next_states [B, V])."""
        first_states, second_states = self._split(states)
        first_scores, first_next = self.first.advance(first_states)
        second_scores, second_next = self.second.advance(second_states)
        scores = self.first_weight * first_scores + self.second_weight * second_scores.to(first_scores.dtype)
        return scores, first_next.long() * self.second_states + second_next

    def score_labels(self, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:  # noqa: F811
        """states [B], labels [B, K] -> (scores [B, K], next_states [B, K])."""
        first_states, second_states = self._split(states)
        first_scores, first_next = self.first.score_labels(first_states, labels)
        second_scores, second_next = self.second.score_labels(second_states, labels)
        scores = self.first_weight * first_scores + self.second_weight * second_scores.to(first_scores.dtype)
        return scores, first_next.long() * self.second_states + second_next

    def final_scores(self, states: Tensor) -> Tensor:
        first_states, second_states = self._split(states)
        first = self.first.final_scores(first_states)
        return self.first_weight * first + self.second_weight * self.second.final_scores(second_states).to(first.dtype)


__all__ = ["CONTEXT_SCORE", "DEPTH_SCALING", "Phrase", "PhraseBoosting", "PhraseListError", "WeightedSum",
           "build_boosting_tensors", "depth_score", "parse_phrase_lines", "phrase_token_sequences",
           "read_phrase_list"]
