"""Per-utterance greedy transducer decoding (label-looping paper, Algorithm 1), written to be obviously right.

One utterance at a time, one joint call per step, plain Python control flow. RNN-T is treated as TDT whose
blank moves one frame and whose labels move none. The rules, shared with NeMo's greedy decoders:
- the first prediction step is fed the blank (start of sequence);
- a blank moves `max(duration, 1)` frames (RNN-T: 1); a label is emitted at the current frame and moves
  `duration` frames (RNN-T: 0), even past the end of the utterance;
- after `max_symbols` labels in a row on one frame, move one frame on.

With an LM (shallow fusion as NeMo does it): the plain argmax over all labels decides blank or not; a non-blank
is re-picked among the non-blank labels by `logits + lm_weight * lm_scores`, where `lm_scores` are the LM's
log-probabilities of every label after the labels emitted so far. The LM state moves only on emitted labels.
Token scores stay the joint's log-probabilities; the hypothesis score adds `lm_weight` times the LM score of
each emitted label.
"""

from __future__ import annotations

import torch

from decoders.hypotheses import Hypothesis
from decoders.protocols import LanguageModel, TransducerModel


@torch.no_grad()
def greedy_decode_one(model: TransducerModel, encoder_output: torch.Tensor, max_symbols: int = 10,
                      lm: LanguageModel | None = None, lm_weight: float = 0.0) -> Hypothesis:
    """encoder_output [T, D] of one utterance -> its greedy hypothesis (fused with `lm` if given)."""
    num_labels = model.vocab_size + 1
    is_tdt = len(model.durations) > 0
    frames = model.project_encoder(encoder_output.unsqueeze(0))[0]  # [T, H]
    state = model.initial_state(1, encoder_output.device, frames.dtype)
    sos = torch.tensor([model.blank_id], device=encoder_output.device)
    prediction, state = model.predict(sos, state)
    prediction = model.project_prediction(prediction)[0]  # [H]

    lm_state = lm.initial_states(1) if lm is not None else None
    tokens, frame_indices, durations, token_scores, lm_total = [], [], [], [], 0.0
    t = 0
    emitted_on_frame = 0
    while t < frames.shape[0]:
        logits = model.joint_after_projection(frames[t], prediction)
        label_log_probs = torch.log_softmax(logits[:num_labels], dim=-1)
        label = int(torch.argmax(label_log_probs))
        if is_tdt:
            duration = model.durations[int(torch.argmax(logits[num_labels:]))]
        else:
            duration = 1 if label == model.blank_id else 0

        if label == model.blank_id:
            t += max(duration, 1)
            emitted_on_frame = 0
            continue

        if lm is not None:
            lm_scores, lm_next_states = lm.advance(lm_state)  # [1, V - 1] each
            fused = logits[: num_labels - 1] + lm_weight * lm_scores[0].to(logits.dtype)
            label = int(torch.argmax(fused))
            lm_total += lm_weight * float(lm_scores[0, label].to(logits.dtype))
            lm_state = lm_next_states[:, label]
        tokens.append(label)
        frame_indices.append(t)
        durations.append(duration)
        token_scores.append(float(label_log_probs[label]))
        prediction, state = model.predict(torch.tensor([label], device=encoder_output.device), state)
        prediction = model.project_prediction(prediction)[0]
        if duration > 0:
            t += duration
            emitted_on_frame = 0
        else:
            emitted_on_frame += 1
            if emitted_on_frame >= max_symbols:
                t += 1
                emitted_on_frame = 0

    return Hypothesis(
        tokens=tokens,
        frame_indices=frame_indices,
        durations=durations if is_tdt else None,
        token_scores=token_scores,
        score=sum(token_scores) + lm_total,
    )


def greedy_decode(
    model: TransducerModel, encoder_output: torch.Tensor, encoder_lengths: torch.Tensor, max_symbols: int = 10,
    lm: LanguageModel | None = None, lm_weight: float = 0.0,
) -> list[Hypothesis]:
    """encoder_output [B, T, D], encoder_lengths [B] -> one hypothesis per utterance, decoded one by one."""
    return [
        greedy_decode_one(model, encoder_output[b, : int(encoder_lengths[b])], max_symbols, lm, lm_weight)
        for b in range(encoder_output.shape[0])
    ]
