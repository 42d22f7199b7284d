"""Batched beam search for RNN-T and TDT: ALSD++, AES++ and WIND beam, with n-gram LM shallow fusion.

- `AlsdBeamSearch`: alignment-length synchronous decoding (Saon et al., 2020) in the batched form of ALSD++
  (Grigoryan et al., 2025, "Pushing the Limits of Beam Search Decoding for Transducer-based ASR Models"):
  every step extends each of the K hypotheses of all B utterances by one label or blank at once, keeps the
  K best of the K x K candidates per utterance, and merges identical hypotheses. RNN-T and TDT, any duration
  set: TDT candidates are (label, duration) pairs scored by the sum of both log-probabilities.
- `AesBeamSearch`: modified adaptive expansion search (Kim et al., 2021) in the batched form of AES++
  (same paper): frame-synchronous, with prefix search at each frame, at most `expansion_steps` label
  expansions per frame, `expansion_beta` extra candidates per hypothesis and pruning by value
  (`expansion_gamma`). RNN-T and TDT (see the class docstring for TDT).
- `WindBeamSearch`: the WIND paper's beam search (Xu et al., 2025): hypotheses filed by the frame they stand at,
  the joint over a window of frames, merge and prune, jumps over frames. RNN-T. In `decoders/transducer/wind_beam.py`.
- `AesSkipBlankSearch`: AES++ that moves over frames on which it would only add blanks with one windowed joint
  call; results equal AES++'s. RNN-T. Our design from before the paper's search could be read (strategy `aes_skip`).

`AlsdBeamSearch` is defined here, `AesBeamSearch` and `AesSkipBlankSearch` in `decoders/transducer/aes.py`, and
what the searches share (`BeamSearchConfig`, the state, fusion, eager and CUDA-graph execution) in
`decoders/transducer/beam_base.py`; this module re-exports them, so callers import the searches and their
config from here.

Conventions shared with NeMo's `malsd_batch` / `maes_batch`: blank is the last label and is fed first; a
blank moves `max(duration, 1)` frames (RNN-T: 1); after `max_symbols_per_frame` labels in a row on one frame
the only candidate is blank; finished hypotheses stay in the beam with their score. Where NeMo 3.0 has a
known quirk these searches do the intended thing instead: TDT uses the duration values (not their indices);
a forced blank is scored like any other blank (with LM blank weighting in every pruning mode) and, for TDT,
takes the best duration (NeMo: that of the hypothesis's first candidate); AES early pruning with weighted
blank scoring adds the label score once; whether a hypothesis may expand again on an AES frame is tracked
per hypothesis (NeMo: per beam slot); p(blank) is clamped at 1 - 1e-2 in AES too (NeMo: 1 - 1e-6).
Without an LM and without forced blanks the results equal NeMo's (tests/decoders/transducer/test_beam_nemo.py).

LM fusion (`lm_weight` = alpha, an LM over the non-blank labels, natural-log scores):
- `blank_lm_scoring="none"` (ALSD++ eq. 2): blank keeps its log-probability; label y gets
  `log p(y) + alpha * lm(y)`.
- `blank_lm_scoring="weighted"` (eq. 3, NeMo's `lm_weighted_full`): blank gets `(1 + alpha) * log p(blank)`;
  label y gets `log p(y) + alpha * log(1 - p(blank)) + alpha * lm(y)`, with p(blank) clamped at 1 - 1e-2.
- `pruning="early"`: candidates are the top-k by the model's log-probabilities, then scored with the LM;
  `pruning="late"`: the fused scores of the whole vocabulary are ranked.
There is no end-of-sentence LM score (as in NeMo's transducer beam search). With `lm_weight` 0 the LM is
dropped when the search is built (each formula above is then the model's log-probability), and a fused LM is
moved to the search's `device` once, when it is built.

Dims: B batch, V labels with blank, N durations, K beam, E candidates per hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from decoders.hypotheses import NO_LABEL
from decoders.transducer.aes import AesBeamSearch, AesSkipBlankSearch
from decoders.transducer.beam_base import NEG_INF, BeamSearchConfig, BeamState, Run, TransducerBeamSearch, top_k
from decoders.transducer.wind_beam import WindBeamSearch

__all__ = ["AesBeamSearch", "AesSkipBlankSearch", "AlsdBeamSearch", "BeamSearchConfig", "WindBeamSearch"]


class AlsdBeamSearch(TransducerBeamSearch):
    """Alignment-length synchronous beam search over a tree of hypotheses (ALSD++), RNN-T and TDT."""

    def _pieces(self, state: BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        return {"start": lambda: self._start(state), "step": lambda: self._step(state, eager)}

    def _search(self, state: BeamState, run: Run) -> None:
        run("start")
        columns = 0
        while bool(state.active.any()):
            columns += 1
            state.tree.ensure_capacity_(columns)
            run("step")

    def _max_columns(self, max_time: int) -> int:
        # a hypothesis still active after s steps was extended at each of them; per frame it takes at most
        # max_symbols labels that stay there and one symbol that moves on
        return max_time * (self.config.max_symbols_per_frame + 1) + 1

    def _start(self, state: BeamState) -> None:
        state.reset_()
        self._update_active(state)

    def _update_active(self, state: BeamState) -> None:
        """[B, K]: hypotheses that exist and have frames left."""
        tree = state.tree
        torch.logical_and(
            tree.next_frames < state.encoder_lengths.unsqueeze(1), tree.scores > NEG_INF, out=state.active
        )

    def _candidates(
        self, state: BeamState, log_probs: Tensor, fused: Tensor, duration_log_probs: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Per hypothesis its top candidates: (score increments, labels, duration indices), [B, K, E]."""
        beam_size = self.config.beam_size
        early = self.config.pruning == "early"
        if duration_log_probs is None:
            if early:
                _, labels = top_k(log_probs, beam_size)
                return fused.gather(-1, labels), labels, None
            steps, labels = top_k(fused, beam_size)
            return steps, labels, None
        if early:  # the model's top labels first, then their (label, duration) pairs
            _, labels = top_k(log_probs, beam_size)
            label_scores = fused.gather(-1, labels)
        else:
            labels = None
            label_scores = fused
        num_durations = duration_log_probs.shape[-1]
        pairs = label_scores.unsqueeze(-1) + duration_log_probs.unsqueeze(-2)  # [B, K, V or E, N]
        steps, pair_indices = top_k(pairs.flatten(-2), beam_size)
        label_indices = torch.div(pair_indices, num_durations, rounding_mode="floor")
        labels = labels.gather(-1, label_indices) if labels is not None else label_indices
        return steps, labels, pair_indices % num_durations

    def _forced_blank_scores(self, log_probs: Tensor, fused: Tensor) -> Tensor:
        """[B, K]: the score of a blank forced by max_symbols, that of any blank (with LM blank weighting)."""
        return fused[..., self.model.blank_id]

    def _step(self, state: BeamState, eager: bool) -> None:
        tree, model, beam_size = state.tree, self.model, self.config.beam_size
        batch_size = state.batch_size
        active = state.active
        logits = self._joint(state, tree.next_frames, state.beam_view(state.prediction))  # [B, K, V (+N)]
        log_probs, fused = self._label_scores(state, logits)
        duration_log_probs = self._duration_log_probs(logits)
        steps, labels, duration_indices = self._candidates(state, log_probs, fused, duration_log_probs)
        candidates = steps.shape[-1]
        scores = tree.scores.unsqueeze(-1) + steps  # [B, K, E]

        # forced blank after max_symbols labels on this frame; finished hypotheses are carried over as they are
        forced = active & (tree.frame_counts >= self.config.max_symbols_per_frame)
        forced_score = tree.scores + self._forced_blank_scores(log_probs, fused)
        if self.is_tdt:
            best_durations, forced_duration_index = duration_log_probs.max(dim=-1)
            forced_score = forced_score + best_durations
        first = torch.where(forced, forced_score, torch.where(active, scores[..., 0], tree.scores))
        scores = torch.where((active & ~forced).unsqueeze(-1), scores, NEG_INF)
        scores[..., 0] = first
        first_label = torch.where(forced, model.blank_id, torch.where(active, labels[..., 0], NO_LABEL))
        labels = labels.clone()
        labels[..., 0] = first_label
        if self.is_tdt:
            duration_indices = duration_indices.clone()
            duration_indices[..., 0] = torch.where(forced, forced_duration_index, duration_indices[..., 0])

        # the K best of the K x E candidates of each utterance
        new_scores, flat = scores.view(batch_size, -1).topk(beam_size, dim=-1, largest=True, sorted=True)
        parents = torch.div(flat, candidates, rounding_mode="floor")
        new_labels = labels.view(batch_size, -1).gather(1, flat)
        frames = tree.gather(tree.next_frames, parents)
        is_blank = new_labels == model.blank_id
        durations = None
        if self.is_tdt:
            durations = state.durations[duration_indices.view(batch_size, -1).gather(1, flat)]
            moves = torch.where(is_blank, durations.clamp(min=1), durations)
        else:
            moves = is_blank.long()
        self._append_(state, parents, new_labels, new_scores, frames, frames + moves, durations, eager)
        tree.recombine_(match_frames=self.is_tdt)
        self._update_active(state)
