"""Per-utterance CTC references, written to be obviously right: plain Python over one utterance at a time.

- `collapse_one`: blank collapse as the paper states it, run by run.
- `greedy_one`: CTC greedy, with NeMo's LM fusion rule spelled out frame by frame.
- `BigramLm`: a table-driven fake `LanguageModel` (state = previous label + 1, 0 = start of sentence).

Labels are `0 .. V-1` with blank at `blank_id`; the LM sees `label - (label > blank_id)`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from decoders.hypotheses import Hypothesis


class BigramLm:
    """A bigram LM from tables: scores [V+1, V] and final scores [V+1] (row 0 = start of sentence)."""

    def __init__(self, scores: Tensor, final_scores: Tensor) -> None:
        self.vocab_size = scores.shape[1]
        if scores.shape[0] != self.vocab_size + 1 or final_scores.shape != (self.vocab_size + 1,):
            raise ValueError("scores must be [V+1, V] and final_scores [V+1]")
        self.scores = scores
        self.final = final_scores
        self.next_states = torch.arange(1, self.vocab_size + 1).expand(self.vocab_size + 1, -1).contiguous()

    @classmethod
    def random(cls, vocab_size: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> BigramLm:
        """Normalized random bigram probabilities, end of sentence included."""
        generator = torch.Generator().manual_seed(seed)
        logits = 2.0 * torch.randn(vocab_size + 1, vocab_size + 1, generator=generator, dtype=dtype)
        log_probs = torch.log_softmax(logits, dim=-1)
        return cls(log_probs[:, :vocab_size].contiguous(), log_probs[:, vocab_size].contiguous())

    def initial_states(self, batch_size: int) -> Tensor:
        return torch.zeros(batch_size, dtype=torch.long)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        return self.scores[states], self.next_states[states]

    def final_scores(self, states: Tensor) -> Tensor:
        return self.final[states]

    # per-utterance helpers for the references
    def score(self, state: int, lm_label: int) -> float:
        return float(self.scores[state, lm_label])

    def next_state(self, state: int, lm_label: int) -> int:
        return int(self.next_states[state, lm_label])


def to_lm_label(label: int, blank_id: int) -> int:
    return label - 1 if label > blank_id else label


def collapse_one(log_probs: Tensor, blank_id: int, threshold: float | None) -> list[int]:
    """log_probs [T, V] of one utterance -> the original frames that blank collapse keeps, in order."""
    marked = []
    for t in range(log_probs.shape[0]):
        if threshold is None:
            marked.append(int(torch.argmax(log_probs[t])) == blank_id)
        else:
            marked.append(float(log_probs[t, blank_id]) > math.log(threshold))
    kept = []
    t = 0
    while t < len(marked):
        if not marked[t]:
            kept.append(t)
            t += 1
            continue
        end = t
        while end + 1 < len(marked) and marked[end + 1]:
            end += 1
        interior = len(kept) > 0 and end + 1 < len(marked)  # a label before the run and one after it
        if interior:
            kept.append(end)  # the run's last frame
        t = end + 1
    return kept


def greedy_one(log_probs: Tensor, blank_id: int, lm: BigramLm | None = None, lm_weight: float = 0.0) -> Hypothesis:
    """log_probs [T, V] of one utterance -> greedy hypothesis; with an LM, NeMo's fusion rule."""
    tokens, frames, token_scores = [], [], []
    score = 0.0
    previous = blank_id
    state = 0
    for t in range(log_probs.shape[0]):
        row = log_probs[t].tolist()
        label = max(range(len(row)), key=lambda v: (row[v], -v))  # first index of the maximum
        if label != blank_id and label != previous:
            if lm is not None and lm_weight != 0.0:
                candidates = [v for v in range(len(row)) if v not in (blank_id, previous)]
                fused = {v: row[v] + lm_weight * lm.score(state, to_lm_label(v, blank_id)) for v in candidates}
                label = max(candidates, key=lambda v: (fused[v], -v))
                lm_score = lm.score(state, to_lm_label(label, blank_id))
                state = lm.next_state(state, to_lm_label(label, blank_id))
                score += lm_weight * lm_score
            tokens.append(label)
            frames.append(t)
            token_scores.append(row[label])
            score += row[label]
        previous = label
    return Hypothesis(tokens=tokens, frame_indices=frames, durations=None, token_scores=token_scores, score=score)
