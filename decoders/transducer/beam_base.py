"""What the batched beam searches for RNN-T and TDT share: `BeamSearchConfig`, the state they run over, the
joint, LM shallow fusion, advancing the prediction network and LM states, and running a search eagerly or as
CUDA graphs. The searches themselves: ALSD++ in `decoders/transducer/beam.py`, AES++ and AES++ with blank-frame
skipping in `decoders/transducer/aes.py`, WIND beam search in `decoders/transducer/wind_beam.py`; the rules they
follow (conventions shared with NeMo, LM fusion) are stated once, in `decoders/transducer/beam.py`.

The hypotheses live in a `BeamTree` (labels with parent pointers, rolling hashes); the result is the best
hypothesis per utterance by `score / (non_blank_length + 1)` (NeMo's choice) or by raw score.

Execution. Each search is a host loop (`_search`) over named pieces (`_pieces`), functions of a `BeamState`
whose tensors are allocated once and only ever written in place. A piece reads no tensor value on the host and
makes no tensor whose shape depends on values, so on a GPU each piece is captured once as a CUDA graph and
replayed (`CudaGraphsRunner`, NeMo's "no_while_loops" mode); elsewhere, or with `use_cuda_graphs=False`, the
same pieces run eagerly; where a capture or a replay fails, the search decodes that call again eagerly and keeps
to eager mode, warned once (`CudaGraphFallback`, decoders/transducer/shared.py). The loop conditions are the only
host reads: one per ALSD or WIND beam step; per AES frame one for the frame and one per expansion round (rounds stop
early when no hypothesis is still on the frame); per window of AES++ with skipping one more; reading the
hypotheses back at the end costs a few more. Eager mode
keeps shortcuts that need host reads and are off under graphs: the prediction network and the LM run only on the
rows that got a label (graphs run them on every row and keep the old output where there was none), and AES++
with skipping stops walking a window once no utterance is still moving.

Dims: B batch, T frames, D encoder features, H joint hidden, V labels with blank, N durations, K beam.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from decoders.fusion import lm_for_fusion
from decoders.hypotheses import BatchedHypotheses, BeamTree
from decoders.protocols import LanguageModel, PredictorState, TransducerModel
from decoders.transducer.shared import CudaGraphFallback, capture_cuda_graphs, checked_inputs, replays_cuda_graphs

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
    window_size: int = 8  # WIND: frames whose joint is evaluated at once
    frame_list_size: int | None = None  # WIND beam: hypotheses kept per frame until their turn (None: beam_size)
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
        if self.frame_list_size is not None and self.frame_list_size < self.beam_size:
            raise ValueError(f"frame_list_size must be >= beam_size ({self.beam_size}), got {self.frame_list_size}")


class BeamState:
    """Every tensor the search reads and writes, allocated once: the tree; per hypothesis [B*K] the prediction
    network's projected output and state and the LM state with its scores for every next label; the search's
    progress (ALSD: `active`; AES: `frame`, `decoding`, `updating`, `logits`; WIND: `skipping`); and the
    values `start` resets them from. `encoder_projected` [B, T, H] is read, never written."""

    def __init__(
        self, decoder: TransducerBeamSearch, encoder_projected: Tensor, capacity: int, growable: bool = True
    ) -> None:
        model, lm = decoder.model, decoder.lm
        batch_size, max_time, _ = encoder_projected.shape
        beam_size = decoder._hypothesis_slots()  # K hypotheses (WIND beam: a pool of frame lists)
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


class TransducerBeamSearch:
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
        self._graphs: CudaGraphsRunner | None = None
        self.graph_fallback = CudaGraphFallback(type(self).__name__)  # graphs failing -> eager, warned once

    @torch.no_grad()
    def __call__(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        """encoder_output [B, T, D], encoder_lengths [B] -> the best hypothesis per utterance (all K in `.nbest`
        when the config asks for them). `scores` are the raw (fused) log-probabilities, not normalized."""
        encoder_lengths = checked_inputs(encoder_output, encoder_lengths, self.lm)
        if replays_cuda_graphs(self.config.use_cuda_graphs, encoder_output) and self.graph_fallback.graphs_on:
            return self.graph_fallback.run(lambda: self._replay_graphs(encoder_output, encoder_lengths),
                                           lambda: self._decode_eager(encoder_output, encoder_lengths))
        return self._decode_eager(encoder_output, encoder_lengths)

    def _replay_graphs(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        if self._graphs is None:
            self._graphs = CudaGraphsRunner(self)
        return self._graphs(encoder_output, encoder_lengths)

    def _decode_eager(self, encoder_output: Tensor, encoder_lengths: Tensor) -> BatchedHypotheses:
        self._graphs = None  # after a graph failure: its preallocated state is of no further use
        encoder_projected = self.model.project_encoder(encoder_output)  # [B, T, H]
        state = BeamState(self, encoder_projected, capacity=2 * encoder_output.shape[1] + 8)
        state.encoder_lengths.copy_(encoder_lengths)
        if encoder_output.shape[0] > 0 and encoder_output.shape[1] > 0:  # else every hypothesis is empty
            pieces = self._pieces(state, eager=True)
            self._search(state, lambda name: pieces[name]())
        return self._best(state)

    def _hypothesis_slots(self) -> int:
        """Hypotheses kept per utterance: the beam (a search that keeps more, such as WIND's frame lists, says)."""
        return self.config.beam_size

    def _best(self, state: BeamState, batch_size: int | None = None) -> BatchedHypotheses:
        """The best hypothesis of each of the first `batch_size` utterances (all K in `.nbest` on request)."""
        return state.tree.best(self.config.length_normalization, with_nbest=self.config.return_nbest,
                               batch_size=batch_size)

    # --- the search: a host loop over pieces ------------------------------------------------------------
    def _pieces(self, state: BeamState, eager: bool) -> dict[str, Callable[[], None]]:
        """The search's pieces by name, over `state`; `eager` allows the shortcuts that read the host."""
        raise NotImplementedError

    def _search(self, state: BeamState, run: Run) -> None:
        """The loop: runs pieces by name and reads only the loop conditions (`active`, `decoding`, ...)."""
        raise NotImplementedError

    def _max_columns(self, max_time: int) -> int:
        """A bound on the columns the search appends to its tree for utterances of `max_time` frames."""
        raise NotImplementedError

    # --- pieces' parts -----------------------------------------------------------------------------------
    def _joint(self, state: BeamState, frames: Tensor, prediction: Tensor) -> Tensor:
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

    def _label_scores(self, state: BeamState, logits: Tensor, slots: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """logits [B, K, ..., V (+N)] of every hypothesis, or of those in `slots` [B, K'] -> (model
        log-probabilities, fused scores), both [B, K or K', ..., V]."""
        log_probs = torch.log_softmax(logits[..., : self.num_labels], dim=-1)
        lm_scores = None
        if self.lm is not None:
            lm_scores = state.beam_view(state.lm_scores)
            if slots is not None:
                lm_scores = state.tree.gather(lm_scores, slots)
            lm_scores = lm_scores.view(*lm_scores.shape[:2], *([1] * (log_probs.dim() - 3)), lm_scores.shape[-1])
        return log_probs, self._fuse(log_probs, lm_scores)

    def _duration_log_probs(self, logits: Tensor) -> Tensor | None:
        """logits [..., V + N] -> TDT duration log-probabilities [..., N] (None for RNN-T)."""
        return torch.log_softmax(logits[..., self.num_labels :], dim=-1) if self.is_tdt else None

    def _advance_(self, state: BeamState, parents: Tensor, labels: Tensor, eager: bool) -> None:
        """After `tree.append_(parents, labels, ...)`: each new hypothesis takes its parent's prediction and LM
        state, advanced by its label where it has one (blank and carried hypotheses keep them)."""
        model = self.model
        flat_parents = (state.rows * state.beam_size + parents).view(-1)
        is_label = ((labels >= 0) & (labels != model.blank_id)).view(-1)
        prediction = state.prediction.index_select(0, flat_parents)
        predictor_state: PredictorState = model.select_states(state.predictor_state, flat_parents)
        label_rows = is_label.nonzero().squeeze(1) if eager else None
        if eager:
            # run the prediction network only on the rows that got a label (often a third of them, or none);
            # this reads the row count on the host, which eager decoding does every step anyway
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
            if eager:  # the LM too only where a label was added; the others keep their parent's answers
                lm_scores = state.lm_scores.index_select(0, flat_parents)
                if label_rows.numel() > 0:
                    label_scores, label_next_states = self.lm.advance(state.lm_states.index_select(0, label_rows))
                    lm_scores.index_copy_(0, label_rows, label_scores)
                    next_states.index_copy_(0, label_rows, label_next_states)
                state.lm_scores.copy_(lm_scores)
                state.lm_next_states.copy_(next_states)
            else:
                lm_scores, lm_next_states = self.lm.advance(state.lm_states)
                state.lm_scores.copy_(lm_scores)
                state.lm_next_states.copy_(lm_next_states)

    def _append_(
        self,
        state: BeamState,
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


def top_k(values: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top min(k, size) along the last dimension, sorted."""
    return values.topk(min(k, values.shape[-1]), dim=-1, largest=True, sorted=True)


class CudaGraphsRunner:
    """Replays CUDA graphs of a search's pieces; the search's host loop (`_search`) decides which and when.

    The pieces are captured once over a `BeamState` sized for the largest batch and longest input seen
    (frames rounded up to 64, so nearby lengths reuse the graphs), with the tree preallocated at the search's
    bound on columns (`_max_columns`), since nothing may grow or move inside a graph. A smaller batch runs in
    the first rows; the other rows get length 0 and stay empty. With `capture=False` the pieces are called
    directly: this exact path then runs on a CPU, which is how the tests check it without a GPU.
    """

    def __init__(self, decoder: TransducerBeamSearch, capture: bool = True) -> None:
        self.decoder = decoder
        self.capture = capture
        self.state: BeamState | None = None
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
            self.state = state = BeamState(decoder, buffer, capacity=decoder._max_columns(padded_time), growable=False)
            self.lm = decoder.lm
            self.replays = self._compile(decoder._pieces(state, eager=False))
        state.encoder_projected[:batch_size, :max_time].copy_(encoder_projected)
        state.encoder_lengths.zero_()  # rows past the batch stay empty
        state.encoder_lengths[:batch_size].copy_(encoder_lengths)
        decoder._search(state, lambda name: self.replays[name]())
        return decoder._best(state, batch_size)
