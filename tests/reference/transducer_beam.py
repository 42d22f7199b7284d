"""Per-utterance transducer beam search (ALSD and mAES), written to be obviously right, as test oracles.

One utterance at a time, hypotheses as Python objects holding their whole token sequence, one joint call
per hypothesis, identical hypotheses found by comparing token tuples (not hashes). The rules are those of
`decoders/transducer/beam.py` (its module docstring), spelled out step by step:

ALSD, each step, for every hypothesis in the beam:
- finished (its next frame is past the end): carried over unchanged;
- after `max_symbols_per_frame` labels in a row on its frame: only blank (TDT: with the best duration);
- otherwise its K best candidates (RNN-T: labels with blank; TDT: (label, duration) pairs).
Then the K best candidates of the utterance are kept, and identical hypotheses (same tokens; TDT: also the
same next frame) are merged: the best keeps the log-sum-exp of their scores.

mAES, each frame: prefix search, then up to `expansion_steps` rounds in which every hypothesis still on
the frame proposes its `beam_size + expansion_beta` best labels (pruned by value with `expansion_gamma`),
candidates equal to a hypothesis in the beam are dropped and equal candidates keep only the best; a blank
candidate ends the hypothesis's frame; hypotheses still on the frame after the last round take a blank.
TDT: only hypotheses whose next frame is this one expand, candidates are (label, duration) pairs, a label
with duration 0 stays on the frame; no prefix search, and identical hypotheses merge as in ALSD.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from decoders.hypotheses import Hypothesis
from decoders.protocols import LanguageModel, TransducerModel
from decoders.transducer.beam import BeamSearchConfig


@dataclass(frozen=True)
class Hyp:
    tokens: tuple[int, ...]
    frames: tuple[int, ...]
    durations: tuple[int, ...]
    score: float
    next_frame: int
    count: int  # labels in a row on the current frame
    prediction: torch.Tensor  # projected prediction output [H]
    state: tuple  # prediction network state, batch of one
    lm_state: int


def logsumexp(values: list[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))


class _Reference:
    def __init__(self, model: TransducerModel, config: BeamSearchConfig, lm: LanguageModel | None) -> None:
        self.model, self.config, self.lm = model, config, lm
        self.blank = model.blank_id
        self.num_labels = model.vocab_size + 1
        self.is_tdt = len(model.durations) > 0

    def start(self, encoder_output: torch.Tensor) -> Hyp:
        model = self.model
        self.frames = model.project_encoder(encoder_output.unsqueeze(0))[0]  # [T, H]
        state = model.initial_state(1, encoder_output.device, self.frames.dtype)
        prediction, state = model.predict(torch.tensor([self.blank]), state)
        lm_state = int(self.lm.initial_states(1)[0]) if self.lm is not None else 0
        return Hyp((), (), (), 0.0, 0, 0, model.project_prediction(prediction)[0], state, lm_state)

    def scores(self, hyp: Hyp, frame: int) -> tuple[list[float], list[float], list[float]]:
        """Model log-probabilities, fused scores (both over V labels with blank) and duration log-probs."""
        logits = self.model.joint_after_projection(self.frames[frame], hyp.prediction)
        log_probs = torch.log_softmax(logits[: self.num_labels], dim=-1).tolist()
        duration_log_probs = torch.log_softmax(logits[self.num_labels :], dim=-1).tolist() if self.is_tdt else []
        fused = list(log_probs)
        if self.lm is not None:
            alpha = self.config.lm_weight
            lm_scores = self.lm.advance(torch.tensor([hyp.lm_state]))[0][0].tolist()
            p_blank = min(math.exp(log_probs[self.blank]), 1.0 - 1e-2)
            for label in range(self.model.vocab_size):
                fused[label] = log_probs[label] + alpha * lm_scores[label]
                if self.config.blank_lm_scoring == "weighted":
                    fused[label] += alpha * math.log(1.0 - p_blank)
            if self.config.blank_lm_scoring == "weighted":
                fused[self.blank] = (1.0 + alpha) * log_probs[self.blank]
        return log_probs, fused, duration_log_probs

    def extend(self, hyp: Hyp, label: int | None, duration: int, score: float) -> Hyp:
        """hyp followed by label (None: carried over; blank: moves max(duration, 1) frames)."""
        if label is None:
            return replace(hyp, score=score)
        frame = hyp.next_frame
        if label == self.blank:
            return replace(hyp, score=score, next_frame=frame + max(duration, 1), count=0)
        model = self.model
        output, state = model.predict(torch.tensor([label]), hyp.state)
        lm_state = hyp.lm_state
        if self.lm is not None:
            lm_state = int(self.lm.advance(torch.tensor([hyp.lm_state]))[1][0, label])
        return Hyp(
            tokens=hyp.tokens + (label,),
            frames=hyp.frames + (frame,),
            durations=hyp.durations + (duration,),
            score=score,
            next_frame=frame + duration,  # past the end, as NeMo: identical ends on other frames stay apart
            count=hyp.count + 1 if duration == 0 else 0,
            prediction=model.project_prediction(output)[0],
            state=state,
            lm_state=lm_state,
        )

    def ranked(self, beam: list[Hyp]) -> list[Hyp]:
        def key(hyp: Hyp) -> float:
            if self.config.length_normalization:
                return hyp.score / (len(hyp.tokens) + 1)
            return hyp.score

        return sorted((h for h in beam if h.score > -math.inf), key=key, reverse=True)

    # --- ALSD ----------------------------------------------------------------------------------------------
    def alsd(self, encoder_output: torch.Tensor) -> list[Hyp]:
        length = encoder_output.shape[0]
        beam_size = self.config.beam_size
        beam = [self.start(encoder_output)]
        while any(h.next_frame < length for h in beam):
            candidates = []  # (score, parent, label or None, duration)
            for hyp in beam:
                if hyp.next_frame >= length:
                    candidates.append((hyp.score, hyp, None, 0))
                    continue
                log_probs, fused, duration_log_probs = self.scores(hyp, hyp.next_frame)
                if hyp.count >= self.config.max_symbols_per_frame:
                    duration, best = 1, 0.0
                    if self.is_tdt:
                        index = max(range(len(duration_log_probs)), key=lambda i: duration_log_probs[i])
                        duration, best = self.model.durations[index], duration_log_probs[index]
                    candidates.append((hyp.score + fused[self.blank] + best, hyp, self.blank, duration))
                    continue
                for value, label, duration in self.options(log_probs, fused, duration_log_probs):
                    candidates.append((hyp.score + value, hyp, label, duration))
            candidates = [c for c in candidates if c[0] > -math.inf]
            candidates.sort(key=lambda c: c[0], reverse=True)
            extended = [
                self.extend(parent, label, duration, score) for score, parent, label, duration in candidates[:beam_size]
            ]
            beam = self.merge(extended, by_frame=self.is_tdt)
        return self.ranked(beam)

    def options(self, log_probs, fused, duration_log_probs) -> list[tuple[float, int, int]]:
        """One hypothesis's best candidates: (score increment, label, duration)."""
        beam_size = self.config.beam_size
        labels = list(range(self.num_labels))
        if self.config.pruning == "early":  # the model's best labels, scored with the LM afterwards
            labels = sorted(labels, key=lambda y: log_probs[y], reverse=True)[:beam_size]
        if self.is_tdt:
            pairs = [
                (fused[y] + duration_log_probs[i], y, d) for y in labels for i, d in enumerate(self.model.durations)
            ]
        else:
            pairs = [(fused[y], y, 1 if y == self.blank else 0) for y in labels]
        return sorted(pairs, key=lambda p: p[0], reverse=True)[:beam_size]

    @staticmethod
    def merge(extended: list[Hyp], by_frame: bool) -> list[Hyp]:
        """Identical hypotheses (in score order): the first keeps the log-sum-exp of the group's scores."""
        groups: dict[tuple, list[Hyp]] = {}
        for hyp in extended:
            groups.setdefault((hyp.tokens, hyp.next_frame if by_frame else None), []).append(hyp)
        return [replace(group[0], score=logsumexp([h.score for h in group])) for group in groups.values()]

    # --- mAES ----------------------------------------------------------------------------------------------
    def maes(self, encoder_output: torch.Tensor) -> list[Hyp]:
        config = self.config
        length = encoder_output.shape[0]
        beam = [self.start(encoder_output)]
        for frame in range(length):
            on_frame = [h for h in beam if h.next_frame == frame]  # TDT: others jumped further and wait
            scored = {id(h): self.scores(h, frame) for h in on_frame}
            if config.beam_size > 1 and not self.is_tdt:  # prefix search, with the scores from before it
                updated = []
                for hyp in beam:
                    through = [
                        x.score + scored[id(x)][1][hyp.tokens[-1]]
                        for x in beam
                        if hyp.tokens and x.tokens == hyp.tokens[:-1]
                    ]
                    score = logsumexp([hyp.score] + through) if through else hyp.score
                    updated.append(replace(hyp, score=score))
                scored = {id(new): scored[id(old)] for new, old in zip(updated, beam)}
                beam = updated
            updating = set(scored)
            for _ in range(config.expansion_steps):
                if not updating:
                    break
                candidates = []  # (score, parent, label or None, duration)
                for hyp in beam:
                    if id(hyp) not in updating:
                        candidates.append((hyp.score, hyp, None, 0))
                        continue
                    options = self.expansion_options(*scored[id(hyp)])
                    best = hyp.score + options[0][0]
                    for ranking, value, label, duration in options:
                        if hyp.score + ranking > best - config.expansion_gamma:
                            candidates.append((hyp.score + value, hyp, label, duration))
                if not self.is_tdt:
                    candidates = self.without_duplicates(beam, candidates)
                candidates = [c for c in candidates if c[0] > -math.inf]
                candidates.sort(key=lambda c: c[0], reverse=True)
                beam = [
                    self.extend(parent, label, duration, score)
                    for score, parent, label, duration in candidates[: config.beam_size]
                ]
                if self.is_tdt:
                    beam = self.merge(beam, by_frame=True)
                # hypotheses still on the frame got a label that stays there (RNN-T: any; TDT: duration 0)
                # and may expand again; the others left it or wait for a later frame
                updating = {id(h) for h in beam if h.next_frame == frame}
                scored = {i: self.scores(h, frame) for h in beam if (i := id(h)) in updating}
            # hypotheses still on the frame after the last expansion take a blank (TDT: its best duration)
            finished = []
            for hyp in beam:
                if id(hyp) in updating:
                    _, fused, duration_log_probs = scored[id(hyp)]
                    duration, best = 1, 0.0
                    if self.is_tdt:
                        index = max(range(len(duration_log_probs)), key=lambda i: duration_log_probs[i])
                        duration, best = self.model.durations[index], duration_log_probs[index]
                    hyp = self.extend(hyp, self.blank, duration, hyp.score + fused[self.blank] + best)
                finished.append(hyp)
            if self.is_tdt:  # merge in score order: the blank changed the scores of some
                beam = self.merge(sorted(finished, key=lambda h: h.score, reverse=True), by_frame=True)
            else:
                beam = finished
        return self.ranked(beam)

    def expansion_options(self, log_probs, fused, duration_log_probs) -> list[tuple[float, float, int, int]]:
        """One hypothesis's `beam_size + expansion_beta` best candidates: (ranking score, fused score, label,
        duration), ranked by the model's scores (early pruning) or the fused ones (late)."""
        ranking = log_probs if self.config.pruning == "early" else fused
        if self.is_tdt:
            options = [
                (ranking[y] + duration_log_probs[i], fused[y] + duration_log_probs[i], y, d)
                for y in range(self.num_labels)
                for i, d in enumerate(self.model.durations)
            ]
        else:
            options = [(ranking[y], fused[y], y, 1 if y == self.blank else 0) for y in range(self.num_labels)]
        options.sort(key=lambda o: o[0], reverse=True)
        return options[: self.config.beam_size + self.config.expansion_beta]

    def without_duplicates(self, beam: list[Hyp], candidates: list[tuple]) -> list[tuple]:
        """Drop label candidates equal to a hypothesis in the beam; of equal candidates keep the best."""
        in_beam = {h.tokens for h in beam}
        best: dict[tuple, tuple] = {}
        carried = []
        for candidate in candidates:
            score, parent, label, _ = candidate
            if score == -math.inf:
                continue
            if label is None:
                carried.append(candidate)
                continue
            tokens = parent.tokens if label == self.blank else parent.tokens + (label,)
            if label != self.blank and tokens in in_beam:
                continue
            if tokens not in best or score > best[tokens][0]:
                best[tokens] = candidate
        return list(best.values()) + carried


def to_hypothesis(hyp: Hyp, is_tdt: bool) -> Hypothesis:
    return Hypothesis(
        tokens=list(hyp.tokens),
        frame_indices=list(hyp.frames),
        durations=list(hyp.durations) if is_tdt else None,
        token_scores=[],
        score=hyp.score,
    )


@torch.no_grad()
def alsd_decode(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    encoder_lengths: torch.Tensor,
    config: BeamSearchConfig,
    lm: LanguageModel | None = None,
) -> list[list[Hypothesis]]:
    """encoder_output [B, T, D], encoder_lengths [B] -> per utterance its hypotheses, best first."""
    reference = _Reference(model, config, lm)
    return [
        [to_hypothesis(h, reference.is_tdt) for h in reference.alsd(encoder_output[b, : int(length)])]
        for b, length in enumerate(encoder_lengths.tolist())
    ]


@torch.no_grad()
def maes_decode(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    encoder_lengths: torch.Tensor,
    config: BeamSearchConfig,
    lm: LanguageModel | None = None,
) -> list[list[Hypothesis]]:
    """encoder_output [B, T, D], encoder_lengths [B] -> per utterance its hypotheses, best first."""
    reference = _Reference(model, config, lm)
    return [
        [to_hypothesis(h, reference.is_tdt) for h in reference.maes(encoder_output[b, : int(length)])]
        for b, length in enumerate(encoder_lengths.tolist())
    ]
