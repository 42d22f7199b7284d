"""Phrase boosting scored by matching phrases directly, one utterance at a time, as a test oracle for
`decoders/boosting/tree.py`.

No automaton, no tensors: a "prefix" is a tuple of tokens that begins some phrase's token sequence; its token
score is the largest `depth_score` of the phrases that begin with it, and its total is the sum of the token scores
of its own prefixes. Scoring a token from a matched prefix `p`:
- if `p + (token,)` is a prefix: that prefix's token score, and it is the new match;
- else, at the empty prefix: 0, and nothing is matched;
- else give back what `p` earned beyond its longest proper suffix `s` that is a prefix (found by trying every
  suffix, longest first), unless `p` is a whole phrase (a finished match keeps its reward), and score the token
  from `s`.
At the end of the utterance, a match in progress gives back the same way, down to the empty prefix.

It also satisfies the `LanguageModel` protocol (states are numbers given to prefixes as they are first met, 0 for
the empty prefix) with the per-utterance helpers the CTC references use (`score`, `next_state`, `final`), so the
reference decoders run with it as they do with an n-gram LM. `num_states` is a bound on those numbers (so that
`WeightedSum` can pack its states with another model's: the job's list and a row's own, summed).

Per-utterance phrase lists (`decoders/boosting/rows.py`) need no reference of their own: an utterance's reference
is this, over its own phrases, run by the per-utterance reference decoders one utterance at a time.
"""

from __future__ import annotations

import torch
from torch import Tensor

from decoders.boosting.tree import CONTEXT_SCORE, DEPTH_SCALING, WeightedSum, depth_score


class ReferenceBoosting:
    def __init__(self, sequences: list[list[int]], vocab_size: int, weights: list[float | None] | None = None,
                 context_score: float = CONTEXT_SCORE, depth_scaling: float = DEPTH_SCALING) -> None:
        self.vocab_size = vocab_size
        self.token_score: dict[tuple[int, ...], float] = {}
        self.phrases: set[tuple[int, ...]] = set()
        for index, tokens in enumerate(sequences):
            weight = context_score if weights is None or weights[index] is None else weights[index]
            tokens = tuple(int(t) for t in tokens)
            self.phrases.add(tokens)
            for depth in range(len(tokens)):
                prefix = tokens[: depth + 1]
                score = depth_score(weight, depth, depth_scaling)
                self.token_score[prefix] = max(self.token_score.get(prefix, score), score)
        self.prefixes: list[tuple[int, ...]] = [()]  # state number -> prefix
        self.number: dict[tuple[int, ...], int] = {(): 0}
        self.num_states = 1 + sum(len(tokens) for tokens in sequences)  # at most one state per phrase token
        self._device = torch.device("cpu")

    # --- the definition -----------------------------------------------------------------------------------
    def total(self, prefix: tuple[int, ...]) -> float:
        return sum(self.token_score[prefix[: k + 1]] for k in range(len(prefix)))

    def longest_suffix(self, prefix: tuple[int, ...]) -> tuple[int, ...]:
        for start in range(1, len(prefix) + 1):
            if prefix[start:] in self.token_score or start == len(prefix):
                return prefix[start:]
        return ()

    def give_back(self, prefix: tuple[int, ...]) -> float:
        """What leaving `prefix` for its longest suffix costs (0 for a whole phrase)."""
        if prefix in self.phrases:
            return 0.0
        return self.total(self.longest_suffix(prefix)) - self.total(prefix)

    def step(self, prefix: tuple[int, ...], token: int) -> tuple[float, tuple[int, ...]]:
        longer = prefix + (token,)
        if longer in self.token_score:
            return self.token_score[longer], longer
        if not prefix:
            return 0.0, ()
        back = self.give_back(prefix)
        score, reached = self.step(self.longest_suffix(prefix), token)
        return back + score, reached

    def end(self, prefix: tuple[int, ...]) -> float:
        back = 0.0
        while prefix:
            back += self.give_back(prefix)
            prefix = self.longest_suffix(prefix)
        return back

    def score_tokens(self, tokens: list[int], final: bool = True) -> float:
        """The total reward of a token sequence (with the end's give-back where `final`)."""
        prefix, total = (), 0.0
        for token in tokens:
            score, prefix = self.step(prefix, int(token))
            total += score
        return total + (self.end(prefix) if final else 0.0)

    # --- the LanguageModel protocol, by state numbers ------------------------------------------------------
    def _state(self, prefix: tuple[int, ...]) -> int:
        if prefix not in self.number:
            self.number[prefix] = len(self.prefixes)
            self.prefixes.append(prefix)
        return self.number[prefix]

    @property
    def device(self) -> torch.device:
        return self._device

    def to(self, device: torch.device | str) -> ReferenceBoosting:
        if torch.device(device) != self._device:
            raise ValueError("the reference runs on the CPU")
        return self

    def initial_states(self, batch_size: int) -> Tensor:
        return torch.zeros(batch_size, dtype=torch.long)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        scores = torch.zeros(states.shape[0], self.vocab_size, dtype=torch.float64)
        next_states = torch.zeros(states.shape[0], self.vocab_size, dtype=torch.long)
        for row, state in enumerate(states.tolist()):
            for token in range(self.vocab_size):
                score, reached = self.step(self.prefixes[state], token)
                scores[row, token] = score
                next_states[row, token] = self._state(reached)
        return scores, next_states

    def final_scores(self, states: Tensor) -> Tensor:
        return torch.tensor([self.end(self.prefixes[s]) for s in states.tolist()], dtype=torch.float64)

    # --- per-utterance helpers of the CTC references -------------------------------------------------------
    def score(self, state: int, label: int) -> float:
        return self.step(self.prefixes[state], label)[0]

    def next_state(self, state: int, label: int) -> int:
        return self._state(self.step(self.prefixes[state], label)[1])

    @property
    def final(self) -> _Final:
        return _Final(self)


class _Final:
    def __init__(self, boosting: ReferenceBoosting) -> None:
        self.boosting = boosting

    def __getitem__(self, state: int) -> float:
        return self.boosting.end(self.boosting.prefixes[int(state)])


class ReferenceSum(WeightedSum):
    """`WeightedSum` (two models as one, state `first * second.num_states + second`) with the per-utterance helpers
    the CTC references read (`score`, `next_state`, `final`), for sums of references: an n-gram LM and a phrase
    list, or the job's list and a row's own."""

    def score(self, state: int, label: int) -> float:
        first, second = divmod(int(state), self.second_states)
        return self.first_weight * self.first.score(first, label) + self.second_weight * self.second.score(second,
                                                                                                            label)

    def next_state(self, state: int, label: int) -> int:
        first, second = divmod(int(state), self.second_states)
        return self.first.next_state(first, label) * self.second_states + self.second.next_state(second, label)

    @property
    def final(self) -> _SumFinal:
        return _SumFinal(self)


class _SumFinal:
    def __init__(self, total: ReferenceSum) -> None:
        self.total = total

    def __getitem__(self, state: int) -> float:
        first, second = divmod(int(state), self.total.second_states)
        return (self.total.first_weight * float(self.total.first.final[first])
                + self.total.second_weight * float(self.total.second.final[second]))
