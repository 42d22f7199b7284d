"""A transducer whose joint is a lookup table [T, U, V (+N)]: row (frame t, labels emitted so far u).

Hand-made tables give decoders inputs with obvious answers. Feed it `frame_inputs(B, T)` as encoder output:
the encoder "projection" is the frame index itself, and the prediction output is the label count u.
"""

from __future__ import annotations

import torch
from torch import Tensor

from decoders.protocols import PredictorState


class TableTransducer:
    def __init__(self, table: Tensor, vocab_size: int, durations: tuple[int, ...] = ()) -> None:
        if table.shape[-1] != vocab_size + 1 + len(durations):
            raise ValueError(f"table must end in V + N = {vocab_size + 1 + len(durations)}, got {table.shape}")
        self.table = table.double()
        self.vocab_size = vocab_size
        self.blank_id = vocab_size
        self.durations = tuple(durations)

    def project_encoder(self, encoder_output: Tensor) -> Tensor:
        return encoder_output

    def initial_state(self, batch_size: int, device=None, dtype=None) -> PredictorState:
        return (torch.zeros(batch_size, dtype=torch.double, device=device),)

    def predict(self, labels: Tensor, state: PredictorState) -> tuple[Tensor, PredictorState]:
        count = state[0] + (labels != self.blank_id).double()
        return count.unsqueeze(-1), (count,)

    def project_prediction(self, prediction: Tensor) -> Tensor:
        return prediction

    def joint_after_projection(self, encoder_projected: Tensor, prediction_projected: Tensor) -> Tensor:
        frames, counts = torch.broadcast_tensors(encoder_projected[..., 0], prediction_projected[..., 0])
        frames = frames.long().clamp(0, self.table.shape[0] - 1)
        counts = counts.long().clamp(0, self.table.shape[1] - 1)
        return self.table[frames, counts]

    def replace_states_(self, destination: PredictorState, source: PredictorState, mask: Tensor) -> None:
        torch.where(mask, source[0], destination[0], out=destination[0])

    def select_states(self, state: PredictorState, indices: Tensor) -> PredictorState:
        return (state[0].index_select(0, indices),)


def frame_inputs(batch_size: int, frames: int) -> Tensor:
    """Encoder output [B, T, 1] whose single feature is the frame index."""
    return torch.arange(frames, dtype=torch.double).view(1, frames, 1).expand(batch_size, frames, 1).clone()


def one_hot_table(frames: int, counts: int, vocab_size: int, entries: dict, durations: tuple[int, ...] = (),
                  default_label: int | None = None, default_duration: int = 0) -> Tensor:
    """A table whose argmax at (t, u) is entries[(t, u)] = label or (label, duration index); blank elsewhere."""
    width = vocab_size + 1 + len(durations)
    table = torch.zeros(frames, counts, width, dtype=torch.double)
    default_label = vocab_size if default_label is None else default_label
    for t in range(frames):
        for u in range(counts):
            entry = entries.get((t, u), (default_label, default_duration))
            label, duration_index = entry if isinstance(entry, tuple) else (entry, default_duration)
            table[t, u, label] = 10.0
            if durations:
                table[t, u, vocab_size + 1 + duration_index] = 10.0
    return table
