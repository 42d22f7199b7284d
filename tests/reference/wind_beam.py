"""Per-utterance WIND beam search (Xu et al., 2025), written to be obviously right, as the test oracle of
`decoders/transducer/wind_beam.py`.

One utterance at a time; hypotheses are Python objects holding their whole token sequence, filed in a dict
from the frame they stand at to a list; one joint call per hypothesis and frame; identical hypotheses found by
comparing token tuples (not hashes). Scores, LM fusion and merging are those of
`tests/reference/transducer_beam.py` (whose `_Reference` this extends). The search, as
`decoders/transducer/wind_beam.py` states it:

- Take the list at the smallest frame t; stop when that frame is the utterance's length T.
- Merge and prune: a hypothesis B that extends another hypothesis A of the list by one label b gets
  logaddexp(score(B), score(A) + fused_A(b at t)) (scores from before this step) and A is dropped; the K best
  are kept.
- For each kept hypothesis, over the window t..t+n-1 (n = min(W, T - t)): label v at offset j scores the
  blanks at offsets 0..j-1 plus v at offset j, and files the hypothesis extended by v (emitted on frame t + j)
  under t + j; the blank entry scores the blanks of the whole window and files the hypothesis unchanged under
  t + n. After `max_symbols_per_frame` labels in a row on frame t, offset 0 offers no label. Its K best
  entries (ranked by the model's scores with early pruning, by the fused ones with late), less those that rank
  `expansion_gamma` or more below the best (mAES's pruning by value), are its children.
- Each list that got children merges identical hypotheses (the best keeps the log-sum-exp and its path) and,
  with `list_size`, keeps only its `list_size` best. `list_size=None` keeps every one: the paper's search.
- The answer: the hypotheses filed under T, ranked as the other searches rank them.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from decoders.hypotheses import Hypothesis
from decoders.protocols import LanguageModel, TransducerModel
from decoders.transducer.beam_base import BeamSearchConfig
from tests.reference.transducer_beam import Hyp, _Reference, logsumexp, to_hypothesis


class _WindReference(_Reference):
    def __init__(self, model, config, lm, list_size: int | None) -> None:
        super().__init__(model, config, lm)
        if self.is_tdt:
            raise ValueError("the WIND beam reference is RNN-T only")
        self.list_size = list_size
        self.largest_list = 0  # the most hypotheses any list held after merging (before pruning to list_size)
        self.prefix_merges = 0  # hypotheses that took in a prefix's extension

    def wind(self, encoder_output: torch.Tensor) -> list[Hyp]:
        length = encoder_output.shape[0]
        lists: dict[int, list[Hyp]] = {0: [self.start(encoder_output)]}
        while min(lists) < length:
            frame = min(lists)
            beam = self.merge_and_prune(lists.pop(frame), frame)
            window = min(self.config.window_size, length - frame)
            arrivals: dict[int, list[Hyp]] = {}
            for hyp in beam:
                for child in self.children(hyp, frame, window):
                    arrivals.setdefault(child.next_frame, []).append(child)
            for target, children in arrivals.items():
                merged = self.merge(sorted(lists.get(target, []) + children, key=lambda h: h.score, reverse=True),
                                    by_frame=False)
                self.largest_list = max(self.largest_list, len(merged))
                if self.list_size is not None:
                    merged = sorted(merged, key=lambda h: h.score, reverse=True)[: self.list_size]
                lists[target] = merged
        return self.ranked(lists[length])[: self.config.beam_size]

    def merge_and_prune(self, waiting: list[Hyp], frame: int) -> list[Hyp]:
        by_tokens = {hyp.tokens: hyp for hyp in waiting}  # distinct: merged when they were filed
        updated, dropped = [], set()
        for hyp in waiting:
            prefix = by_tokens.get(hyp.tokens[:-1]) if hyp.tokens else None
            if prefix is not None:
                fused = self.scores(prefix, frame)[1]
                hyp = replace(hyp, score=logsumexp([hyp.score, prefix.score + fused[hyp.tokens[-1]]]))
                dropped.add(prefix.tokens)
                self.prefix_merges += 1
            updated.append(hyp)
        kept = [hyp for hyp in updated if hyp.tokens not in dropped]
        return sorted(kept, key=lambda h: h.score, reverse=True)[: self.config.beam_size]

    def children(self, hyp: Hyp, frame: int, window: int) -> list[Hyp]:
        entries = []  # (ranking, fused score, label, offset)
        blank_ranking = blank_fused = 0.0
        for offset in range(window):
            log_probs, fused, _ = self.scores(hyp, frame + offset)
            ranking = log_probs if self.config.pruning == "early" else fused
            if offset > 0 or hyp.count < self.config.max_symbols_per_frame:
                for label in range(self.model.vocab_size):
                    entries.append((blank_ranking + ranking[label], blank_fused + fused[label], label, offset))
            blank_ranking += ranking[self.blank]
            blank_fused += fused[self.blank]
        entries.append((blank_ranking, blank_fused, self.blank, window))
        entries.sort(key=lambda entry: entry[0], reverse=True)
        best = entries[0][0]
        children = []
        for ranking, value, label, offset in entries[: self.config.beam_size]:
            if ranking <= best - self.config.expansion_gamma:
                continue
            score = hyp.score + value
            if label == self.blank:
                children.append(replace(hyp, score=score, next_frame=frame + window, count=0))
            else:  # emitted on frame + offset, where it stands
                moved = replace(hyp, next_frame=frame + offset, count=hyp.count if offset == 0 else 0)
                children.append(self.extend(moved, label, 0, score))
        return children


@torch.no_grad()
def wind_beam_decode(
    model: TransducerModel,
    encoder_output: torch.Tensor,
    encoder_lengths: torch.Tensor,
    config: BeamSearchConfig,
    lm: LanguageModel | None = None,
    list_size: int | None = None,
) -> tuple[list[list[Hypothesis]], dict[str, int]]:
    """encoder_output [B, T, D], encoder_lengths [B] -> (per utterance its hypotheses, best first; counts over
    the batch: `largest_list`, the most hypotheses a frame's list held, and `prefix_merges`)."""
    reference = _WindReference(model, config, lm, list_size)
    results = [
        [to_hypothesis(h, False) for h in reference.wind(encoder_output[b, : int(length)])]
        for b, length in enumerate(encoder_lengths.tolist())
    ]
    return results, {"largest_list": reference.largest_list, "prefix_merges": reference.prefix_merges}
