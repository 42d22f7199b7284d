"""One step of an LSTM prediction network (an embedding, then `nn.LSTM` layers), without `nn.LSTM`'s call.

Transducer decoders run the prediction network one label at a time. On a CPU, `nn.LSTM` runs each step
through oneDNN, whose per-call setup costs several times the step's arithmetic at the sizes of prediction
networks. `LstmStep` runs the same cell with the LSTM's own weights and folds the embedding into the first
layer: the input gates of every label, `embedding @ W_ih^T + b_ih + b_hh`, form one [V, 4P] table, so the first
layer's step is one gather and one matrix product instead of two. Results differ from `nn.LSTM`'s (oneDNN or
not) by rounding only.

The table is built on first use and rebuilt when a weight it comes from is replaced, moved, or written in place
through torch (its version counter moves); a write through `.data` is not seen.

Dims: B batch, V labels with blank, P hidden size, L layers.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LstmStep:
    """labels [B], state (h, c) of [L, B, P] -> the top layer's output [B, P] and the next state."""

    def __init__(self, embedding: nn.Embedding, lstm: nn.LSTM) -> None:
        self.embedding = embedding
        self.lstm = lstm
        self._table: tuple[tuple, Tensor, Tensor] | None = None  # (weight versions, input gates table, W_hh^T)

    @classmethod
    def of(cls, embedding: nn.Module, lstm: nn.Module | None) -> LstmStep | None:
        """The step of this embedding and LSTM, or None where the layout is not the plain one it computes
        (LSTM with biases, no projection, one direction; embedding without max_norm)."""
        if (type(embedding) is not nn.Embedding or embedding.max_norm is not None or type(lstm) is not nn.LSTM
                or lstm.proj_size != 0 or not lstm.bias or lstm.bidirectional):
            return None
        return cls(embedding, lstm)

    def _layer_zero(self) -> tuple[Tensor, Tensor]:
        """The label -> input gates table [V, 4P] and W_hh^T [P, 4P] of the first layer."""
        # read from the parameter dicts: a module attribute walks several dicts, microseconds a step
        lstm_weights = self.lstm._parameters
        weights = (self.embedding._parameters["weight"], lstm_weights["weight_ih_l0"], lstm_weights["bias_ih_l0"],
                   lstm_weights["bias_hh_l0"], lstm_weights["weight_hh_l0"])
        key = tuple((w.data_ptr(), w._version) for w in weights)
        if self._table is None or self._table[0] != key:
            embedding, w_ih, b_ih, b_hh, w_hh = (w.detach() for w in weights)
            table = torch.addmm(b_ih + b_hh, embedding, w_ih.t())
            self._table = key, table, w_hh.t().contiguous()
        return self._table[1], self._table[2]

    def __call__(self, labels: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        table, w_hh_t = self._layer_zero()
        hiddens, cells = [], []
        output = None
        for layer in range(self.lstm.num_layers):
            hidden, cell = state[0][layer], state[1][layer]
            if layer == 0:
                gates = torch.addmm(table.index_select(0, labels), hidden, w_hh_t)  # [B, 4P]
                in_gate, forget_gate, cell_gate, out_gate = gates.unsafe_chunk(4, 1)  # nn.LSTM's gate order
                in_gate.sigmoid_()
                forget_gate.sigmoid_()
                cell_gate.tanh_()
                out_gate.sigmoid_()
                cell = torch.addcmul(forget_gate * cell, in_gate, cell_gate)
                hidden = out_gate * torch.tanh(cell)
            else:  # as nn.LSTM in eval mode: no dropout between layers
                weights = self.lstm._parameters
                hidden, cell = torch.lstm_cell(
                    output, (hidden, cell), weights[f"weight_ih_l{layer}"], weights[f"weight_hh_l{layer}"],
                    weights[f"bias_ih_l{layer}"], weights[f"bias_hh_l{layer}"])
            hiddens.append(hidden)
            cells.append(cell)
            output = hidden
        if len(hiddens) == 1:
            return output, (hiddens[0].unsqueeze(0), cells[0].unsqueeze(0))
        return output, (torch.stack(hiddens), torch.stack(cells))
