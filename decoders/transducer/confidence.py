"""Per-token confidence of transducer hypotheses found by any search: what the beam searches (ALSD++, AES++, WIND
beam) give with `--confidence`.

A beam search keeps many hypotheses and merges them, so no single step's distribution belongs to the answer while
it searches. Once it has chosen, the answer's own distributions are recomputed: the prediction network is run over
the chosen labels (teacher forcing, batched over the utterances, one step per label position), and the joint at
each label's frame, with the prediction of the labels before it, is measured as greedy decoding measures the step
that found a label (`step_confidence`: NeMo's measures over the labels, and for TDT with `tdt_include_duration`
the duration distribution's measure aggregated with it). These are the distributions of the ASR model, without the
LM or boosting that helped choose the labels (as greedy decoding with fusion measures them). Blank steps are not
folded in: the chosen path's blank frames are not kept by the searches, so `exclude_blank` must be on.

Cost: one prediction-network step and one joint per label of the answer, batched: about what greedy decoding spends
on its label steps, small beside a beam search of K hypotheses per frame.

Dims: B utterances, T frames, H joint width, U labels of the longest answer, V labels with blank (+N durations).
"""

from __future__ import annotations

import torch
from torch import Tensor

from decoders.confidence import ConfidenceConfig, step_confidence
from decoders.hypotheses import BatchedHypotheses
from decoders.protocols import TransducerModel


@torch.no_grad()
def hypothesis_confidence(model: TransducerModel, encoder_output: Tensor, hypotheses: BatchedHypotheses,
                          config: ConfidenceConfig) -> Tensor:
    """encoder_output [B, T, D] and the B hypotheses found on it -> token confidence [B, capacity] (0 past each
    hypothesis' length)."""
    if not config.exclude_blank:
        raise ValueError("the confidence of a searched hypothesis measures its label steps only (exclude_blank)")
    batch_size, max_time = encoder_output.shape[:2]
    lengths = hypotheses.token_lengths
    out = torch.zeros(hypotheses.tokens.shape, dtype=encoder_output.dtype, device=encoder_output.device)
    steps = int(lengths.max()) if batch_size else 0
    if steps == 0:
        return out
    encoder_projected = model.project_encoder(encoder_output)  # [B, T, H]
    rows = torch.arange(batch_size, device=encoder_output.device)
    num_labels = model.vocab_size + 1
    labels = torch.full((batch_size,), model.blank_id, dtype=torch.long, device=encoder_output.device)
    prediction, state = model.predict(labels, model.initial_state(batch_size, encoder_output.device,
                                                                  encoder_projected.dtype))
    for position in range(steps):
        frames = hypotheses.frame_indices[:, position].clamp(0, max_time - 1)
        logits = model.joint_after_projection(encoder_projected[rows, frames],
                                              model.project_prediction(prediction))  # [B, V (+N)]
        confidence = step_confidence(logits, num_labels, config, with_durations=len(model.durations) > 0)
        inside = position < lengths
        out[:, position] = torch.where(inside, confidence.to(out.dtype), 0.0)
        if position + 1 < steps:
            labels = torch.where(inside, hypotheses.tokens[:, position], model.blank_id)
            prediction, state = model.predict(labels, state)
    return out


__all__ = ["hypothesis_confidence"]
