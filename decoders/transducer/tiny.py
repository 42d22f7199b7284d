"""A tiny pure-torch transducer (LSTM prediction network + joint) for tests and benchmarks.

It implements `TransducerModel` the way NeMo's RNN-T and TDT models are built (blank is the last label and
embeds to zeros, the joint adds the two projections, applies ReLU and a final linear layer), so decoders
exercised on it behave as they will on a NeMo checkpoint. Random weights make a random RNN-T emit
`max_symbols` labels on most frames; `blank_bias` (or `calibrate_blank_bias`) raises the blank logit so the
model emits at a realistic rate instead (a trained model emits about one label per 2-4 frames).

Dims: B batch, T frames, D encoder features, H joint hidden, P prediction output, V labels with blank,
N durations.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from decoders.protocols import PredictorState
from decoders.transducer.lstm_step import LstmStep


class TinyTransducer(nn.Module):
    """An RNN-T (no durations) or TDT (with durations) model without an encoder."""

    def __init__(
        self,
        vocab_size: int = 32,
        encoder_dim: int = 64,
        prediction_dim: int = 64,
        joint_dim: int = 64,
        durations: tuple[int, ...] = (),
        prediction_layers: int = 1,
        blank_bias: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        if durations and (min(durations) < 0 or len(set(durations)) != len(durations)):
            raise ValueError(f"durations must be distinct and non-negative, got {durations}")
        self.vocab_size = vocab_size
        self.blank_id = vocab_size
        self.durations = tuple(int(d) for d in durations)
        self.encoder_dim = encoder_dim
        self.prediction_dim = prediction_dim
        self.prediction_layers = prediction_layers
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embedding = nn.Embedding(vocab_size + 1, prediction_dim, padding_idx=self.blank_id)
            self.lstm = nn.LSTM(prediction_dim, prediction_dim, num_layers=prediction_layers, batch_first=True)
            self.encoder_projection = nn.Linear(encoder_dim, joint_dim)
            self.prediction_projection = nn.Linear(prediction_dim, joint_dim)
            self.output = nn.Linear(joint_dim, vocab_size + 1 + len(self.durations))
        self.set_blank_bias(blank_bias)
        self.eval()
        self._cpu_step = LstmStep(self.embedding, self.lstm)

    def set_blank_bias(self, blank_bias: float) -> None:
        """Set the constant added to the blank logit (0 = the random model as drawn)."""
        with torch.no_grad():
            if not hasattr(self, "_base_blank_bias"):
                self._base_blank_bias = float(self.output.bias[self.blank_id])
            self.output.bias[self.blank_id] = self._base_blank_bias + blank_bias
        self.blank_bias = float(blank_bias)

    # --- TransducerModel -------------------------------------------------------------------------------
    def project_encoder(self, encoder_output: Tensor) -> Tensor:
        return self.encoder_projection(encoder_output)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> PredictorState:
        dtype = dtype or self.output.weight.dtype
        shape = (self.prediction_layers, batch_size, self.prediction_dim)
        return (torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))

    def predict(self, labels: Tensor, state: PredictorState) -> tuple[Tensor, PredictorState]:
        # One step of the nn.LSTM's layers on the same weights, without nn.LSTM's per-call setup, which costs
        # about 10x the step itself on a CPU at batch size 1 and would otherwise dominate every timing taken
        # with this model. On a CPU without gradients, the step NeMo models get through the adapter (embedding
        # folded into the first layer, a table without gradients); elsewhere torch.lstm_cell (a folded table
        # could go stale inside a captured CUDA graph).
        if labels.device.type == "cpu" and not torch.is_grad_enabled():
            return self._cpu_step(labels, state)
        output = self.embedding(labels)  # [B, P]
        hiddens, cells = [], []
        for layer in range(self.prediction_layers):
            hidden, cell = torch.lstm_cell(
                output, (state[0][layer], state[1][layer]),
                getattr(self.lstm, f"weight_ih_l{layer}"), getattr(self.lstm, f"weight_hh_l{layer}"),
                getattr(self.lstm, f"bias_ih_l{layer}"), getattr(self.lstm, f"bias_hh_l{layer}"),
            )
            hiddens.append(hidden)
            cells.append(cell)
            output = hidden
        return output, (torch.stack(hiddens), torch.stack(cells))

    def project_prediction(self, prediction: Tensor) -> Tensor:
        return self.prediction_projection(prediction)

    def joint_after_projection(self, encoder_projected: Tensor, prediction_projected: Tensor) -> Tensor:
        return self.output(torch.relu(encoder_projected + prediction_projected))

    def replace_states_(self, destination: PredictorState, source: PredictorState, mask: Tensor) -> None:
        row_mask = mask.view(1, -1, 1)
        for dst, src in zip(destination, source):
            torch.where(row_mask, src, dst, out=dst)

    def select_states(self, state: PredictorState, indices: Tensor) -> PredictorState:
        return tuple(s.index_select(1, indices) for s in state)


@torch.no_grad()
def emission_rate(model: TinyTransducer, batch_size: int = 8, frames: int = 64, seed: int = 0) -> float:
    """Labels per frame that greedy decoding emits on random encoder output (N(0, 1) features)."""
    from decoders.transducer.greedy import GreedyConfig, LabelLoopingGreedy

    generator = torch.Generator().manual_seed(seed)
    dtype = model.output.weight.dtype
    encoder_output = torch.randn(batch_size, frames, model.encoder_dim, generator=generator).to(dtype)
    lengths = torch.full((batch_size,), frames, dtype=torch.long)
    hypotheses = LabelLoopingGreedy(model, GreedyConfig(max_symbols=10))(encoder_output, lengths)
    return float(hypotheses.token_lengths.sum()) / (batch_size * frames)


def calibrate_blank_bias(model: TinyTransducer, frames_per_label: float = 3.0, iterations: int = 10) -> float:
    """Set and return the blank bias at which greedy decoding emits about one label per `frames_per_label`.

    Bisection on the measured emission rate of greedy decoding on random input (it falls as the bias rises).
    """
    target = 1.0 / frames_per_label
    low, high = -4.0, 12.0
    for _ in range(iterations):
        middle = (low + high) / 2
        model.set_blank_bias(middle)
        if emission_rate(model) > target:
            low = middle
        else:
            high = middle
    model.set_blank_bias((low + high) / 2)
    return model.blank_bias
