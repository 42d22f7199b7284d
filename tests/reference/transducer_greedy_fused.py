"""Per-utterance greedy transducer decoding with LM shallow fusion, written to be obviously right.

The rules of `tests/reference/transducer_greedy.py`, plus NeMo's greedy fusion: the plain argmax over all
labels decides blank or not; a non-blank is re-picked among the non-blank labels by
`logits + lm_weight * lm_scores`, where `lm_scores` are the LM's log-probabilities of every label after the
labels emitted so far (asked one utterance at a time). The LM state moves only on emitted labels. Token
scores are the joint's log-probabilities; the hypothesis score adds `lm_weight` times the LM score of each
emitted label.
"""

from __future__ import annotations

import torch

from decoders.hypotheses import Hypothesis
from decoders.protocols import LanguageModel, TransducerModel


@torch.no_grad()
def fused_greedy_decode_one(model: TransducerModel, lm: LanguageModel, lm_weight: float,
                            encoder_output: torch.Tensor, max_symbols: int = 10) -> Hypothesis:
    """encoder_output [T, D] of one utterance -> its fused greedy hypothesis."""
    num_labels = model.vocab_size + 1
    is_tdt = len(model.durations) > 0
    frames = model.project_encoder(encoder_output.unsqueeze(0))[0]  # [T, H]
    state = model.initial_state(1, encoder_output.device, frames.dtype)
    sos = torch.tensor([model.blank_id], device=encoder_output.device)
    prediction, state = model.predict(sos, state)
    prediction = model.project_prediction(prediction)[0]  # [H]
    lm_state = lm.initial_states(1)

    tokens, frame_indices, durations, token_scores, lm_total = [], [], [], [], 0.0
    t = 0
    emitted_on_frame = 0
    while t < frames.shape[0]:
        logits = model.joint_after_projection(frames[t], prediction)
        label_logits = logits[:num_labels]
        label = int(torch.max(label_logits, dim=-1).indices)
        if is_tdt:
            duration = model.durations[int(torch.argmax(logits[num_labels:]))]
        else:
            duration = 1 if label == model.blank_id else 0

        if label == model.blank_id:
            t += max(duration, 1)
            emitted_on_frame = 0
            continue

        lm_scores, lm_next_states = lm.advance(lm_state)  # [1, V - 1] each
        fused = label_logits[: num_labels - 1] + lm_weight * lm_scores[0].to(label_logits.dtype)
        label = int(torch.argmax(fused))
        tokens.append(label)
        frame_indices.append(t)
        durations.append(duration)
        token_scores.append(float(torch.log_softmax(label_logits, dim=-1)[label]))
        lm_total += lm_weight * float(lm_scores[0, label].to(label_logits.dtype))
        lm_state = lm_next_states[:, label]
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


def fused_greedy_decode(model: TransducerModel, lm: LanguageModel, lm_weight: float, encoder_output: torch.Tensor,
                        encoder_lengths: torch.Tensor, max_symbols: int = 10) -> list[Hypothesis]:
    """encoder_output [B, T, D], encoder_lengths [B] -> one fused hypothesis per utterance, decoded one by one."""
    return [
        fused_greedy_decode_one(model, lm, lm_weight, encoder_output[b, : int(encoder_lengths[b])], max_symbols)
        for b in range(encoder_output.shape[0])
    ]
