"""Frame-looping batched greedy search for RNN-T and TDT (label-looping paper, Algorithm 2): the conventional
baseline that `LabelLoopingGreedy` (`decoders/transducer/greedy.py`) is measured against (`benchmarks/greedy.py`)
and checked with (the same tokens).

Dims: B batch, T frames, D encoder, V vocabulary with blank, N durations (TDT).
"""

from __future__ import annotations

import torch
from torch import Tensor

from decoders.hypotheses import BatchedHypotheses
from decoders.protocols import PredictorState, TransducerModel
from decoders.transducer.greedy import GreedyConfig, best_label_scores
from decoders.transducer.shared import check_encoder_inputs


class FrameLoopingGreedy:
    """Frame-looping batched greedy search for RNN-T and TDT (label-looping paper, Algorithm 2): the baseline.

    For each frame t, utterances whose current frame is t look for labels, one joint and one prediction
    step for the whole batch per label, until every such utterance has left the frame.
    """

    def __init__(self, model: TransducerModel, config: GreedyConfig = GreedyConfig()) -> None:  # noqa: B008 (frozen)
        if config.window_size != 1:
            raise ValueError("FrameLoopingGreedy has no window; use LabelLoopingGreedy for WIND")
        self.model = model
        self.config = config
        self.num_labels = model.vocab_size + 1
        self.is_tdt = len(model.durations) > 0

    @torch.no_grad()
    def __call__(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        """encoder_output [B, T, D], encoder_lengths [B] -> the greedy hypothesis of each utterance."""
        check_encoder_inputs(encoder_output, encoder_lengths)
        model = self.model
        device = encoder_output.device
        batch_size, max_time, _ = encoder_output.shape
        encoder_lengths = encoder_lengths.to(device=device, dtype=torch.long)
        encoder_projected = model.project_encoder(encoder_output)
        hypotheses = BatchedHypotheses(batch_size, max_time + 1, device, encoder_projected.dtype,
                                       with_durations=self.is_tdt)
        durations_table = torch.tensor(model.durations, dtype=torch.long, device=device) if self.is_tdt else None

        labels = torch.full((batch_size,), model.blank_id, dtype=torch.long, device=device)
        state: PredictorState = model.initial_state(batch_size, device, encoder_projected.dtype)
        prediction, state = model.predict(labels, state)
        prediction = model.project_prediction(prediction)
        time = torch.zeros(batch_size, dtype=torch.long, device=device)
        emitted = 0
        for t in range(max_time):
            on_frame = (time == t) & (encoder_lengths > t)
            for symbol in range(self.config.max_symbols):
                if not bool(on_frame.any()):
                    break
                logits = model.joint_after_projection(encoder_projected[:, t], prediction)  # [B, V (+N)]
                scores, labels, _ = best_label_scores(logits, self.num_labels)
                is_blank = labels == model.blank_id
                if self.is_tdt:
                    durations = durations_table[logits[:, self.num_labels:].argmax(dim=-1)]
                else:
                    durations = torch.zeros_like(labels)
                emit = on_frame & ~is_blank
                emitted += 1
                hypotheses.ensure_capacity_(emitted)
                hypotheses.append_(emit, labels, torch.full_like(labels, t), scores,
                                   durations if self.is_tdt else None)
                new_prediction, new_state = model.predict(labels, state)
                prediction = torch.where(emit.unsqueeze(1), model.project_prediction(new_prediction), prediction)
                model.replace_states_(state, new_state, emit)
                jumps = torch.where(is_blank, durations.clamp(min=1), durations)
                time = torch.where(on_frame, time + jumps, time)
                on_frame = on_frame & (jumps == 0)
                if symbol == self.config.max_symbols - 1:
                    time = time + on_frame  # max_symbols reached: move one frame on
        return hypotheses
