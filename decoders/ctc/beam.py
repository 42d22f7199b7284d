"""Batched CTC prefix beam search with token-level LM fusion and optional blank collapse.

The search keeps K distinct label prefixes per utterance, each with two log-probabilities: of the frames so
far ending in blank (`p_blank`) and ending in its last label (`p_label`) (Hannun et al., 2014, "First-Pass
Large Vocabulary Continuous Speech Recognition using Bi-Directional Recurrent DNNs"; the textbook prefix
beam search). One frame is one step for the whole batch over a [B, K, M] tensor of candidates:
- each prefix stays itself through blank (`p_blank' = p + p(blank)`) and through a repeat of its last label
  (`p_label' = p_label + p(last)`);
- each prefix extends by each of the frame's M selected non-blank labels v (`p_label' = p + p(v)`, or
  `p_blank + p(v)` when v repeats the last label), adding `lm_weight * log p_lm(v | prefix) + insertion_bonus`.
  By default all V - 1 labels are selected with an LM, and the K + 1 best without one (which changes nothing:
  an extension ranked below K + 1 others of its own prefix cannot make the beam); `max_labels_per_frame` and
  `token_min_log_prob` (pyctcdecode's token pruning) select fewer, at some risk of search errors;
- an extension equal to a prefix already in the beam is merged into it (log-add of `p_label`): prefixes carry
  a 64-bit rolling hash of their labels and the hash of their parent prefix, so "prefix k extended by the
  last label of prefix j is prefix j" is a [B, K, K] comparison;
- a candidate's score is `log(p_blank + p_label) + lm_weight * lm + insertion_bonus * length`; candidates
  more than `beam_threshold` below the best are dropped, and the best K survive.
At the end `lm_weight * log p_lm(</s> | prefix)` is added (`lm_end_of_sentence`) before the final ranking.

With `collapse_threshold` set, blank collapse (`decoders.ctc.greedy.collapse_blanks`) shortens the emissions first,
and token frames are mapped back to original frames. A token's frame is the frame on which its prefix was
extended by it; when a prefix in the beam is reached again by its parent's extension, the merged prefix keeps
the frames of whichever contribution is larger, so frames follow the most probable lineage.

Labels are `0 .. V-1` with blank at `blank_id`; the LM covers the non-blank labels (`lm.vocab_size == V - 1`,
renumbered without blank as in `decoders.ctc.greedy`; NeMo's layout puts blank last, `blank_id == lm.vocab_size`).
With `lm_weight` 0 the LM is dropped when the search is built; a fused LM is moved to the search's `device`
then, once, and inputs must come from that device. The search calls only the `LanguageModel` protocol,
except that an LM with `score_labels(states [N], labels [N, M]) -> (scores, next_states)` (as `NgramLm` has)
is asked for just the M selected labels.

Frames past an utterance's end are replaced by certain blanks, which leave its beam unchanged, so the loop
needs no per-utterance masks. The loop runs the same tensor ops on a GPU; host synchronizations happen once
per call and, with `token_min_log_prob`, once per 64 frames (the sparse label selection).

Dims: B batch, T frames, T' frames after collapse, V labels with blank, K beam, N n-best, U labels.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from decoders.ctc.greedy import check_ctc_inputs, collapse_blanks, ctc_to_lm_labels
from decoders.fusion import check_lm_device, check_lm_vocab_size, lm_for_fusion
from decoders.hypotheses import BatchedHypotheses
from decoders.protocols import LanguageModel

HASH_MULTIPLIER = 6364136223846793005  # NeMo's rolling hash: h' = h * M + 1 + label (int64 wraparound)
_CHUNK_FRAMES = 64  # label selection runs on this many frames at once


@dataclass(frozen=True)
class CtcBeamConfig:
    beam_size: int = 8
    lm_weight: float = 0.0  # alpha: weight of the LM's natural-log probabilities
    insertion_bonus: float = 0.0  # beta: added per emitted label
    beam_threshold: float = math.inf  # drop candidates scoring more than this below the best (pyctcdecode: 10)
    collapse_threshold: float | Literal["weak"] | None = None  # None: no collapse; "weak": argmax is blank
    lm_end_of_sentence: bool = True  # add lm_weight * log p(</s> | prefix) before the final ranking
    # labels that may start new prefixes on a frame: its M best non-blank labels (None: all; without an LM
    # the result is exact either way), and of those only labels with at least this log-probability, or the
    # frame's best label (pyctcdecode's token_min_logp, -5 there). Prefixes already in the beam still
    # receive every label's probability.
    max_labels_per_frame: int | None = None
    token_min_log_prob: float = -math.inf
    cpu_threads: int | None = None  # torch threads while decoding on the CPU; None keeps the process setting

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if not self.beam_threshold > 0:
            raise ValueError(f"beam_threshold must be > 0, got {self.beam_threshold}")
        threshold = self.collapse_threshold
        if (
            threshold is not None
            and threshold != "weak"
            and not (isinstance(threshold, (int, float)) and 0.0 < threshold < 1.0)
        ):
            raise ValueError(f"collapse_threshold must be None, 'weak' or in (0, 1), got {threshold!r}")
        if self.max_labels_per_frame is not None and self.max_labels_per_frame < 1:
            raise ValueError(f"max_labels_per_frame must be >= 1, got {self.max_labels_per_frame}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be >= 1, got {self.cpu_threads}")


@contextlib.contextmanager
def _torch_threads(threads: int | None, device: torch.device) -> Iterator[None]:
    if threads is None or device.type != "cpu" or threads == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class CtcBeamSearch:
    """Batched CTC prefix beam search with token-level LM fusion (see module docstring)."""

    def __init__(
        self,
        blank_id: int,
        config: CtcBeamConfig = CtcBeamConfig(),
        lm: LanguageModel | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        """`device`: where inputs will be, so where the LM is moved, once (None: the LM stays where it is)."""
        if blank_id < 0:
            raise ValueError(f"blank_id must be >= 0, got {blank_id}")
        self.blank_id = blank_id
        self.config = config
        # None at lm_weight 0; the labels come with each input, so lm.vocab_size is checked per call
        self.lm = lm_for_fusion(lm, config.lm_weight, None, device)

    @torch.no_grad()
    def __call__(self, log_probs: Tensor, lengths: Tensor, nbest: int = 1) -> BatchedHypotheses:
        """log_probs [B, T, V] (log-softmax output), lengths [B] -> hypotheses.

        With nbest = 1, the best hypothesis per utterance ([B] rows). With nbest = N > 1, N rows per utterance
        ([B * N] rows, row b * N + i is utterance b's i-th best; rows past the hypotheses found are empty with
        score -inf). `scores` are full search scores (acoustic + weighted LM + bonus, end of sentence
        included); `token_scores` are each label's acoustic log-probability on its frame; frames are original.
        """
        check_ctc_inputs(log_probs, lengths, self.blank_id)
        if not 1 <= nbest <= self.config.beam_size:
            raise ValueError(f"nbest must lie in [1, beam_size={self.config.beam_size}], got {nbest}")
        if self.lm is not None:
            check_lm_vocab_size(self.lm, log_probs.shape[2] - 1)
            check_lm_device(self.lm, log_probs.device, "log_probs")
        lengths = lengths.to(device=log_probs.device, dtype=torch.long)
        with _torch_threads(self.config.cpu_threads, log_probs.device):
            frame_map = None
            threshold = self.config.collapse_threshold
            if threshold is not None:
                log_probs, lengths, frame_map = collapse_blanks(
                    log_probs, lengths, self.blank_id, None if threshold == "weak" else float(threshold)
                )
            return self._search(log_probs, lengths, frame_map, nbest)

    def _search(self, log_probs: Tensor, lengths: Tensor, frame_map: Tensor | None, nbest: int) -> BatchedHypotheses:
        config, blank_id = self.config, self.blank_id
        batch_size, max_time, num_labels = log_probs.shape
        beam = config.beam_size
        device, dtype = log_probs.device, log_probs.dtype
        use_lm = self.lm is not None and num_labels > 1
        lm_weight = config.lm_weight if use_lm else 0.0
        bonus = config.insertion_bonus
        minus_inf = float("-inf")
        # 0-d tensors: torch.where with a Python scalar builds a tensor on every call
        neg_inf = torch.tensor(minus_inf, dtype=dtype, device=device)
        zero = torch.tensor(0.0, dtype=dtype, device=device)
        no_label = torch.tensor(-1, dtype=torch.long, device=device)
        # the labels each frame may extend prefixes by: the M best non-blank labels. Without an LM, M = K + 1
        # loses nothing: an extension ranked below K + 1 others of its own prefix can never make the beam.
        labels_per_frame = num_labels - 1
        if config.max_labels_per_frame is not None:
            labels_per_frame = min(labels_per_frame, config.max_labels_per_frame)
        if not use_lm:
            labels_per_frame = min(labels_per_frame, beam + 1)
        non_blank = torch.cat([torch.arange(blank_id), torch.arange(blank_id + 1, num_labels)]).to(device)
        score_labels = getattr(self.lm, "score_labels", None) if use_lm else None
        if labels_per_frame == 0:  # blank is the only label: every hypothesis is empty
            return self._only_blank(log_probs, lengths, nbest)

        # frames past an utterance's end become certain blanks, which leave every beam as it is
        inside = torch.arange(max_time, device=device) < lengths.unsqueeze(1)  # [B, T]
        if not bool(inside.all()):
            blank_frame = torch.full((num_labels,), minus_inf, dtype=dtype, device=device)
            blank_frame[blank_id] = 0.0
            log_probs = torch.where(inside.unsqueeze(2), log_probs, blank_frame)

        # the beam: slot 0 holds the empty prefix, the other slots are empty (score -inf)
        p_blank = torch.full((batch_size, beam), minus_inf, dtype=dtype, device=device)
        p_blank[:, 0] = 0.0
        p_label = torch.full_like(p_blank, minus_inf)
        prefix_extra = torch.zeros_like(p_blank)  # lm_weight * LM log-probability + insertion bonus * length
        prefix_lengths = torch.zeros(batch_size, beam, dtype=torch.long, device=device)
        last_labels = torch.full_like(prefix_lengths, blank_id)
        hashes = torch.zeros_like(prefix_lengths)
        parent_hashes = torch.full_like(prefix_lengths, -1)  # no parent: the empty prefix (its hash is 0)
        valid = torch.zeros(batch_size, beam, dtype=torch.bool, device=device)
        valid[:, 0] = True
        lm_states = (
            self.lm.initial_states(batch_size).unsqueeze(1).expand(batch_size, beam).contiguous() if use_lm else None
        )
        # per frame: each slot's source slot and appended label (-1: none)
        history_parents, history_labels = [], []

        for t in range(int(lengths.max()) if batch_size > 0 else 0):
            if t % _CHUNK_FRAMES == 0:
                selected_chunk, selected_scores_chunk = self._select_labels(
                    log_probs[:, t : t + _CHUNK_FRAMES], non_blank, labels_per_frame
                )
                lm_labels_chunk = ctc_to_lm_labels(selected_chunk, blank_id) if use_lm else None
            frame = log_probs[:, t]  # [B, V]
            selected = selected_chunk[:, t % _CHUNK_FRAMES]  # [B, M]
            width = selected.shape[1]
            selected_scores = selected_scores_chunk[:, t % _CHUNK_FRAMES]
            total = torch.logaddexp(p_blank, p_label)  # [B, K]
            # the prefix itself, through blank or a repeat of its last label (empty prefixes have p_label -inf)
            last_scores = frame.gather(1, last_labels)
            same_blank = total + frame[:, blank_id].unsqueeze(1)
            same_label = p_label + last_scores
            same_score = torch.logaddexp(same_blank, same_label)

            # extensions by the frame's selected labels [B, K, M]
            repeats = selected.unsqueeze(1) == last_labels.unsqueeze(2)  # [B, K, M]
            extend = torch.where(repeats, p_blank.unsqueeze(2), total.unsqueeze(2)) + selected_scores.unsqueeze(1)
            if use_lm:
                lm_labels = lm_labels_chunk[:, t % _CHUNK_FRAMES].unsqueeze(1).expand(-1, beam, -1)
                lm_labels = lm_labels.reshape(batch_size * beam, width)
                if score_labels is not None:  # an LM that can score just these labels (NgramLm can)
                    lm_scores, next_states = score_labels(lm_states.reshape(-1), lm_labels)
                else:
                    all_scores, all_next = self.lm.advance(lm_states.reshape(-1))  # [B*K, V-1]
                    lm_scores, next_states = all_scores.gather(1, lm_labels), all_next.gather(1, lm_labels)
                step_extra = lm_weight * lm_scores.to(dtype).view(batch_size, beam, -1) + bonus  # [B, K, M]
                extend_score = extend + (prefix_extra.unsqueeze(2) + step_extra)
            else:
                extend_score = extend + (prefix_extra + bonus).unsqueeze(2)

            # merge: the extension of slot k by slot j's last label is slot j's prefix. It adds to slot j whether
            # or not the label was selected (selection limits new prefixes only), and leaves the candidates.
            is_parent = (
                (parent_hashes.unsqueeze(2) == hashes.unsqueeze(1)) & valid.unsqueeze(1) & valid.unsqueeze(2)
            )  # [B, J, K]
            has_parent = is_parent.any(dim=2)
            parents = is_parent.to(torch.uint8).argmax(dim=2)  # [B, J]
            from_blank = last_labels == last_labels.gather(1, parents)  # a repeated label needs a blank between
            parent_mass = torch.where(from_blank, p_blank.gather(1, parents), total.gather(1, parents))
            merged = torch.where(has_parent, parent_mass + last_scores, neg_inf)
            # the larger contribution decides whose frames the merged prefix keeps
            restamp = merged > same_score  # [B, J]; false where there is nothing to merge
            same_score = torch.logaddexp(same_score, merged) + prefix_extra
            same_label = torch.logaddexp(same_label, merged)
            # `repeats` read as [B, J, M]: where slot j's last label sits among the selected labels
            remove = has_parent & repeats.any(dim=2)
            flat_index = parents * width + repeats.to(torch.uint8).argmax(dim=2)
            # scatter_add, not scatter: rows with nothing to remove may point at the same candidate
            removed = torch.zeros(batch_size, beam * width, dtype=torch.long, device=device)
            removed.scatter_add_(1, flat_index, remove.long())
            extend_score.masked_fill_(removed.view_as(extend_score) > 0, minus_inf)

            candidates = torch.cat([same_score, extend_score.view(batch_size, -1)], dim=1)  # [B, K + K*M]
            if config.beam_threshold < math.inf:
                best = candidates.max(dim=1, keepdim=True).values
                candidates.masked_fill_(candidates < best - config.beam_threshold, minus_inf)
            top_scores, top = candidates.topk(beam, dim=1)  # [B, K]

            is_extension = top >= beam
            extension = (top - beam).clamp(min=0)  # flat index k * M + m into the [B, K, M] extensions
            source = torch.where(is_extension, extension // max(width, 1), top)  # [B, K]
            new_labels = selected.gather(1, extension % max(width, 1)) if width > 0 else torch.zeros_like(top)
            valid = top_scores > minus_inf
            source_last = last_labels.gather(1, source)

            # history: a continued prefix whose parent's extension outweighed it takes the parent's lineage
            restamped = ~is_extension & restamp.gather(1, source)
            stamped = (is_extension | restamped) & valid
            history_parents.append(torch.where(restamped, parents.gather(1, source), source))
            history_labels.append(torch.where(stamped, torch.where(restamped, source_last, new_labels), no_label))

            p_blank = same_blank.gather(1, source).masked_fill_(is_extension | ~valid, minus_inf)
            p_label = torch.where(
                valid,
                torch.where(
                    is_extension, extend.view(batch_size, -1).gather(1, extension), same_label.gather(1, source)
                ),
                neg_inf,
            )
            source_hashes = hashes.gather(1, source)
            parent_hashes = torch.where(is_extension, source_hashes, parent_hashes.gather(1, source))
            hashes = torch.where(is_extension, source_hashes * HASH_MULTIPLIER + 1 + new_labels, source_hashes)
            last_labels = torch.where(is_extension, new_labels, source_last)
            prefix_lengths = prefix_lengths.gather(1, source) + is_extension
            if use_lm:
                added = torch.where(is_extension, step_extra.view(batch_size, -1).gather(1, extension), zero)
                lm_states = torch.where(
                    is_extension,
                    next_states.view(batch_size, -1).gather(1, extension),
                    lm_states.gather(1, source),
                )
            else:
                added = is_extension * bonus
            prefix_extra = prefix_extra.gather(1, source) + added

        final = torch.logaddexp(p_blank, p_label) + prefix_extra
        if use_lm and config.lm_end_of_sentence:
            end_scores = self.lm.final_scores(lm_states.reshape(-1)).to(dtype).view(batch_size, beam)
            final = final + lm_weight * end_scores
        final = torch.where(valid, final, minus_inf)
        order_scores, order = final.topk(nbest, dim=1)  # [B, N]
        return self._backtrack(
            log_probs, order, order_scores, prefix_lengths.gather(1, order), history_parents, history_labels, frame_map
        )

    def _select_labels(self, log_probs: Tensor, non_blank: Tensor, labels_per_frame: int) -> tuple[Tensor, Tensor]:
        """log_probs [B, F, V] -> the labels that may start prefixes on each frame and their scores [B, F, M]
        (-inf for labels below token_min_log_prob, except each frame's best)."""
        num_labels = log_probs.shape[2]
        if self.blank_id == 0:  # views, no copies
            scores = log_probs[..., 1:]
        elif self.blank_id == num_labels - 1:  # NeMo's layout
            scores = log_probs[..., : num_labels - 1]
        else:
            scores = log_probs.index_select(2, non_blank)  # [B, F, V-1]
        if self.config.token_min_log_prob > float("-inf"):
            return self._select_sparse(scores, non_blank, labels_per_frame)
        if labels_per_frame < scores.shape[2]:
            scores, indices = scores.topk(labels_per_frame, dim=2)
            return non_blank[indices], scores
        return non_blank.expand(*scores.shape), scores

    def _select_sparse(self, scores: Tensor, non_blank: Tensor, labels_per_frame: int) -> tuple[Tensor, Tensor]:
        """The M best of the labels at or above token_min_log_prob (or best on their frame), for scores
        [B, F, V-1] of peaky emissions where few labels pass: compare, then sort only those. M shrinks to the
        most labels any frame has; padding is blank with score -inf."""
        batch_size, frames, width = scores.shape
        best = scores.max(dim=2, keepdim=True).values
        passing = (scores >= self.config.token_min_log_prob) | ((scores == best) & (best > float("-inf")))
        passing = passing.view(batch_size * frames, width)
        counts = passing.sum(dim=1)  # [B*F]
        kept = max(min(int(counts.max()) if counts.numel() > 0 else 0, labels_per_frame), 1)
        rows, columns = passing.nonzero(as_tuple=True)  # row-major, labels ascending within a row
        values = scores.reshape(batch_size * frames, width)[rows, columns]
        order = torch.sort(values, descending=True, stable=True).indices
        order = order[torch.sort(rows[order], stable=True).indices]  # by row, best first, ties by label
        rows, columns, values = rows[order], columns[order], values[order]
        ranks = torch.arange(rows.shape[0], device=rows.device) - (torch.cumsum(counts, 0) - counts)[rows]
        inside = ranks < kept
        rows, ranks = rows[inside], ranks[inside]
        labels = torch.full((batch_size * frames, kept), self.blank_id, dtype=torch.long, device=scores.device)
        selected_scores = torch.full(
            (batch_size * frames, kept), float("-inf"), dtype=scores.dtype, device=scores.device
        )
        labels[rows, ranks] = non_blank[columns[inside]]
        selected_scores[rows, ranks] = values[inside]
        return labels.view(batch_size, frames, kept), selected_scores.view(batch_size, frames, kept)

    def _only_blank(self, log_probs: Tensor, lengths: Tensor, nbest: int) -> BatchedHypotheses:
        batch_size, max_time, _ = log_probs.shape
        inside = torch.arange(max_time, device=log_probs.device) < lengths.unsqueeze(1)
        scores = torch.full((batch_size, nbest), float("-inf"), dtype=log_probs.dtype, device=log_probs.device)
        scores[:, 0] = torch.where(inside, log_probs[..., self.blank_id], 0.0).sum(dim=1)
        hypotheses = BatchedHypotheses(batch_size * nbest, 0, log_probs.device, log_probs.dtype)
        hypotheses.scores.copy_(scores.reshape(-1))
        return hypotheses

    @staticmethod
    def _backtrack(
        log_probs: Tensor,
        order: Tensor,
        scores: Tensor,
        token_lengths: Tensor,
        history_parents: list[Tensor],
        history_labels: list[Tensor],
        frame_map: Tensor | None,
    ) -> BatchedHypotheses:
        """Follow parent pointers from the chosen slots order [B, N] back to the first frame."""
        batch_size, nbest = order.shape
        device = order.device
        found = scores > float("-inf")
        token_lengths = torch.where(found, token_lengths, 0)  # [B, N]
        capacity = int(token_lengths.max()) if token_lengths.numel() > 0 else 0
        hypotheses = BatchedHypotheses(batch_size * nbest, capacity, device, scores.dtype)
        hypotheses.token_lengths.copy_(token_lengths.reshape(-1))
        hypotheses.scores.copy_(scores.reshape(-1))
        if capacity == 0:
            return hypotheses
        tokens = torch.zeros(batch_size, nbest, capacity, dtype=torch.long, device=device)
        frames = torch.zeros_like(tokens)  # searched (collapsed) frames
        slots = order.clone()
        remaining = token_lengths.clone()
        rows = torch.arange(batch_size, device=device).view(-1, 1, 1).expand(-1, nbest, 1)
        for t in range(len(history_parents) - 1, -1, -1):
            labels = history_labels[t].gather(1, slots)  # [B, N]
            appended = (labels >= 0) & found
            remaining = remaining - appended.long()
            position = remaining.clamp(0, capacity - 1).unsqueeze(2)
            tokens.scatter_(
                2, position, torch.where(appended, labels, tokens.gather(2, position).squeeze(2)).unsqueeze(2)
            )
            frames.scatter_(2, position, torch.where(appended, t, frames.gather(2, position).squeeze(2)).unsqueeze(2))
            slots = history_parents[t].gather(1, slots)
        filled = torch.arange(capacity, device=device) < token_lengths.unsqueeze(2)
        token_scores = torch.where(filled, log_probs[rows, frames, tokens], 0.0)
        if frame_map is not None:
            frames = frame_map.unsqueeze(1).expand(-1, nbest, -1).gather(2, frames)
        hypotheses.tokens.copy_(torch.where(filled, tokens, 0).view(batch_size * nbest, capacity))
        hypotheses.frame_indices.copy_(torch.where(filled, frames, 0).view(batch_size * nbest, capacity))
        hypotheses.token_scores.copy_(token_scores.view(batch_size * nbest, capacity))
        return hypotheses
