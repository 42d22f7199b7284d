"""`NgramLm`: a token-level back-off n-gram LM queried over the whole vocabulary for a batch of states at once
(the `LanguageModel` protocol of `decoders/protocols.py`).

It holds `NgramTensors` (`tensors.py`, which describes states, arcs and backoffs), made from an ARPA file by
`compile.py` or memory-mapped from the binary file of `binary.py`; `advance` runs the Triton kernel
(`triton.py`) or its torch twin (`tensors.advance_torch`) on a GPU, and the compiled kernel of `compiled.py`
on the CPU.

Scores are natural logs. Dims: B batch, V labels (no blank), L sequence length, K labels queried per state.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from decoders.ngram.arpa import ArpaFormatError, read_arpa
from decoders.ngram.binary import load_tensors, save_tensors
from decoders.ngram.compile import tensors_from_arpa
from decoders.ngram.tensors import BOS_STATE, EMPTY_STATE, NgramTensors, dispatch_advance, walk_torch


class NgramLm:
    """A token-level n-gram LM (see module docstring) satisfying the `LanguageModel` protocol.

    `advance` runs the Triton kernel for CUDA tensors when Triton is importable (`use_triton=None`), or as
    `use_triton` says; the torch twin otherwise, and from the kernel's first compile or launch failure in the
    process on (`dispatch_advance`, `triton_failure`).
    """

    def __init__(self, tensors: NgramTensors, ngram_counts: list[int] | None = None,
                 use_triton: bool | None = None) -> None:
        self.tensors = tensors
        self.vocab_size = tensors.vocab_size
        self.max_order = tensors.max_order
        self.ngram_counts = list(ngram_counts) if ngram_counts is not None else []
        self.use_triton = use_triton
        self._arrays = None  # numpy views for the compiled CPU advance, made on its first call

    # --- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_arpa(cls, path: str | Path, vocab_size: int, **kwargs) -> NgramLm:
        """Read a token-level ARPA file (plain or gzip) for labels 0 .. vocab_size - 1."""
        arpa = read_arpa(path)
        try:
            tensors = tensors_from_arpa(arpa, vocab_size)
        except ArpaFormatError as error:
            raise ArpaFormatError(f"{path}: {error}") from None
        return cls(tensors, ngram_counts=[len(p) for p in arpa.log10_probs], **kwargs)

    @classmethod
    def load(cls, path: str | Path, verify: bool = True, **kwargs) -> NgramLm:
        """Memory-map a file written by `save` (see `load_tensors`)."""
        tensors, counts = load_tensors(path, verify=verify)
        return cls(tensors, ngram_counts=counts, **kwargs)

    def save(self, path: str | Path) -> None:
        save_tensors(path, self.tensors, self.ngram_counts)

    def to(self, device: torch.device | str) -> NgramLm:
        if torch.device(device) == self.tensors.device:
            return self
        return NgramLm(self.tensors.to(device), self.ngram_counts, self.use_triton)

    @property
    def device(self) -> torch.device:
        return self.tensors.device

    # --- the LanguageModel protocol -------------------------------------------------------------------------
    def initial_states(self, batch_size: int, bos: bool = True) -> Tensor:
        """-> states [B]: the `<s>` context (or the empty context with bos=False)."""
        return torch.full((batch_size,), BOS_STATE if bos else EMPTY_STATE, dtype=torch.long, device=self.device)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """states [B] -> (scores [B, V] natural-log float32, next_states [B, V] long)."""
        return dispatch_advance(self.tensors, states, self.use_triton, self._advance_compiled)

    def _advance_compiled(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """On the CPU: compiled (`compiled.py`): the same scores as `advance_torch`, several times faster."""
        from decoders.ngram.compiled import LmArrays, advance_compiled

        if self._arrays is None:
            self._arrays = LmArrays.of(self.tensors)
        return advance_compiled(self._arrays, states)

    def final_scores(self, states: Tensor) -> Tensor:
        """states [B] -> [B] log p(</s> | state)."""
        return self.tensors.final_weights[states]

    # --- queries for tests and perplexity ----------------------------------------------------------------
    def score_labels(self, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """states [B], labels [B, K] -> (scores [B, K], next_states [B, K]) for just those labels."""
        return walk_torch(self.tensors, states, labels)

    def score_sequences(self, tokens: Tensor, token_lengths: Tensor, bos: bool = True,
                        eos: bool = True) -> Tensor:
        """tokens [B, L], token_lengths [B] -> [B] float64 natural-log probability of each sequence.

        With `bos` the sequence starts in the `<s>` context; with `eos` the end of sentence is scored.
        Perplexity over a set: `exp(-sum(scores) / (sum(token_lengths) + B * eos))`.
        """
        if tokens.dim() != 2 or token_lengths.shape != (tokens.shape[0],):
            raise ValueError(f"tokens must be [B, L] and token_lengths [B], got {tuple(tokens.shape)} and "
                             f"{tuple(token_lengths.shape)}")
        tokens = tokens.to(self.device, torch.long)
        token_lengths = token_lengths.to(self.device, torch.long)
        if tokens.numel() > 0:
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.vocab_size:
                raise ValueError(f"tokens must lie in [0, {self.vocab_size}), got values in [{low}, {high}]")
        states = self.initial_states(tokens.shape[0], bos=bos)
        total = torch.zeros(tokens.shape[0], dtype=torch.float64, device=self.device)
        for position in range(tokens.shape[1]):
            inside = position < token_lengths
            scores, next_states = walk_torch(self.tensors, states, tokens[:, position : position + 1])
            total += torch.where(inside, scores[:, 0].double(), 0.0)
            states = torch.where(inside, next_states[:, 0], states)
        if eos:
            total += self.final_scores(states).double()
        return total


__all__ = ["NgramLm"]
