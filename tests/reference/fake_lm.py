"""A table-driven bigram `LanguageModel` for tests, used until (and beside) the real n-gram LM.

State s is the previous label plus one (0 = beginning of sentence); `table[s]` holds the log-probabilities
of the V next labels followed by the end of sentence. Every label leads to the state of that label. Like a
real LM it lives on one device (`device`, `to`) and answers only states from there.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor


class BigramLm:
    def __init__(self, table: Tensor) -> None:
        vocab_size = table.shape[1] - 1
        if table.shape != (vocab_size + 1, vocab_size + 1):
            raise ValueError(f"table must be [V + 1, V + 1], got {tuple(table.shape)}")
        self.vocab_size = vocab_size
        self.table = table.double()
        self.next_states = torch.arange(1, vocab_size + 1).expand(vocab_size + 1, vocab_size).clone()

    @classmethod
    def random(cls, vocab_size: int, seed: int = 0, sharpness: float = 2.0) -> BigramLm:
        """A random bigram model whose rows are normalized over the labels and the end of sentence."""
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn(vocab_size + 1, vocab_size + 1, generator=generator, dtype=torch.double) * sharpness
        return cls(torch.log_softmax(logits, dim=-1))

    @property
    def device(self) -> torch.device:
        return self.table.device

    def to(self, device: torch.device | str) -> BigramLm:
        if torch.device(device) == self.device:
            return self
        moved = copy.copy(self)
        moved.table, moved.next_states = self.table.to(device), self.next_states.to(device)
        return moved

    def initial_states(self, batch_size: int) -> Tensor:
        return torch.zeros(batch_size, dtype=torch.long, device=self.device)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        return self.table[states, : self.vocab_size], self.next_states[states]

    def final_scores(self, states: Tensor) -> Tensor:
        return self.table[states, self.vocab_size]

    def score(self, tokens: list[int]) -> float:
        """log P(tokens) without the end of sentence: the sum of bigram scores (for obvious checks)."""
        state, total = 0, 0.0
        for token in tokens:
            total += float(self.table[state, token])
            state = token + 1
        return total
