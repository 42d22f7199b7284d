"""Per-utterance confidence, written to be obviously right: entropies from their definitions, NeMo's
frame -> token -> word rules as plain loops over one utterance's steps."""

from __future__ import annotations

import math

import torch

from decoders.confidence import ConfidenceConfig
from decoders.protocols import TransducerModel


def measure(log_probs: list[float], config: ConfidenceConfig, vocab_size: int | None = None) -> float:
    """One distribution -> its confidence: 1 - H/H_max (lin) or (b^-H - b^-H_max) / (1 - b^-H_max) (exp)."""
    method = config.method_cfg
    v = vocab_size or len(log_probs)
    a = method.alpha
    p = [math.exp(x) for x in log_probs]
    if method.name == "max_prob":
        return (max(p) ** a - v ** -a) / (1 - v ** -a)
    base = math.e
    if a == 1.0:
        entropy, max_entropy = -sum(q * math.log(q) for q in p if q > 0), math.log(v)
    elif method.entropy_type == "gibbs":
        entropy = -sum(q ** a * math.log(q ** a) for q in p if q > 0)
        max_entropy = -v * v ** -a * math.log(v ** -a)
    elif method.entropy_type == "tsallis":
        entropy = (1 - sum(q ** a for q in p)) / (a - 1)
        max_entropy = (1 - v * v ** -a) / (a - 1)
    else:
        entropy, max_entropy, base = math.log2(sum(q ** a for q in p)) / (1 - a), math.log2(v), 2.0
    if method.entropy_norm == "lin":
        return 1 - entropy / max_entropy
    return (base ** -entropy - base ** -max_entropy) / (1 - base ** -max_entropy)


def aggregate(values: list[float], aggregation: str) -> float:
    if aggregation == "mean":
        return sum(values) / len(values)
    return {"min": min, "max": max, "prod": math.prod}[aggregation](values)


@torch.no_grad()
def transducer_steps(model: TransducerModel, encoder_output: torch.Tensor, max_symbols: int = 10) -> list[tuple]:
    """One utterance's greedy steps: (frame, label, label log-probs, duration log-probs or None)."""
    num_labels = model.vocab_size + 1
    is_tdt = len(model.durations) > 0
    frames = model.project_encoder(encoder_output.unsqueeze(0))[0]
    state = model.initial_state(1, encoder_output.device, frames.dtype)
    prediction, state = model.predict(torch.tensor([model.blank_id]), state)
    prediction = model.project_prediction(prediction)[0]
    steps, t, on_frame = [], 0, 0
    while t < frames.shape[0]:
        logits = model.joint_after_projection(frames[t], prediction).double()
        label_log_probs = torch.log_softmax(logits[:num_labels], dim=-1)
        label = int(torch.argmax(label_log_probs))
        duration_log_probs = torch.log_softmax(logits[num_labels:], dim=-1).tolist() if is_tdt else None
        duration = model.durations[int(torch.argmax(logits[num_labels:]))] if is_tdt else int(label == model.blank_id)
        steps.append((t, label, label_log_probs.tolist(), duration_log_probs))
        if label == model.blank_id:
            t += max(duration, 1)
            on_frame = 0
            continue
        prediction, state = model.predict(torch.tensor([label]), state)
        prediction = model.project_prediction(prediction)[0]
        if duration > 0:
            t, on_frame = t + duration, 0
        else:
            on_frame += 1
            if on_frame >= max_symbols:
                t, on_frame = t + 1, 0
    return steps


def transducer_token_confidence(steps: list[tuple], num_frames: int, blank_id: int, is_tdt: bool,
                                config: ConfidenceConfig) -> list[float]:
    """NeMo's `compute_confidence` (rnnt_decoding.py) on one utterance's steps."""
    num_labels = blank_id + 1

    def step_confidence(step) -> float:
        value = measure(step[2], config, num_labels)
        if is_tdt and config.tdt_include_duration:
            value = aggregate([value, measure(step[3], config, num_labels)], config.aggregation)
        return value

    if config.exclude_blank:
        return [step_confidence(s) for s in steps if s[1] != blank_id]
    if is_tdt:  # every blank step joins the label before it
        groups = []
        for step in steps:
            if step[1] != blank_id:
                groups.append([step_confidence(step)])
            elif groups:
                groups[-1].append(step_confidence(step))
        return [aggregate(g, config.aggregation) if len(g) > 1 else g[0] for g in groups]
    # RNN-T: frame confidence per frame; a label takes the first step of each frame strictly before the next
    by_frame = [[] for _ in range(num_frames)]
    for step in steps:
        by_frame[step[0]].append(step)
    label_frames = [s[0] for s in steps if s[1] != blank_id]
    result, offset = [], 0
    for k, start in enumerate(label_frames):
        end = label_frames[k + 1] if k + 1 < len(label_frames) else num_frames
        if start != end:
            values = [step_confidence(by_frame[start][offset])]
            values += [step_confidence(by_frame[f][0]) for f in range(start + 1, end)]
            result.append(aggregate(values, config.aggregation))
            offset = 0
        else:
            result.append(step_confidence(by_frame[start][offset]))
            offset += 1
    return result


def ctc_token_confidence(log_probs: torch.Tensor, blank_id: int, config: ConfidenceConfig) -> list[float]:
    """log_probs [T, V] of one utterance -> NeMo's CTC greedy token confidence (ctc_decoding.py)."""
    frame_confidence = [measure(row, config) for row in log_probs.double().tolist()]
    labels = log_probs.argmax(dim=-1).tolist()
    starts, previous = [], blank_id
    for t, label in enumerate(labels):
        if label != blank_id and label != previous:
            starts.append(t)
        previous = label
    result = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(labels)
        frames = range(start, end)
        if config.exclude_blank:
            frames = [t for t in frames if labels[t] != blank_id]
        result.append(aggregate([frame_confidence[t] for t in frames], config.aggregation))
    return result


def word_confidence(token_confidence: list[float], starts: list[bool], keep: list[bool],
                    aggregation: str) -> list[float]:
    """Tokens grouped into words at `starts` (the first kept token always starts one); unkept tokens dropped."""
    words: list[list[float]] = []
    for value, start, kept in zip(token_confidence, starts, keep):
        if not kept:
            continue
        if start or not words:
            words.append([])
        words[-1].append(value)
    return [aggregate(w, aggregation) for w in words]
