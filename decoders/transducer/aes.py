"""Batched AES++ beam search for RNN-T and TDT, and AES++ that moves over blank-only frames with one windowed
joint call (`AesSkipBlankSearch`), with n-gram LM shallow fusion.

The rules both follow (conventions shared with NeMo, LM fusion) are stated in `decoders/transducer/beam.py`,
which re-exports both searches; the state, fusion and execution they share are in
`decoders/transducer/beam_base.py`.

Dims: B batch, H joint hidden, V labels with blank, N durations, K beam, E candidates per hypothesis, W window.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from decoders.hypotheses import NO_LABEL, BeamTree, extend_hashes
from decoders.transducer.beam_base import NEG_INF, BeamState, Run, TransducerBeamSearch, top_k


class AesBeamSearch(TransducerBeamSearch):
    """Modified adaptive expansion search, batched (AES++): frame-synchronous, prefix search, a bounded
    number of label expansions per frame, pruning by value. RNN-T as NeMo's `maes_batch`; TDT (which NeMo
    only has per utterance) as described below.

    TDT: on frame t only the hypotheses whose next frame is t expand; the others wait with their score (and
    compete for the beam, as in NeMo's per-utterance TDT mAES). Candidates are (label, duration) pairs: a
    label with duration 0 stays on the frame and may expand again, anything else leaves it. Identical
    hypotheses (same tokens and next frame) are merged by log-sum-exp after every step instead of AES's
    duplicate removal, and there is no prefix search: hypotheses reach a frame along different paths.

    Each utterance moves through its frames on its own (`frame` [B]). Pieces: `start`; `frame` (which
    hypotheses are on the frame, the joint there, prefix search); `expand` (one round of label expansions,
    appends a column); `blank` (hypotheses still on the frame after the last round take a blank, appends a
    column); `next_frame`.
    """

    joint_from_window = False  # WIND beam search has the joint's output on the frame before `frame` runs

    def _pieces(self, state: BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        return {
            "start": lambda: self._start(state),
            "frame": lambda: self._frame(state),
            "expand": lambda: self._expand(state, eager),
            "blank": lambda: self._forced_blank(state),
            "next_frame": lambda: self._next_frame(state),
        }

    def _search(self, state: BeamState, run: Run) -> None:
        steps = self.config.expansion_steps
        run("start")
        columns = 0
        while True:
            self._skip_blank_frames(state, run)
            if not bool(state.decoding.any()):
                break
            run("frame")
            for expansion in range(steps + 1):
                if not bool(state.updating.any()):
                    break
                columns += 1
                state.tree.ensure_capacity_(columns)
                run("expand" if expansion < steps else "blank")
            run("next_frame")

    def _max_columns(self, max_time: int) -> int:
        return max_time * (self.config.expansion_steps + 1) + 1  # per frame: the rounds and a blank

    def _skip_blank_frames(self, state: BeamState, run: Run) -> None:
        """WIND beam search moves utterances over frames on which search would only add blank."""

    def _start(self, state: BeamState) -> None:
        state.reset_()
        state.frame.zero_()
        torch.less(state.frame, state.encoder_lengths, out=state.decoding)

    def _next_frame(self, state: BeamState) -> None:
        state.frame.add_(state.decoding)
        torch.less(state.frame, state.encoder_lengths, out=state.decoding)

    def _frame_hypotheses(self, state: BeamState) -> Tensor:
        """[B, K]: each utterance's current frame, for every hypothesis."""
        return state.frame.unsqueeze(1).expand(state.batch_size, state.beam_size)

    def _frame(self, state: BeamState) -> None:
        """The start of a frame for the utterances in `decoding`: the hypotheses on it (RNN-T: all of an
        utterance's; TDT: not those that jumped further), the joint's output there, prefix search."""
        tree = state.tree
        frames = self._frame_hypotheses(state)
        torch.logical_and(
            state.decoding.unsqueeze(1) & (tree.scores > NEG_INF), tree.next_frames == frames, out=state.updating
        )
        if not self.joint_from_window:
            state.logits.copy_(self._joint(state, frames, state.beam_view(state.prediction)))
        if state.beam_size > 1 and not self.is_tdt:
            _, fused = self._label_scores(state, state.logits)
            tree.scores.copy_(torch.where(state.updating, self._through_prefixes(tree, fused), tree.scores))

    def _candidates(
        self, log_probs: Tensor, fused: Tensor, duration_log_probs: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Per hypothesis its best candidates [B, K, E]: (ranking scores, fused score increments, labels,
        duration indices). Early pruning ranks by the model's scores, late by the fused ones."""
        config = self.config
        count = config.beam_size + config.expansion_beta
        ranking = log_probs if config.pruning == "early" else fused
        if duration_log_probs is None:
            ranked, labels = top_k(ranking, count)
            return ranked, fused.gather(-1, labels), labels, None
        num_durations = duration_log_probs.shape[-1]
        pairs = (ranking.unsqueeze(-1) + duration_log_probs.unsqueeze(-2)).flatten(-2)  # [B, K, V*N]
        ranked, indices = top_k(pairs, count)
        values = (fused.unsqueeze(-1) + duration_log_probs.unsqueeze(-2)).flatten(-2).gather(-1, indices)
        return ranked, values, torch.div(indices, num_durations, rounding_mode="floor"), indices % num_durations

    def _expand(self, state: BeamState, eager: bool) -> None:
        """One round of expansions of the hypotheses in `updating` (the others are carried over), then which
        of them may expand again on this frame, and the joint's output for every hypothesis there."""
        tree, model, config = state.tree, self.model, self.config
        batch_size, beam_size = state.batch_size, config.beam_size
        blank, is_tdt = model.blank_id, self.is_tdt
        frames = self._frame_hypotheses(state)
        updating = state.updating
        log_probs, fused = self._label_scores(state, state.logits)
        duration_log_probs = self._duration_log_probs(state.logits)
        ranked, steps, labels, duration_indices = self._candidates(log_probs, fused, duration_log_probs)
        candidates = labels.shape[-1]
        ranked = tree.scores.unsqueeze(-1) + ranked
        pruned = ranked <= ranked.max(dim=-1, keepdim=True).values - config.expansion_gamma
        scores = tree.scores.unsqueeze(-1) + steps
        scores = torch.where(pruned | ~updating.unsqueeze(-1), NEG_INF, scores)
        labels = torch.where(updating.unsqueeze(-1), labels, NO_LABEL)
        if beam_size > 1 and not is_tdt:
            scores = self._remove_duplicates(tree, labels, scores)
        # hypotheses done with (or waiting for) this frame are carried over in their last candidate slot
        scores[..., -1] = torch.where(updating, scores[..., -1], tree.scores)

        new_scores, flat = scores.view(batch_size, -1).topk(beam_size, dim=-1, largest=True, sorted=True)
        parents = torch.div(flat, candidates, rounding_mode="floor")
        new_labels = labels.view(batch_size, -1).gather(1, flat)
        is_blank = new_labels == blank
        is_label = (new_labels >= 0) & ~is_blank
        if is_tdt:
            durations = state.durations[duration_indices.view(batch_size, -1).gather(1, flat)]
            moves = torch.where(is_blank, durations.clamp(min=1), durations)
            self._append_(state, parents, new_labels, new_scores, frames, frames + moves, durations, eager)
            tree.recombine_(match_frames=True)
            updating.copy_(is_label & (durations == 0) & (tree.scores > NEG_INF))  # still on this frame
        else:
            self._append_(state, parents, new_labels, new_scores, frames, frames + is_blank, None, eager)
            updating.copy_(is_label)  # extended by a label: may expand again on this frame
        state.logits.copy_(self._joint(state, frames, state.beam_view(state.prediction)))

    def _forced_blank(self, state: BeamState) -> None:
        """Out of expansions: blank ends the frame of the hypotheses in `updating` (TDT: with its best
        duration). A blank leaves the prediction network and LM states as they are."""
        tree = state.tree
        frames = self._frame_hypotheses(state)
        _, fused = self._label_scores(state, state.logits)
        blank = self.model.blank_id
        labels = torch.where(state.updating, blank, NO_LABEL)
        scores = tree.scores + fused[..., blank]
        durations = None
        moves = torch.ones_like(frames)
        if self.is_tdt:
            best_durations, best_indices = self._duration_log_probs(state.logits).max(dim=-1)
            scores = scores + best_durations
            durations = state.durations[best_indices]
            moves = durations.clamp(min=1)
        scores = torch.where(state.updating, scores, tree.scores)
        tree.append_(state.beam_range.expand_as(labels), labels, scores, frames, frames + moves, durations)
        if self.is_tdt:
            tree.recombine_(match_frames=True)

    @staticmethod
    def _through_prefixes(tree: BeamTree, fused: Tensor) -> Tensor:
        """Prefix search: each hypothesis y = x + (a) also gets the probability of reaching it from hypothesis
        x in the beam by emitting a on this frame: logaddexp(score(y), score(x) + fused_x(a)), with the
        scores from before this update for every x (NeMo's batched form). fused [B, K, V] -> scores [B, K]."""
        has_prefix = tree.non_blank_lengths > 0
        is_prefix = (tree.hashes.unsqueeze(1) == tree.prefix_hashes.unsqueeze(2)) & has_prefix.unsqueeze(2)
        # [B, K(y), K(x)]: score of x plus x's fused score of y's last label
        last = tree.last_labels.clamp(min=0)
        extension = fused.gather(2, last.unsqueeze(1).expand(-1, last.shape[1], -1)).transpose(1, 2)
        extension = torch.where(is_prefix, tree.scores.unsqueeze(1) + extension, NEG_INF)
        return torch.logaddexp(tree.scores, torch.logsumexp(extension, dim=2))

    @staticmethod
    def _remove_duplicates(tree: BeamTree, labels: Tensor, scores: Tensor) -> Tensor:
        """Candidates [B, K, E]: drop label expansions that equal a hypothesis already in the beam (prefix
        search has counted them), and keep only the best of candidates that equal each other."""
        batch_size = labels.shape[0]
        is_label = (labels >= 0) & (labels != tree.blank_id)
        hashes = torch.where(is_label, extend_hashes(tree.hashes.unsqueeze(-1), labels), tree.hashes.unsqueeze(-1))
        existing = torch.where(tree.scores > NEG_INF, tree.hashes, tree.hashes.new_full((), -1))
        in_beam = (hashes.unsqueeze(-1) == existing.view(batch_size, 1, 1, -1)).any(dim=-1) & is_label
        scores = torch.where(in_beam, NEG_INF, scores).view(batch_size, -1)
        hashes = hashes.view(batch_size, -1)
        same = hashes.unsqueeze(2) == hashes.unsqueeze(1)  # [B, K*E, K*E]
        group = torch.where(same, scores.unsqueeze(1), NEG_INF)
        best, best_index = group.max(dim=2)
        keep = best_index == torch.arange(scores.shape[1], device=scores.device)
        return torch.where(keep, best, NEG_INF).view_as(labels)


class AesSkipBlankSearch(AesBeamSearch):
    """AES++ that moves each utterance over blank frames with a WIND window (RNN-T); same results as AES++.

    Our design, built before the WIND paper's beam search (Xu et al., 2025, arXiv 2505.13765, Algorithm 3) could
    be read; that search is `decoders/transducer/wind_beam.py`'s `WindBeamSearch`. This one builds on the
    paper's observation (over blank frames the prediction output does not change, so one joint call can look
    at many frames) and changes nothing in AES++'s results. (A first design in which each hypothesis jumped over
    blank frames on its own was dropped: hypotheses lagging behind in time pushed finished ones out of the
    beam.)

    On a frame where, for every hypothesis of an utterance, blank is the only candidate that survives AES's
    pruning by value, the frame's whole outcome is prefix search plus a blank for every hypothesis, and the
    prediction network is not needed. The joint on the current frame (which AES++ computes anyway) tells
    whether the frame is such a one; if it is, one joint call over the next W frames finds the rest of the
    run, which is applied with small [B, K] updates. The frame where the run ends gets a full AES++ frame,
    reusing the joint's output there. A model that is confident about blanks skips most frames; one that is
    not costs what AES++ costs.

    Pieces beyond AES++'s: `skip_first` (the current frame alone) and `skip_window` (the next W frames, run
    while any utterance is still moving).
    """

    supports_tdt = False
    joint_from_window = True

    def _pieces(self, state: BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        pieces = super()._pieces(state, eager)
        pieces["skip_first"] = lambda: self._skip(state, width=1, first=True, eager=eager)
        pieces["skip_window"] = lambda: self._skip(state, width=self.config.window_size, first=False, eager=eager)
        return pieces

    def _skip_blank_frames(self, state: BeamState, run: Run) -> None:
        run("skip_first")
        while bool(state.skipping.any()):
            run("skip_window")

    def _skip(self, state: BeamState, width: int, first: bool, eager: bool) -> None:
        """Move the utterances in `skipping` (on the first call: all with frames left) over the `width` frames
        from their current one, for as long as every hypothesis would only add blank there; an utterance that
        stops keeps the joint's output on its frame in `logits`, for the AES++ frame that follows."""
        tree, config = state.tree, self.config
        blank, beam_size = self.model.blank_id, config.beam_size
        lengths, skipping = state.encoder_lengths, state.skipping
        if first:
            torch.less(state.frame, lengths, out=skipping)
        candidates = min(beam_size + config.expansion_beta, self.num_labels)
        window_frames = state.frame.unsqueeze(1) + torch.arange(width, device=lengths.device)  # [B, W]
        inside = window_frames < lengths.unsqueeze(1)
        prediction = state.beam_view(state.prediction).unsqueeze(2)  # [B, K, 1, H]
        logits = self._joint(state, window_frames.unsqueeze(1).expand(-1, beam_size, -1), prediction)
        log_probs, fused = self._label_scores(state, logits)  # [B, K, W, V]
        ranking = log_probs if config.pruning == "early" else fused
        if first:
            state.logits.copy_(logits[:, :, 0])
        live = tree.scores > NEG_INF
        for offset in range(width):
            skipping.logical_and_(inside[:, offset])
            scores = tree.scores
            if beam_size > 1:
                scores = self._through_prefixes(tree, fused[:, :, offset])
            # blank alone survives pruning: it ranks first and the runner-up is pruned (as AES computes it)
            ranked, labels = top_k(scores.unsqueeze(-1) + ranking[:, :, offset], min(2, candidates))
            only_blank = labels[..., 0] == blank
            if candidates > 1:
                only_blank &= ranked[..., 1] <= ranked[..., 0] - config.expansion_gamma
            blank_frame = (only_blank | ~live).all(dim=1)
            stops = skipping & ~blank_frame
            state.logits.copy_(torch.where(stops.view(-1, 1, 1), logits[:, :, offset], state.logits))
            skipping.logical_and_(blank_frame)
            moving = skipping.unsqueeze(1) & live
            tree.scores.copy_(torch.where(moving, scores + fused[:, :, offset, blank], tree.scores))
            tree.next_frames.add_(moving)  # no column is written for a skipped frame
            state.frame.add_(skipping)
            if eager and not bool(skipping.any()):  # under graphs the rest of the window changes nothing
                break
        torch.less(state.frame, lengths, out=state.decoding)

