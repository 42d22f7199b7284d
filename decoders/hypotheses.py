"""Batched decoding results kept as padded tensors.

Dims: B batch, U emitted labels (capacity), the filled part of row b is `[:token_lengths[b]]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Hypothesis:
    """One utterance's result as plain Python values."""

    tokens: list[int]
    frame_indices: list[int]  # encoder frame at which each label was emitted
    durations: list[int] | None  # TDT: frames each label covers; None for RNN-T and CTC
    token_scores: list[float]  # log-probability of each emitted label
    score: float  # sum of token_scores (plus any LM terms the decoder adds)
    confidence: list[float] | None = None


class BatchedHypotheses:
    """Labels, frames, TDT durations and scores of B utterances as [B, U] / [B] tensors.

    Appending writes one label per row at that row's current length, for the rows in a mask, with tensor
    ops only (no host synchronization), so it can run inside a CUDA graph. The caller guarantees capacity:
    decoders know an upper bound (frames x max_symbols) or grow the buffers between steps with
    `ensure_capacity_`, which is the only method that reallocates.
    """

    def __init__(
        self,
        batch_size: int,
        capacity: int,
        device: torch.device | str = "cpu",
        float_dtype: torch.dtype = torch.float32,
        with_durations: bool = False,
    ) -> None:
        capacity = max(int(capacity), 1)
        self.batch_size = batch_size
        self.with_durations = with_durations
        self.tokens = torch.zeros(batch_size, capacity, dtype=torch.long, device=device)
        self.frame_indices = torch.zeros(batch_size, capacity, dtype=torch.long, device=device)
        self.durations = torch.zeros(batch_size, capacity, dtype=torch.long, device=device) if with_durations else None
        self.token_scores = torch.zeros(batch_size, capacity, dtype=float_dtype, device=device)
        self.token_lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.scores = torch.zeros(batch_size, dtype=float_dtype, device=device)
        # frame of the last label and how many labels in a row were emitted on it (for max_symbols)
        self.last_frame = torch.full((batch_size,), -1, dtype=torch.long, device=device)
        self.last_frame_count = torch.zeros(batch_size, dtype=torch.long, device=device)
        self._batch_indices = torch.arange(batch_size, device=device)

    @property
    def capacity(self) -> int:
        return self.tokens.shape[1]

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def reset_(self) -> None:
        """Empty every row, keeping the buffers (CUDA graphs replay on the same memory)."""
        self.token_lengths.zero_()
        self.scores.zero_()
        self.last_frame.fill_(-1)
        self.last_frame_count.zero_()

    def ensure_capacity_(self, capacity: int) -> None:
        """Grow the [B, U] buffers to hold at least `capacity` labels per row (doubling, amortized)."""
        if capacity <= self.capacity:
            return
        new_capacity = max(capacity, 2 * self.capacity)
        extra = new_capacity - self.capacity

        def grow(buffer: Tensor) -> Tensor:
            return torch.cat([buffer, buffer.new_zeros(self.batch_size, extra)], dim=1)

        self.tokens = grow(self.tokens)
        self.frame_indices = grow(self.frame_indices)
        self.token_scores = grow(self.token_scores)
        if self.durations is not None:
            self.durations = grow(self.durations)

    def append_(
        self,
        mask: Tensor,
        labels: Tensor,
        frame_indices: Tensor,
        scores: Tensor,
        durations: Tensor | None = None,
    ) -> None:
        """For rows where mask [B] is True, append labels [B] emitted at frame_indices [B] with scores [B]."""
        positions = self.token_lengths.clamp(max=self.capacity - 1)
        rows = self._batch_indices

        def write(buffer: Tensor, values: Tensor) -> None:
            buffer[rows, positions] = torch.where(mask, values.to(buffer.dtype), buffer[rows, positions])

        write(self.tokens, labels)
        write(self.frame_indices, frame_indices)
        write(self.token_scores, scores)
        if self.durations is not None:
            if durations is None:
                raise ValueError("durations are required: these hypotheses were created with_durations=True")
            write(self.durations, durations)
        self.token_lengths += mask
        self.scores += torch.where(mask, scores.to(self.scores.dtype), 0.0)
        same_frame = frame_indices == self.last_frame
        torch.where(mask, torch.where(same_frame, self.last_frame_count + 1, 1), self.last_frame_count,
                    out=self.last_frame_count)
        torch.where(mask, frame_indices, self.last_frame, out=self.last_frame)

    def select(self, batch_size: int) -> BatchedHypotheses:
        """The first `batch_size` rows, trimmed to the longest one (one host synchronization)."""
        length = int(self.token_lengths[:batch_size].max()) if batch_size > 0 else 0
        out = BatchedHypotheses.__new__(BatchedHypotheses)
        out.batch_size = batch_size
        out.with_durations = self.with_durations
        out.tokens = self.tokens[:batch_size, :length].clone()
        out.frame_indices = self.frame_indices[:batch_size, :length].clone()
        out.durations = self.durations[:batch_size, :length].clone() if self.durations is not None else None
        out.token_scores = self.token_scores[:batch_size, :length].clone()
        out.token_lengths = self.token_lengths[:batch_size].clone()
        out.scores = self.scores[:batch_size].clone()
        out.last_frame = self.last_frame[:batch_size].clone()
        out.last_frame_count = self.last_frame_count[:batch_size].clone()
        out._batch_indices = self._batch_indices[:batch_size]
        return out

    def to_list(self) -> list[Hypothesis]:
        """Per-utterance plain lists (copies everything to the host once)."""
        lengths = self.token_lengths.cpu().tolist()
        tokens = self.tokens.cpu().tolist()
        frames = self.frame_indices.cpu().tolist()
        durations = self.durations.cpu().tolist() if self.durations is not None else None
        token_scores = self.token_scores.double().cpu().tolist()
        scores = self.scores.double().cpu().tolist()
        return [
            Hypothesis(
                tokens=tokens[b][:n],
                frame_indices=frames[b][:n],
                durations=durations[b][:n] if durations is not None else None,
                token_scores=token_scores[b][:n],
                score=scores[b],
            )
            for b, n in enumerate(lengths)
        ]
