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
- `WindBeamSearch`: AES++ that moves over frames on which it would only add blanks with one windowed joint
  call, after WIND (Xu et al., 2025); results equal AES++'s. RNN-T. This is our design, not the WIND paper's
  Algorithm 3, whose text we could not read (see the class docstring).

The hypotheses live in a `BeamTree` (labels with parent pointers, rolling hashes); the result is the best
hypothesis per utterance by `score / (non_blank_length + 1)` (NeMo's choice) or by raw score.

Conventions shared with NeMo's `malsd_batch` / `maes_batch`: blank is the last label and is fed first; a
blank moves `max(duration, 1)` frames (RNN-T: 1); after `max_symbols_per_frame` labels in a row on one frame
the only candidate is blank; finished hypotheses stay in the beam with their score. Where NeMo 3.0 has a
known quirk this module does the intended thing instead: TDT uses the duration values (not their indices);
a forced blank is scored like any other blank (with LM blank weighting in every pruning mode) and, for TDT,
takes the best duration (NeMo: that of the hypothesis's first candidate); AES early pruning with weighted
blank scoring adds the label score once; whether a hypothesis may expand again on an AES frame is tracked
per hypothesis (NeMo: per beam slot); p(blank) is clamped at 1 - 1e-2 in AES too (NeMo: 1 - 1e-6).
Without an LM and without forced blanks the results equal NeMo's (tests/decoders/test_transducer_beam_nemo.py).

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

Execution. Each search is a host loop (`_search`) over named pieces (`_pieces`), functions of a `_BeamState`
whose tensors are allocated once and only ever written in place. A piece reads no tensor value on the host and
makes no tensor whose shape depends on values, so on a GPU each piece is captured once as a CUDA graph and
replayed (`_CudaGraphsRunner`, NeMo's "no_while_loops" mode); elsewhere, or with `use_cuda_graphs=False`, the
same pieces run eagerly. The loop conditions are the only host reads: one per ALSD step; per AES frame one for
the frame and one per expansion round (rounds stop early when no hypothesis is still on the frame); per WIND
window one more; reading the hypotheses back at the end costs a few more. Eager mode keeps two shortcuts that
need host reads and are off under graphs: the prediction network runs only on the rows that got a label
(graphs run it on every row and keep the old output where there was none), and WIND stops walking a window
once no utterance is still moving.

Dims: B batch, T frames, D encoder features, H joint hidden, V labels with blank, N durations, K beam,
E candidates per hypothesis, W window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from decoders.fusion import check_lm_device, lm_for_fusion
from decoders.hypotheses import NO_LABEL, BatchedHypotheses, BeamTree, extend_hashes
from decoders.protocols import LanguageModel, PredictorState, TransducerModel
from decoders.transducer_greedy import capture_cuda_graphs, check_encoder_inputs

BLANK_PROBABILITY_CLAMP = 1e-2  # p(blank) <= 1 - this in weighted blank scoring (NeMo's value for bf16)
NEG_INF = float("-inf")

Run = Callable[[str], None]  # runs one piece of a search by name: a direct call, or a CUDA graph's replay


@dataclass(frozen=True)
class BeamSearchConfig:
    beam_size: int = 4
    max_symbols_per_frame: int = 10  # ALSD: labels in a row on one frame before blank is forced
    lm_weight: float = 0.0  # alpha; used only when a language model is given
    blank_lm_scoring: Literal["none", "weighted"] = "weighted"
    pruning: Literal["early", "late"] = "late"
    length_normalization: bool = True  # choose by score / (non_blank_length + 1), as NeMo; else raw score
    return_nbest: bool = False  # also return all K hypotheses per utterance, best first, in `.nbest`
    expansion_steps: int = 2  # AES: label expansions per frame (NeMo's maes_num_steps)
    expansion_beta: int = 2  # AES: candidates per hypothesis beyond beam_size (maes_expansion_beta)
    expansion_gamma: float = 2.3  # AES: prune candidates this far below a hypothesis's best (maes_expansion_gamma)
    window_size: int = 8  # WIND: frames whose joint is evaluated at once to find blank-only frames
    use_cuda_graphs: bool = True  # replay CUDA graphs of the search's pieces when decoding on a GPU

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if self.max_symbols_per_frame < 1:
            raise ValueError(f"max_symbols_per_frame must be >= 1, got {self.max_symbols_per_frame}")
        if self.blank_lm_scoring not in ("none", "weighted"):
            raise ValueError(f"blank_lm_scoring must be 'none' or 'weighted', got {self.blank_lm_scoring!r}")
        if self.pruning not in ("early", "late"):
            raise ValueError(f"pruning must be 'early' or 'late', got {self.pruning!r}")
        if self.expansion_steps < 1:
            raise ValueError(f"expansion_steps must be >= 1, got {self.expansion_steps}")
        if self.expansion_beta < 0:
            raise ValueError(f"expansion_beta must be >= 0, got {self.expansion_beta}")
        if self.window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {self.window_size}")


class _BeamState:
    """Every tensor the search reads and writes, allocated once: the tree; per hypothesis [B*K] the prediction
    network's projected output and state and the LM state with its scores for every next label; the search's
    progress (ALSD: `active`; AES: `frame`, `decoding`, `updating`, `logits`; WIND: `skipping`); and the
    values `start` resets them from. `encoder_projected` [B, T, H] is read, never written."""

    def __init__(
        self, decoder: _TransducerBeamSearch, encoder_projected: Tensor, capacity: int, growable: bool = True
    ) -> None:
        model, config, lm = decoder.model, decoder.config, decoder.lm
        batch_size, max_time, _ = encoder_projected.shape
        beam_size = config.beam_size
        device, dtype = encoder_projected.device, encoder_projected.dtype
        long = dict(dtype=torch.long, device=device)
        boolean = dict(dtype=torch.bool, device=device)
        self.batch_size, self.beam_size, self.max_time = batch_size, beam_size, max_time
        self.encoder_projected = encoder_projected
        self.encoder_lengths = torch.zeros(batch_size, **long)
        self.last_frames = torch.zeros(batch_size, 1, **long)  # [B, 1]
        self.rows = torch.arange(batch_size, **long).unsqueeze(1)  # [B, 1]
        self.beam_range = torch.arange(beam_size, **long)  # [K]
        self.durations = torch.tensor(model.durations, **long)  # [N]
        self.tree = BeamTree(
            batch_size,
            beam_size,
            model.blank_id,
            capacity=capacity,
            device=device,
            float_dtype=dtype,
            with_durations=decoder.is_tdt,
            growable=growable,
        )
        # what `start` copies in: the prediction network after the blank (start of sequence), the LM at the
        # start of a sentence, for every hypothesis
        hypotheses = batch_size * beam_size
        labels = torch.full((hypotheses,), model.blank_id, **long)
        prediction, predictor_state = model.predict(labels, model.initial_state(hypotheses, device, dtype))
        self.initial_prediction = model.project_prediction(prediction)  # [B*K, H]
        self.initial_predictor_state = predictor_state
        self.prediction = torch.empty_like(self.initial_prediction)
        self.predictor_state: PredictorState = tuple(torch.empty_like(s) for s in predictor_state)
        self.initial_lm = None
        if lm is not None:
            states = lm.initial_states(hypotheses)
            self.initial_lm = (states, *lm.advance(states))  # states [B*K], scores and next states [B*K, V-1]
            self.lm_states, self.lm_scores, self.lm_next_states = (torch.empty_like(t) for t in self.initial_lm)
        self.active = torch.zeros(batch_size, beam_size, **boolean)
        self.frame = torch.zeros(batch_size, **long)
        self.decoding = torch.zeros(batch_size, **boolean)
        self.updating = torch.zeros(batch_size, beam_size, **boolean)
        self.skipping = torch.zeros(batch_size, **boolean)
        outputs = decoder.num_labels + len(model.durations)
        self.logits = torch.zeros(batch_size, beam_size, outputs, dtype=dtype, device=device)  # [B, K, V (+N)]

    def beam_view(self, flat: Tensor) -> Tensor:
        """[B*K, ...] -> [B, K, ...]."""
        return flat.view(self.batch_size, self.beam_size, *flat.shape[1:])

    def reset_(self) -> None:
        """Back to one empty hypothesis per utterance (the part of `start` that all searches share)."""
        torch.clamp(self.encoder_lengths.unsqueeze(1) - 1, min=0, out=self.last_frames)
        self.tree.reset_()
        self.prediction.copy_(self.initial_prediction)
        for buffer, value in zip(self.predictor_state, self.initial_predictor_state):
            buffer.copy_(value)
        if self.initial_lm is not None:
            for buffer, value in zip((self.lm_states, self.lm_scores, self.lm_next_states), self.initial_lm):
                buffer.copy_(value)


class _TransducerBeamSearch:
    """What the three searches share: checks, eager and CUDA-graph execution, LM fusion, reordering the
    prediction network and LM states."""

    supports_tdt = True

    def __init__(
        self,
        model: TransducerModel,
        config: BeamSearchConfig,
        lm: LanguageModel | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        """`device`: where inputs will be, so where the LM is moved, once (None: the LM stays where it is)."""
        if model.blank_id != model.vocab_size:
            raise ValueError(
                f"beam search needs blank last (blank_id == vocab_size), got blank_id={model.blank_id}"
                f" with vocab_size={model.vocab_size}"
            )
        self.is_tdt = len(model.durations) > 0
        if self.is_tdt and not self.supports_tdt:
            raise ValueError(f"{type(self).__name__} supports RNN-T only, got a TDT model")
        self.model = model
        self.config = config
        self.lm = lm_for_fusion(lm, config.lm_weight, model.vocab_size, device)  # None at lm_weight 0
        self.num_labels = model.vocab_size + 1
        self._graphs: _CudaGraphsRunner | None = None

    @torch.no_grad()
    def __call__(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        """encoder_output [B, T, D], encoder_lengths [B] -> the best hypothesis per utterance (all K in `.nbest`
        when the config asks for them). `scores` are the raw (fused) log-probabilities, not normalized."""
        check_encoder_inputs(encoder_output, encoder_lengths)
        if self.lm is not None:
            check_lm_device(self.lm, encoder_output.device, "encoder_output")
        encoder_lengths = encoder_lengths.to(device=encoder_output.device, dtype=torch.long)
        if self.config.use_cuda_graphs and encoder_output.is_cuda and encoder_output.shape[0] > 0:
            if self._graphs is None:
                self._graphs = _CudaGraphsRunner(self)
            return self._graphs(encoder_output, encoder_lengths)
        encoder_projected = self.model.project_encoder(encoder_output)  # [B, T, H]
        state = _BeamState(self, encoder_projected, capacity=2 * encoder_output.shape[1] + 8)
        state.encoder_lengths.copy_(encoder_lengths)
        if encoder_output.shape[0] > 0 and encoder_output.shape[1] > 0:  # else every hypothesis is empty
            pieces = self._pieces(state, eager=True)
            self._search(state, lambda name: pieces[name]())
        return state.tree.best(self.config.length_normalization, with_nbest=self.config.return_nbest)

    # --- the search: a host loop over pieces ------------------------------------------------------------
    def _pieces(self, state: _BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        """The search's pieces by name, over `state`; `eager` allows the shortcuts that read the host."""
        raise NotImplementedError

    def _search(self, state: _BeamState, run: Run) -> None:
        """The loop: runs pieces by name and reads only the loop conditions (`active`, `decoding`, ...)."""
        raise NotImplementedError

    def _max_columns(self, max_time: int) -> int:
        """A bound on the columns the search appends to its tree for utterances of `max_time` frames."""
        raise NotImplementedError

    # --- pieces' parts -----------------------------------------------------------------------------------
    def _joint(self, state: _BeamState, frames: Tensor, prediction: Tensor) -> Tensor:
        """frames [B, K, ...] (clamped inside each utterance), prediction [B, K, 1..., H] -> logits."""
        frames = torch.minimum(frames, state.last_frames.view(-1, *([1] * (frames.dim() - 1))))
        rows = state.rows.view(-1, *([1] * (frames.dim() - 1)))
        return self.model.joint_after_projection(state.encoder_projected[rows, frames], prediction)

    def _fuse(self, log_probs: Tensor, lm_scores: Tensor | None) -> Tensor:
        """log_probs [..., V] of the model, lm_scores [..., V-1] (unweighted) -> fused scores [..., V]."""
        if self.lm is None:
            return log_probs
        alpha = self.config.lm_weight
        blank = log_probs[..., -1:]
        labels = log_probs[..., :-1] + alpha * lm_scores.to(log_probs.dtype)
        if self.config.blank_lm_scoring == "weighted":
            p_blank = blank.exp().clamp(max=1.0 - BLANK_PROBABILITY_CLAMP)
            labels = labels + alpha * torch.log1p(-p_blank)
            blank = blank * (1.0 + alpha)
        return torch.cat([labels, blank], dim=-1)

    def _label_scores(self, state: _BeamState, logits: Tensor) -> tuple[Tensor, Tensor]:
        """logits [B, K, ..., V (+N)] -> (model log-probabilities, fused scores), both [B, K, ..., V]."""
        log_probs = torch.log_softmax(logits[..., : self.num_labels], dim=-1)
        lm_scores = None
        if self.lm is not None:
            lm_scores = state.beam_view(state.lm_scores)
            lm_scores = lm_scores.view(*lm_scores.shape[:2], *([1] * (log_probs.dim() - 3)), lm_scores.shape[-1])
        return log_probs, self._fuse(log_probs, lm_scores)

    def _duration_log_probs(self, logits: Tensor) -> Tensor | None:
        """logits [..., V + N] -> TDT duration log-probabilities [..., N] (None for RNN-T)."""
        return torch.log_softmax(logits[..., self.num_labels :], dim=-1) if self.is_tdt else None

    def _advance_(self, state: _BeamState, parents: Tensor, labels: Tensor, eager: bool) -> None:
        """After `tree.append_(parents, labels, ...)`: each new hypothesis takes its parent's prediction and LM
        state, advanced by its label where it has one (blank and carried hypotheses keep them)."""
        model = self.model
        flat_parents = (state.rows * state.beam_size + parents).view(-1)
        is_label = ((labels >= 0) & (labels != model.blank_id)).view(-1)
        prediction = state.prediction.index_select(0, flat_parents)
        predictor_state: PredictorState = model.select_states(state.predictor_state, flat_parents)
        if eager:
            # run the prediction network only on the rows that got a label (often a third of them, or none);
            # this reads the row count on the host, which eager decoding does every step anyway
            label_rows = is_label.nonzero().squeeze(1)
            if label_rows.numel() > 0:
                output, next_state = model.predict(
                    labels.view(-1).index_select(0, label_rows), model.select_states(predictor_state, label_rows)
                )
                positions = (torch.cumsum(is_label, dim=0) - 1).clamp(min=0)  # row -> its place among label rows
                output = model.project_prediction(output).index_select(0, positions)
                prediction = torch.where(is_label.unsqueeze(1), output, prediction)
                model.replace_states_(predictor_state, model.select_states(next_state, positions), is_label)
        else:  # every row, fixed shapes; rows without a label feed blank and keep what they had
            inputs = torch.where(is_label, labels.view(-1), model.blank_id)
            output, next_state = model.predict(inputs, predictor_state)
            prediction = torch.where(is_label.unsqueeze(1), model.project_prediction(output), prediction)
            model.replace_states_(predictor_state, next_state, is_label)
        state.prediction.copy_(prediction)
        for buffer, value in zip(state.predictor_state, predictor_state):
            buffer.copy_(value)
        if self.lm is not None:
            lm_states = state.lm_states.index_select(0, flat_parents)
            next_states = state.lm_next_states.index_select(0, flat_parents)
            safe_labels = torch.where(is_label, labels.view(-1), 0).unsqueeze(1)
            state.lm_states.copy_(torch.where(is_label, next_states.gather(1, safe_labels).squeeze(1), lm_states))
            lm_scores, lm_next_states = self.lm.advance(state.lm_states)
            state.lm_scores.copy_(lm_scores)
            state.lm_next_states.copy_(lm_next_states)

    def _append_(
        self,
        state: _BeamState,
        parents: Tensor,
        labels: Tensor,
        scores: Tensor,
        frames: Tensor,
        next_frames: Tensor,
        durations: Tensor | None,
        eager: bool,
    ) -> None:
        """Append a column and advance the states. As in NeMo, a TDT hypothesis that jumps past the end keeps
        that frame, so finished copies of one transcript that end on different frames are not merged."""
        state.tree.append_(parents, labels, scores, frames, next_frames, durations)
        self._advance_(state, parents, labels, eager)


def _top(values: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top min(k, size) along the last dimension, sorted."""
    return values.topk(min(k, values.shape[-1]), dim=-1, largest=True, sorted=True)


class AlsdBeamSearch(_TransducerBeamSearch):
    """Alignment-length synchronous beam search over a tree of hypotheses (ALSD++), RNN-T and TDT."""

    def _pieces(self, state: _BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        return {"start": lambda: self._start(state), "step": lambda: self._step(state, eager)}

    def _search(self, state: _BeamState, run: Run) -> None:
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

    def _start(self, state: _BeamState) -> None:
        state.reset_()
        self._update_active(state)

    def _update_active(self, state: _BeamState) -> None:
        """[B, K]: hypotheses that exist and have frames left."""
        tree = state.tree
        torch.logical_and(
            tree.next_frames < state.encoder_lengths.unsqueeze(1), tree.scores > NEG_INF, out=state.active
        )

    def _candidates(
        self, state: _BeamState, log_probs: Tensor, fused: Tensor, duration_log_probs: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Per hypothesis its top candidates: (score increments, labels, duration indices), [B, K, E]."""
        beam_size = self.config.beam_size
        early = self.config.pruning == "early"
        if duration_log_probs is None:
            if early:
                _, labels = _top(log_probs, beam_size)
                return fused.gather(-1, labels), labels, None
            steps, labels = _top(fused, beam_size)
            return steps, labels, None
        if early:  # the model's top labels first, then their (label, duration) pairs
            _, labels = _top(log_probs, beam_size)
            label_scores = fused.gather(-1, labels)
        else:
            labels = None
            label_scores = fused
        num_durations = duration_log_probs.shape[-1]
        pairs = label_scores.unsqueeze(-1) + duration_log_probs.unsqueeze(-2)  # [B, K, V or E, N]
        steps, pair_indices = _top(pairs.flatten(-2), beam_size)
        label_indices = torch.div(pair_indices, num_durations, rounding_mode="floor")
        labels = labels.gather(-1, label_indices) if labels is not None else label_indices
        return steps, labels, pair_indices % num_durations

    def _forced_blank_scores(self, log_probs: Tensor, fused: Tensor) -> Tensor:
        """[B, K]: the score of a blank forced by max_symbols, that of any blank (with LM blank weighting)."""
        return fused[..., self.model.blank_id]

    def _step(self, state: _BeamState, eager: bool) -> None:
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


class AesBeamSearch(_TransducerBeamSearch):
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

    def _pieces(self, state: _BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        return {
            "start": lambda: self._start(state),
            "frame": lambda: self._frame(state),
            "expand": lambda: self._expand(state, eager),
            "blank": lambda: self._forced_blank(state),
            "next_frame": lambda: self._next_frame(state),
        }

    def _search(self, state: _BeamState, run: Run) -> None:
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

    def _skip_blank_frames(self, state: _BeamState, run: Run) -> None:
        """WIND beam search moves utterances over frames on which search would only add blank."""

    def _start(self, state: _BeamState) -> None:
        state.reset_()
        state.frame.zero_()
        torch.less(state.frame, state.encoder_lengths, out=state.decoding)

    def _next_frame(self, state: _BeamState) -> None:
        state.frame.add_(state.decoding)
        torch.less(state.frame, state.encoder_lengths, out=state.decoding)

    def _frame_hypotheses(self, state: _BeamState) -> Tensor:
        """[B, K]: each utterance's current frame, for every hypothesis."""
        return state.frame.unsqueeze(1).expand(state.batch_size, state.beam_size)

    def _frame(self, state: _BeamState) -> None:
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
            ranked, labels = _top(ranking, count)
            return ranked, fused.gather(-1, labels), labels, None
        num_durations = duration_log_probs.shape[-1]
        pairs = (ranking.unsqueeze(-1) + duration_log_probs.unsqueeze(-2)).flatten(-2)  # [B, K, V*N]
        ranked, indices = _top(pairs, count)
        values = (fused.unsqueeze(-1) + duration_log_probs.unsqueeze(-2)).flatten(-2).gather(-1, indices)
        return ranked, values, torch.div(indices, num_durations, rounding_mode="floor"), indices % num_durations

    def _expand(self, state: _BeamState, eager: bool) -> None:
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

    def _forced_blank(self, state: _BeamState) -> None:
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


class WindBeamSearch(AesBeamSearch):
    """AES++ that moves each utterance over blank frames with a WIND window (RNN-T); same results as AES++.

    Our design, not the WIND paper's beam search. Xu et al., 2025 ("WIND: Accelerated RNN-T Decoding with
    Windowed Inference for Non-blank Detection", arXiv 2505.13765) propose a beam search as their Algorithm 3,
    but we could not read its text: the stored copies of the paper we could reach hold only its abstract and
    the start of its introduction, the reviews of it we found describe only the greedy Algorithm 2, and no
    public implementation was found (NeMo's WIND pull request, NVIDIA-NeMo/Speech #14451, is greedy only).
    So this class builds on the paper's observation (over blank frames the prediction output does not change,
    so one joint call can look at many frames) and the name says "beam search with WIND", not "Algorithm 3".
    (A first design in which each hypothesis jumped over blank frames on its own was dropped: hypotheses
    lagging behind in time pushed finished ones out of the beam.)

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

    def _pieces(self, state: _BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        pieces = super()._pieces(state, eager)
        pieces["skip_first"] = lambda: self._skip(state, width=1, first=True, eager=eager)
        pieces["skip_window"] = lambda: self._skip(state, width=self.config.window_size, first=False, eager=eager)
        return pieces

    def _skip_blank_frames(self, state: _BeamState, run: Run) -> None:
        run("skip_first")
        while bool(state.skipping.any()):
            run("skip_window")

    def _skip(self, state: _BeamState, width: int, first: bool, eager: bool) -> None:
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
            ranked, labels = _top(scores.unsqueeze(-1) + ranking[:, :, offset], min(2, candidates))
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


class _CudaGraphsRunner:
    """Replays CUDA graphs of a search's pieces; the search's host loop (`_search`) decides which and when.

    The pieces are captured once over a `_BeamState` sized for the largest batch and longest input seen
    (frames rounded up to 64, so nearby lengths reuse the graphs), with the tree preallocated at the search's
    bound on columns (`_max_columns`), since nothing may grow or move inside a graph. A smaller batch runs in
    the first rows; the other rows get length 0 and stay empty. With `capture=False` the pieces are called
    directly: this exact path then runs on a CPU, which is how the tests check it without a GPU.
    """

    def __init__(self, decoder: _TransducerBeamSearch, capture: bool = True) -> None:
        self.decoder = decoder
        self.capture = capture
        self.state: _BeamState | None = None
        self.lm: LanguageModel | None = None
        self.replays: dict[str, Callable[[], None]] = {}
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}

    def _compile(self, pieces: dict[str, Callable[[], None]]) -> dict[str, Callable[[], None]]:
        """name -> what runs the piece: the replay of its captured graph (or, without capture, the piece)."""
        if not self.capture:
            return dict(pieces)
        self.graphs = capture_cuda_graphs(pieces, self.state.encoder_projected.device)
        return {name: graph.replay for name, graph in self.graphs.items()}

    @torch.no_grad()
    def __call__(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        decoder = self.decoder
        batch_size, max_time, _ = encoder_output.shape
        encoder_projected = decoder.model.project_encoder(encoder_output)
        state = self.state
        if (
            state is None
            or state.batch_size < batch_size
            or state.max_time < max_time
            or state.encoder_projected.device != encoder_projected.device
            or state.encoder_projected.dtype != encoder_projected.dtype
            or self.lm is not decoder.lm
        ):  # the graphs read the tensors of the LM they were captured with
            padded_time = max(64, -(-max_time // 64) * 64)
            buffer = encoder_projected.new_zeros(batch_size, padded_time, encoder_projected.shape[-1])
            self.state = state = _BeamState(decoder, buffer, capacity=decoder._max_columns(padded_time), growable=False)
            self.lm = decoder.lm
            self.replays = self._compile(decoder._pieces(state, eager=False))
        state.encoder_projected[:batch_size, :max_time].copy_(encoder_projected)
        state.encoder_lengths.zero_()  # rows past the batch stay empty
        state.encoder_lengths[:batch_size].copy_(encoder_lengths)
        decoder._search(state, lambda name: self.replays[name]())
        return state.tree.best(
            decoder.config.length_normalization, with_nbest=decoder.config.return_nbest, batch_size=batch_size
        )
