"""The small interfaces decoders call: a transducer, a CTC model, a language model.

Decoders see models only through these protocols, so the same decoder runs a NeMo checkpoint (through the
adapter in `pipeline/model/nemo.py`), the tiny pure-torch transducer in `decoders/transducer/tiny.py`, or a
table-driven fake in a test.

Dims: B batch, T frames, D encoder features, H joint hidden, P prediction-network output,
V labels including blank (`vocab_size + 1`), N number of TDT durations.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

# A prediction-network state: a tuple of tensors whose batch dimension the model knows (for an LSTM,
# (h, c) with shapes [layers, B, hidden]). Decoders never look inside; they ask the model to copy or gather.
PredictorState = tuple[Tensor, ...]


@runtime_checkable
class TransducerModel(Protocol):
    """An RNN-T or TDT model after its encoder: prediction network plus joint.

    Labels are `0 .. vocab_size`, with blank at `blank_id` (NeMo puts it last: `blank_id == vocab_size`).
    The joint emits `vocab_size + 1` label logits, followed, for TDT, by `len(durations)` duration logits.
    The first prediction step is fed the blank (start of sequence is blank, as in NeMo).
    """

    vocab_size: int  # non-blank labels
    blank_id: int
    durations: tuple[int, ...]  # TDT duration set, e.g. (0, 1, 2, 3, 4); empty for RNN-T

    def project_encoder(self, encoder_output: Tensor) -> Tensor:
        """encoder_output [B, T, D] -> encoder_projected [B, T, H]; computed once per utterance."""
        ...

    def initial_state(self, batch_size: int, device, dtype) -> PredictorState:
        """The prediction network's state before any label."""
        ...

    def predict(self, labels: Tensor, state: PredictorState) -> tuple[Tensor, PredictorState]:
        """One prediction step: labels [B] (blank = start of sequence) -> output [B, P], next state."""
        ...

    def project_prediction(self, prediction: Tensor) -> Tensor:
        """prediction [..., P] -> prediction_projected [..., H]."""
        ...

    def joint_after_projection(self, encoder_projected: Tensor, prediction_projected: Tensor) -> Tensor:
        """[..., H] and [..., H] (broadcastable) -> logits [..., V (+ N)]: unnormalized scores."""
        ...

    def replace_states_(self, destination: PredictorState, source: PredictorState, mask: Tensor) -> None:
        """In place: destination[b] = source[b] where mask[b] (mask [B] bool)."""
        ...

    def select_states(self, state: PredictorState, indices: Tensor) -> PredictorState:
        """A new state holding rows `indices` [N] of `state` (beam search reorders hypotheses this way)."""
        ...


@runtime_checkable
class CtcModel(Protocol):
    """The CTC head's output, already log-normalized."""

    vocab_size: int  # non-blank labels
    blank_id: int

    def log_probs(self, encoder_output: Tensor) -> Tensor:
        """encoder_output [B, T, D] -> log-probabilities [B, T, V]."""
        ...


@runtime_checkable
class LanguageModel(Protocol):
    """A label-level language model over the non-blank labels `0 .. vocab_size - 1`, queried in batches.

    Scores are natural-log probabilities. States are integer ids (for an n-gram LM, the context node).
    An LM lives on one device: its states and scores are tensors there, and it answers only states from there.
    A decoder moves its LM once, when it is built (`decoders.fusion.lm_for_fusion`), and then refuses inputs
    from another device rather than moving the LM on every call.
    """

    vocab_size: int

    @property
    def device(self) -> torch.device:
        """Where the LM's tensors live, and so its states and scores."""
        ...

    def to(self, device: torch.device | str) -> LanguageModel:
        """This LM on `device`: `self` if it is there already, else an LM with the same scores whose tensors
        live there (`self` is left as it is)."""
        ...

    def initial_states(self, batch_size: int) -> Tensor:
        """-> states [B] at the beginning of a sentence."""
        ...

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """states [B] -> (scores [B, V] of every next label, next_states [B, V] after each label)."""
        ...

    def final_scores(self, states: Tensor) -> Tensor:
        """states [B] -> [B] log-probability of the end of sentence after each state."""
        ...
