"""Label-looping greedy search (and WIND) on the CPU, with the loop's bookkeeping on the host.

`LabelLoopingGreedy` runs this on CPU inputs (`GreedyConfig.host_loop`): the same search as its tensor loop in
`decoders/transducer/greedy.py`, which states the algorithm and NeMo's rules (LM fusion and confidence
included), so the same tokens, frames and durations, and the same scores and confidence up to rounding.
The tensor loop is written for CUDA graphs: no step may wait on the host and no tensor may change shape, so
every step runs the joint for every row and merges its results with masks, about 40 small operations a step.
On a CPU reading a step's labels costs nothing, and a small operation costs as much as the arithmetic of a
whole step at batch 1, so here:
- times, labels, frames and per-frame label counts are Python integers, and results are Python lists turned
  into a `BatchedHypotheses` once, at the end;
- each search step runs the joint only for the rows still searching, on the frames they stand at;
- a label's log-probability is computed only on the steps that found one, for those rows; confidence, where
  asked for, is measured once per few hundred steps, on the logits they kept;
- the prediction network runs only for the rows that found a label and still have frames; a row that ends
  leaves the batch (its prediction and state rows are dropped), so no later step carries it.

Dims: B batch, T frames, D encoder features, H joint hidden, V labels with blank, N durations, W window,
n rows still decoding, m rows still searching, k rows that found a label on a step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from decoders.confidence import ConfidenceConfig, aggregation_identity, step_confidence
from decoders.hypotheses import BatchedHypotheses
from decoders.protocols import LanguageModel, PredictorState, TransducerModel

MEASURE_ROWS = 512  # confidence: step logits kept before they are measured together


@dataclass
class _Rows:
    """The rows still decoding, in the order of the batched prediction, state and LM tensors."""

    rows: list[int]  # batch index of each
    prediction: Tensor  # [n, H] projected prediction-network output
    state: PredictorState
    lm_states: Tensor | None = None  # [n]
    lm_weighted_scores: Tensor | None = None  # [n, V - 1] lm_weight * the LM's scores from each state
    lm_next_states: Tensor | None = None  # [n, V - 1]


@dataclass
class _Found:
    """What the search found for each of the n rows (None: the row ran out of frames)."""

    labels: list[int | None]
    frames: list[int]
    durations: list[int]


def label_looping_cpu(model: TransducerModel, encoder_output: Tensor, encoder_lengths: Tensor, max_symbols: int,
                      window: int, lm: LanguageModel | None = None, lm_weight: float = 0.0,
                      confidence: ConfidenceConfig | None = None) -> BatchedHypotheses:
    """encoder_output [B, T, D] on the CPU, encoder_lengths [B] (checked by the caller) -> the greedy
    hypothesis of each utterance; `lm` (None, or on the CPU) fused with `lm_weight`, and per-token
    `confidence`, as the tensor loop does them."""
    return _HostLoop(model, max_symbols, window, lm, lm_weight, confidence, encoder_output, encoder_lengths).decode()


class _HostLoop:
    """One call: the batch's projected frames, and every row's position and results as Python values."""

    def __init__(self, model: TransducerModel, max_symbols: int, window: int, lm: LanguageModel | None,
                 lm_weight: float, confidence: ConfidenceConfig | None, encoder_output: Tensor,
                 encoder_lengths: Tensor) -> None:
        self.model = model
        self.max_symbols = max_symbols
        self.window = window
        self.lm = lm
        self.lm_weight = lm_weight
        self.blank_id = model.blank_id
        self.num_labels = model.vocab_size + 1
        self.durations = model.durations  # () for RNN-T
        batch_size, max_time, _ = encoder_output.shape
        encoder_projected = model.project_encoder(encoder_output)  # [B, T, H]
        self.dtype = encoder_projected.dtype
        self.device = encoder_output.device
        # [B*T, H]: frame t of row b is row b*T + t
        self.encoder_rows = encoder_projected.reshape(batch_size * max_time, encoder_projected.shape[-1])
        self.max_time = max_time
        self.lengths = encoder_lengths.tolist()
        self.time = [0] * batch_size
        self.last_frame = [-1] * batch_size  # frame of the last label, and labels in a row on it (max_symbols)
        self.frame_count = [0] * batch_size
        self.tokens: list[list[int]] = [[] for _ in range(batch_size)]
        self.frame_indices: list[list[int]] = [[] for _ in range(batch_size)]
        self.token_durations: list[list[int]] = [[] for _ in range(batch_size)]
        self.token_scores: list[list[float]] = [[] for _ in range(batch_size)]
        self.scores = [0.0] * batch_size  # added up in the tensor loop's order: each label, then its LM term
        # confidence (NeMo's rules, as the tensor loop applies them): that of each label's step, and with blank
        # steps (exclude_blank False) the aggregate of the blank steps after the label. The search only keeps
        # the logits of the steps that count, and logs per row in order each label (its token index) and each
        # blank step that joins the label before it (token index -1), with the step's row in the kept logits;
        # `_measure_kept` measures them together and folds the blanks into the labels, so that at batch 1 the
        # measure's dozen small operations run once per few hundred steps, not on every step.
        self.confidence = confidence
        self.with_blanks = confidence is not None and not confidence.exclude_blank
        self.token_confidence: list[list[float]] | None = (
            [[] for _ in range(batch_size)] if confidence is not None else None)
        self.kept_logits: list[Tensor] = []  # [k, V (+N)] each
        self.kept_rows = 0
        self.confidence_log: list[tuple[int, int, int]] = []  # (row, token index or -1 for a blank, kept row)
        identity = aggregation_identity(confidence.aggregation) if confidence is not None else 0.0
        self.blank_aggregate = [identity] * batch_size  # blanks folded since each row's last label (mean: sum)
        self.blank_count = [0] * batch_size

    def decode(self) -> BatchedHypotheses:
        live = self._start([b for b, length in enumerate(self.lengths) if length > 0])
        while live is not None:
            found = self._search(live)
            live = self._after_search(live, found)
        if self.confidence is not None:
            self._measure_kept()
            if self.with_blanks:
                for row, confidences in enumerate(self.token_confidence):  # the last labels take the blanks after
                    self._close_label_confidence(row, len(confidences) - 1)
        return BatchedHypotheses.from_lists(
            self.tokens, self.frame_indices, self.token_scores, self.scores,
            self.token_durations if self.durations else None, self.last_frame, self.frame_count, self.device,
            self.dtype, self.token_confidence)

    # --- steps -------------------------------------------------------------------------------------------
    def _start(self, rows: list[int]) -> _Rows | None:
        """Feed the blank (start of sequence) to the rows with frames."""
        if not rows:
            return None
        model = self.model
        blanks = torch.full((len(rows),), self.blank_id, dtype=torch.long)
        prediction, state = model.predict(blanks, model.initial_state(len(rows), blanks.device, self.dtype))
        live = _Rows(rows, model.project_prediction(prediction), state)
        if self.lm is not None:
            # asked for the whole batch, then its rows: a model bound to the batch's rows (per-utterance phrase
            # lists, decoders/boosting/rows.py) gives each row its own start
            live.lm_states = self.lm.initial_states(len(self.tokens))[torch.as_tensor(rows, dtype=torch.long)]
            self._advance_lm(live)
        return live

    def _advance_lm(self, live: _Rows) -> None:
        scores, next_states = self.lm.advance(live.lm_states)  # [n, V - 1] each
        live.lm_weighted_scores = scores.to(live.prediction.dtype) * self.lm_weight
        live.lm_next_states = next_states

    def _search(self, live: _Rows) -> _Found:
        """For every live row, the first label from its frame on (moving over blanks), or None where the
        utterance ends first. Times move as in `LabelLoopingGreedy._search`."""
        count = len(live.rows)
        found = _Found([None] * count, [0] * count, [0] * count)
        searching = list(range(count))  # positions in `live`
        while searching:
            if self.window == 1:
                searching = self._search_step(live, searching, found)
            else:
                searching = self._search_window_step(live, searching, found)
        return found

    def _joint(self, live: _Rows, searching: list[int], offsets: int) -> Tensor:
        """The joint for the searching rows on `offsets` frames from their time (clamped to the last frame)
        -> logits [m, V (+N)] (offsets 1) or [m, W, V (+N)]."""
        rows, time, lengths, max_time = live.rows, self.time, self.lengths, self.max_time
        if len(searching) == 1 and time[rows[searching[0]]] + offsets <= lengths[rows[searching[0]]]:
            start = rows[searching[0]] * max_time + time[rows[searching[0]]]
            encoder_rows = self.encoder_rows[start: start + offsets]  # [W, H], a view: no gather
        else:
            index = [rows[p] * max_time + min(time[rows[p]] + j, lengths[rows[p]] - 1)
                     for p in searching for j in range(offsets)]
            encoder_rows = self.encoder_rows.index_select(0, torch.tensor(index))  # [m*W, H]
        prediction = live.prediction
        if len(searching) < len(rows):
            prediction = prediction.index_select(0, torch.tensor(searching))
        if offsets > 1:
            encoder_rows = encoder_rows.view(len(searching), offsets, -1)
            prediction = prediction.unsqueeze(1)
        return self.model.joint_after_projection(encoder_rows, prediction)

    def _durations_of(self, logits: Tensor) -> list:
        """The TDT duration of each step (nested lists for [m, W])."""
        indices = logits[..., self.num_labels:].argmax(dim=-1).tolist()
        if logits.dim() == 2:
            return [self.durations[i] for i in indices]
        return [[self.durations[i] for i in row] for row in indices]

    def _search_step(self, live: _Rows, searching: list[int], found: _Found) -> list[int]:
        """One frame per searching row; returns the rows that saw a blank and are still inside."""
        logits = self._joint(live, searching, 1)  # [m, V (+N)]
        label_logits = logits[:, :self.num_labels]
        labels = label_logits.argmax(dim=-1)
        label_list = labels.tolist()
        durations = self._durations_of(logits) if self.durations else None
        base, logged = self._kept_base()  # row j of this step would be kept row base + j
        rows, time, lengths, blank = live.rows, self.time, self.lengths, self.blank_id
        still, hits = [], []
        for j, position in enumerate(searching):
            row = rows[position]
            duration = durations[j] if durations is not None else 0
            if label_list[j] == blank:
                if self.with_blanks:
                    self._log_blank(row, time[row], base + j)
                time[row] += max(duration, 1)
                if time[row] < lengths[row]:
                    still.append(position)
                continue
            hits.append(j)
            found.labels[position] = label_list[j]
            found.frames[position] = time[row]
            found.durations[position] = duration
            if self.confidence is not None:
                self.confidence_log.append((row, len(self.tokens[row]), base + j))
            time[row] += duration
        self._keep_logits(logits, logged)
        if hits:
            if len(hits) < len(searching):
                selected = torch.tensor(hits)
                logits, labels = logits.index_select(0, selected), labels.index_select(0, selected)
            self._score_labels(live, logits, labels, [searching[j] for j in hits], found)
        return still

    def _search_window_step(self, live: _Rows, searching: list[int], found: _Found) -> list[int]:
        """WIND: the joint on W frames per searching row at once, then the first label among them (TDT: along
        the chain of blank durations), as `LabelLoopingGreedy._search_window` moves."""
        window = self.window
        logits = self._joint(live, searching, window)  # [m, W, V (+N)]
        labels = logits[..., :self.num_labels].argmax(dim=-1)  # [m, W]
        label_list = labels.tolist()
        durations = self._durations_of(logits) if self.durations else None
        base, logged = self._kept_base()  # step (j, w) would be kept row base + j*W + w
        rows, time, lengths, blank = live.rows, self.time, self.lengths, self.blank_id
        still, hits, hit_offsets = [], [], []
        for j, position in enumerate(searching):
            row = rows[position]
            inside = min(window, lengths[row] - time[row])  # offsets before the utterance ends
            row_labels = label_list[j]
            offset = 0
            blank_offsets = []  # the blank steps on the way (their confidence may join the last label's)
            if durations is None:
                while offset < inside and row_labels[offset] == blank:
                    blank_offsets.append(offset)
                    offset += 1
                is_label = offset < inside
                duration = 0
                if not is_label:
                    offset = window  # past the window (and maybe the end), as the tensor loop moves
            else:
                row_durations = durations[j]
                while offset < window and offset < inside and row_labels[offset] == blank:
                    blank_offsets.append(offset)
                    offset += max(row_durations[offset], 1)
                is_label = offset < window and offset < inside
                duration = row_durations[offset] if is_label else 0
            if self.with_blanks:
                for blank_offset in blank_offsets:
                    self._log_blank(row, time[row] + blank_offset, base + j * window + blank_offset)
            if not is_label:
                time[row] += offset
                if time[row] < lengths[row]:
                    still.append(position)
                continue
            hits.append(j)
            hit_offsets.append(offset)
            found.labels[position] = row_labels[offset]
            found.frames[position] = time[row] + offset
            found.durations[position] = duration
            if self.confidence is not None:
                self.confidence_log.append((row, len(self.tokens[row]), base + j * window + offset))
            time[row] += offset + duration
        self._keep_logits(logits.reshape(-1, logits.shape[-1]), logged)
        if len(hits) == 1:  # (batch 1) two views instead of a gather
            step = hits[0], hit_offsets[0]
            self._score_labels(live, logits[step].unsqueeze(0), labels[step].unsqueeze(0),
                               [searching[hits[0]]], found)
        elif hits:
            steps = torch.tensor(hits), torch.tensor(hit_offsets)
            self._score_labels(live, logits[steps], labels[steps], [searching[j] for j in hits], found)
        return still

    def _score_labels(self, live: _Rows, logits: Tensor, labels: Tensor, positions: list[int],
                      found: _Found) -> None:
        """logits [k, V (+N)] and labels [k] of the steps that found the labels of rows `positions`: with an
        LM, re-pick each label among the non-blank labels by `logits + lm_weight * lm_scores` (as the tensor
        loop does); then keep its log-probability."""
        label_logits = logits[:, :self.num_labels]
        if self.lm is not None:
            lm_term = live.lm_weighted_scores
            if len(positions) < lm_term.shape[0]:  # positions ascend: all of them are 0 .. n-1 in order
                lm_term = lm_term.index_select(0, torch.tensor(positions))
            labels = (label_logits[:, : self.num_labels - 1] + lm_term).argmax(dim=-1)
            for position, label in zip(positions, labels.tolist()):
                found.labels[position] = label
        # only these steps are normalized; the tensor loop's logits - logsumexp is the same up to rounding
        log_probs = torch.log_softmax(label_logits, dim=-1).gather(1, labels.unsqueeze(1)).squeeze(1)
        for position, score in zip(positions, log_probs.tolist()):
            row = live.rows[position]
            self.token_scores[row].append(score)
            self.scores[row] += score

    # --- confidence ----------------------------------------------------------------------------------------
    def _kept_base(self) -> tuple[int, int]:
        """Before a search step: where its logits would start among the kept rows, and the log's length."""
        return self.kept_rows, len(self.confidence_log)

    def _keep_logits(self, logits: Tensor, logged: int) -> None:
        """After a search step: keep its logits [k, V (+N)] for the confidence measure if the step logged a
        label or a blank that counts (the log was `logged` long before it)."""
        if len(self.confidence_log) > logged:
            self.kept_logits.append(logits)
            self.kept_rows += logits.shape[0]

    def _log_blank(self, row: int, frame: int, kept_row: int) -> None:
        """A blank step of `row` on `frame` joins its last label's confidence (NeMo): any blank after a label
        for TDT; for RNN-T, blanks on frames after the label's own frame."""
        if self.tokens[row] and (self.durations or frame != self.last_frame[row]):
            self.confidence_log.append((row, -1, kept_row))

    def _measure_kept(self) -> None:
        """Measure the kept steps together and replay the log: labels take their step's confidence, and with
        blank steps, each label takes the blanks logged since the one before it."""
        if not self.kept_logits:
            return
        logits = torch.cat(self.kept_logits) if len(self.kept_logits) > 1 else self.kept_logits[0]
        values = step_confidence(logits, self.num_labels, self.confidence, with_durations=bool(self.durations))
        values = values.tolist()
        aggregation = self.confidence.aggregation
        for row, token, kept_row in self.confidence_log:
            if token < 0:  # a blank step after the row's last label
                self.blank_aggregate[row] = _fold(aggregation, self.blank_aggregate[row], values[kept_row])
                self.blank_count[row] += 1
                continue
            if self.with_blanks:
                self._close_label_confidence(row, token - 1)  # the previous label takes the blanks since it
            self.token_confidence[row][token] = values[kept_row]
        self.kept_logits.clear()
        self.kept_rows = 0
        self.confidence_log.clear()

    def _close_label_confidence(self, row: int, token: int) -> None:
        """Fold the blanks logged since `row`'s label `token` (none: -1) into its confidence; start again."""
        aggregation = self.confidence.aggregation
        if token >= 0:
            own, blanks = self.token_confidence[row][token], self.blank_aggregate[row]
            self.token_confidence[row][token] = ((own + blanks) / (1 + self.blank_count[row])
                                                 if aggregation == "mean" else _fold(aggregation, own, blanks))
        self.blank_aggregate[row] = aggregation_identity(aggregation)
        self.blank_count[row] = 0

    def _after_search(self, live: _Rows, found: _Found) -> _Rows | None:
        """Store the labels, apply max_symbols, drop the rows that ended, and run the prediction network (and
        the LM) once for the rest. Returns the rows still decoding, or None."""
        rows, time, lengths = live.rows, self.time, self.lengths
        keep, keep_labels = [], []
        lm_positions, lm_labels = [], []
        for position, row in enumerate(rows):
            label = found.labels[position]
            if label is None:
                continue  # out of frames: the utterance is done
            frame = found.frames[position]
            if self.token_confidence is not None:
                self.token_confidence[row].append(0.0)  # measured later (`_measure_kept`)
            self.tokens[row].append(label)
            self.frame_indices[row].append(frame)
            self.token_durations[row].append(found.durations[position])
            self.frame_count[row] = self.frame_count[row] + 1 if frame == self.last_frame[row] else 1
            self.last_frame[row] = frame
            if frame == time[row] and self.frame_count[row] >= self.max_symbols:
                time[row] += 1  # max_symbols labels in a row on this frame: move one frame on
            if self.lm is not None:
                lm_positions.append(position)
                lm_labels.append(label)
            if time[row] < lengths[row]:
                keep.append(position)
                keep_labels.append(label)
        if self.lm is not None and lm_positions:
            self._score_lm(live, lm_positions, lm_labels)
        if self.kept_rows >= MEASURE_ROWS:
            self._measure_kept()
        if not keep:
            return None
        model = self.model
        state = live.state
        lm_states = live.lm_states
        if len(keep) < len(rows):
            selected = torch.tensor(keep)
            state = model.select_states(state, selected)
            if lm_states is not None:
                lm_states = lm_states.index_select(0, selected)
        prediction, state = model.predict(torch.tensor(keep_labels), state)
        following = _Rows([rows[p] for p in keep], model.project_prediction(prediction), state)
        if self.lm is not None:
            following.lm_states = lm_states
            self._advance_lm(following)
        return following

    def _score_lm(self, live: _Rows, positions: list[int], labels: list[int]) -> None:
        """Add lm_weight * the LM score of each emitted label to its row, and move the row's LM state on."""
        selected, label_index = torch.tensor(positions), torch.tensor(labels).unsqueeze(1)
        scores = live.lm_weighted_scores.index_select(0, selected).gather(1, label_index).squeeze(1)
        next_states = live.lm_next_states.index_select(0, selected).gather(1, label_index).squeeze(1)
        live.lm_states = live.lm_states.index_copy(0, selected, next_states)
        for position, score in zip(positions, scores.tolist()):
            self.scores[live.rows[position]] += score


def _fold(aggregation: str, left: float, right: float) -> float:
    """Two running aggregates folded into one (mean: sums), as `decoders.confidence.combine` on floats."""
    if aggregation == "min":
        return min(left, right)
    if aggregation == "max":
        return max(left, right)
    if aggregation == "prod":
        return left * right
    return left + right
