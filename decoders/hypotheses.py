"""Batched decoding results kept as padded tensors.

Dims: B batch, U emitted labels (capacity), the filled part of row b is `[:token_lengths[b]]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Hypothesis:
    """One utterance's result as plain Python values."""

    tokens: list[int]
    frame_indices: list[int]  # encoder frame at which each label was emitted
    durations: list[int] | None  # TDT: frames each label covers; None for RNN-T and CTC
    token_scores: list[float]  # log-probability of each emitted label
    score: float  # sum of token_scores (plus any LM terms the decoder adds)
    confidence: list[float] | None = None


class BatchedHypotheses:
    """Labels, frames, TDT durations and scores of B utterances as [B, U] / [B] tensors.

    Appending writes one label per row at that row's current length, for the rows in a mask, with tensor
    ops only (no host synchronization), so it can run inside a CUDA graph. The caller guarantees capacity:
    decoders know an upper bound (frames x max_symbols) or grow the buffers between steps with
    `ensure_capacity_`, which is the only method that reallocates.
    """

    def __init__(
        self,
        batch_size: int,
        capacity: int,
        device: torch.device | str = "cpu",
        float_dtype: torch.dtype = torch.float32,
        with_durations: bool = False,
        with_confidence: bool = False,
    ) -> None:
        capacity = max(int(capacity), 1)
        self.batch_size = batch_size
        self.with_durations = with_durations
        self.tokens = torch.zeros(batch_size, capacity, dtype=torch.long, device=device)
        self.frame_indices = torch.zeros(batch_size, capacity, dtype=torch.long, device=device)
        self.durations = torch.zeros(batch_size, capacity, dtype=torch.long, device=device) if with_durations else None
        self.token_scores = torch.zeros(batch_size, capacity, dtype=float_dtype, device=device)
        # per-token confidence in [0, 1] (decoders given a ConfidenceConfig), else None
        self.token_confidence = (
            torch.zeros(batch_size, capacity, dtype=float_dtype, device=device) if with_confidence else None
        )
        self.token_lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.scores = torch.zeros(batch_size, dtype=float_dtype, device=device)
        # frame of the last label and how many labels in a row were emitted on it (for max_symbols)
        self.last_frame = torch.full((batch_size,), -1, dtype=torch.long, device=device)
        self.last_frame_count = torch.zeros(batch_size, dtype=torch.long, device=device)
        self._batch_indices = torch.arange(batch_size, device=device)
        # beam search on request: the N best of each utterance, rows b*N .. b*N+N-1, best first
        self.nbest: BatchedHypotheses | None = None

    @classmethod
    def from_lists(cls, tokens: list[list[int]], frame_indices: list[list[int]], token_scores: list[list[float]],
                   scores: list[float], durations: list[list[int]] | None, last_frame: list[int],
                   last_frame_count: list[int], device: torch.device | str = "cpu",
                   float_dtype: torch.dtype = torch.float32,
                   token_confidence: list[list[float]] | None = None) -> BatchedHypotheses:
        """B rows given as host lists (a decoder that keeps its results on the host builds them once, at the
        end), with capacity for the longest row."""
        batch_size = len(tokens)
        lengths = [len(row) for row in tokens]
        capacity = max(lengths, default=0)
        hypotheses = cls(batch_size, capacity, device, float_dtype, with_durations=durations is not None,
                         with_confidence=token_confidence is not None)

        def padded(rows: list[list], dtype: torch.dtype) -> Tensor:
            width = hypotheses.capacity
            return torch.tensor([row + [0] * (width - len(row)) for row in rows], dtype=dtype).reshape(
                batch_size, width).to(device)

        hypotheses.tokens = padded(tokens, torch.long)
        hypotheses.frame_indices = padded(frame_indices, torch.long)
        hypotheses.token_scores = padded(token_scores, float_dtype)
        if durations is not None:
            hypotheses.durations = padded(durations, torch.long)
        if token_confidence is not None:
            hypotheses.token_confidence = padded(token_confidence, float_dtype)
        hypotheses.token_lengths = torch.tensor(lengths, dtype=torch.long).to(device)
        hypotheses.scores = torch.tensor(scores, dtype=float_dtype).reshape(batch_size).to(device)
        hypotheses.last_frame = torch.tensor(last_frame, dtype=torch.long).reshape(batch_size).to(device)
        hypotheses.last_frame_count = torch.tensor(last_frame_count, dtype=torch.long).reshape(batch_size).to(device)
        return hypotheses

    @property
    def capacity(self) -> int:
        return self.tokens.shape[1]

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def reset_(self) -> None:
        """Empty every row, keeping the buffers (CUDA graphs replay on the same memory)."""
        self.token_lengths.zero_()
        self.scores.zero_()
        self.last_frame.fill_(-1)
        self.last_frame_count.zero_()

    def ensure_capacity_(self, capacity: int) -> None:
        """Grow the [B, U] buffers to hold at least `capacity` labels per row (doubling, amortized)."""
        if capacity <= self.capacity:
            return
        new_capacity = max(capacity, 2 * self.capacity)
        extra = new_capacity - self.capacity

        def grow(buffer: Tensor) -> Tensor:
            return torch.cat([buffer, buffer.new_zeros(self.batch_size, extra)], dim=1)

        self.tokens = grow(self.tokens)
        self.frame_indices = grow(self.frame_indices)
        self.token_scores = grow(self.token_scores)
        if self.durations is not None:
            self.durations = grow(self.durations)
        if self.token_confidence is not None:
            self.token_confidence = grow(self.token_confidence)

    def append_(
        self,
        mask: Tensor,
        labels: Tensor,
        frame_indices: Tensor,
        scores: Tensor,
        durations: Tensor | None = None,
        confidence: Tensor | None = None,
    ) -> None:
        """For rows where mask [B] is True, append labels [B] emitted at frame_indices [B] with scores [B]
        (and confidence [B], for hypotheses that carry it)."""
        positions = self.token_lengths.clamp(max=self.capacity - 1)
        rows = self._batch_indices

        def write(buffer: Tensor, values: Tensor) -> None:
            buffer[rows, positions] = torch.where(mask, values.to(buffer.dtype), buffer[rows, positions])

        write(self.tokens, labels)
        write(self.frame_indices, frame_indices)
        write(self.token_scores, scores)
        if self.durations is not None:
            if durations is None:
                raise ValueError("durations are required: these hypotheses were created with_durations=True")
            write(self.durations, durations)
        if self.token_confidence is not None and confidence is not None:
            write(self.token_confidence, confidence)
        self.token_lengths += mask
        self.scores += torch.where(mask, scores.to(self.scores.dtype), 0.0)
        same_frame = frame_indices == self.last_frame
        torch.where(mask, torch.where(same_frame, self.last_frame_count + 1, 1), self.last_frame_count,
                    out=self.last_frame_count)
        torch.where(mask, frame_indices, self.last_frame, out=self.last_frame)

    def select(self, batch_size: int) -> BatchedHypotheses:
        """The first `batch_size` rows, trimmed to the longest one (one host synchronization)."""
        length = int(self.token_lengths[:batch_size].max()) if batch_size > 0 else 0
        out = BatchedHypotheses.__new__(BatchedHypotheses)
        out.batch_size = batch_size
        out.with_durations = self.with_durations
        out.tokens = self.tokens[:batch_size, :length].clone()
        out.frame_indices = self.frame_indices[:batch_size, :length].clone()
        out.durations = self.durations[:batch_size, :length].clone() if self.durations is not None else None
        out.token_scores = self.token_scores[:batch_size, :length].clone()
        out.token_confidence = (
            self.token_confidence[:batch_size, :length].clone() if self.token_confidence is not None else None
        )
        out.token_lengths = self.token_lengths[:batch_size].clone()
        out.scores = self.scores[:batch_size].clone()
        out.last_frame = self.last_frame[:batch_size].clone()
        out.last_frame_count = self.last_frame_count[:batch_size].clone()
        out._batch_indices = self._batch_indices[:batch_size]
        out.nbest = self.nbest
        return out

    def to_list(self) -> list[Hypothesis]:
        """Per-utterance plain lists (copies everything to the host once)."""
        lengths = self.token_lengths.cpu().tolist()
        tokens = self.tokens.cpu().tolist()
        frames = self.frame_indices.cpu().tolist()
        durations = self.durations.cpu().tolist() if self.durations is not None else None
        token_scores = self.token_scores.double().cpu().tolist()
        scores = self.scores.double().cpu().tolist()
        confidence = self.token_confidence.double().cpu().tolist() if self.token_confidence is not None else None
        return [
            Hypothesis(
                tokens=tokens[b][:n],
                frame_indices=frames[b][:n],
                durations=durations[b][:n] if durations is not None else None,
                token_scores=token_scores[b][:n],
                score=scores[b],
                confidence=confidence[b][:n] if confidence is not None else None,
            )
            for b, n in enumerate(lengths)
        ]


# Rolling hash of the non-blank labels (the PCG multiplier; int64 arithmetic wraps around, as in NeMo).
HASH_MULTIPLIER = 6364136223846793005
NO_LABEL = -1  # a column that does not extend its hypothesis (a finished one carried over), or no last label


def extend_hashes(hashes: Tensor, labels: Tensor) -> Tensor:
    """The hash of each sequence after appending `labels` (same shape): h' = h * M + 1 + label, mod 2**64."""
    return hashes * HASH_MULTIPLIER + 1 + labels


class BeamTree:
    """B utterances x K hypotheses of transducer beam search, kept as a tree with parent pointers.

    Every search step appends one column to [B, K, L] buffers: for each new hypothesis k its parent's beam
    index, its label (a label, blank, or `NO_LABEL` for a hypothesis carried over unchanged), the frame it
    was emitted on, its TDT duration and its score increment. Prefixes are never copied: a hypothesis is
    read back by walking the parent pointers from the last column (`to_hypotheses`).

    Per hypothesis [B, K]: `scores` (log-probabilities, -inf = no hypothesis), `hashes` (rolling hash of the
    non-blank labels), `prefix_hashes` (the hash before the last label, for AES prefix search),
    `non_blank_lengths`, `last_labels` (last non-blank label, `NO_LABEL` if none), `next_frames` (the frame
    the hypothesis reads next) and `frame_counts` (labels emitted in a row on the current frame, for
    max_symbols). `length` is the number of columns written, a 0-dim tensor.

    Every method but `ensure_capacity_` and the readers (`to_hypotheses`, `best`) writes in place with tensor
    operations only (no host synchronization, no new buffers), so a search step can run inside a CUDA graph.
    The caller reserves room for each column with `ensure_capacity_` (it counts columns on the host); a tree
    made with `growable=False` (CUDA graphs: buffers cannot move) raises instead of growing.
    Dims: B batch, K beam, L steps (capacity).
    """

    def __init__(
        self,
        batch_size: int,
        beam_size: int,
        blank_id: int,
        capacity: int = 64,
        device: torch.device | str = "cpu",
        float_dtype: torch.dtype = torch.float32,
        with_durations: bool = False,
        growable: bool = True,
    ) -> None:
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        capacity = max(int(capacity), 1)
        self.batch_size = batch_size
        self.beam_size = beam_size
        self.blank_id = blank_id
        self.with_durations = with_durations
        self.growable = growable
        shape = (batch_size, beam_size, capacity)
        long = dict(dtype=torch.long, device=device)
        self.labels = torch.full(shape, NO_LABEL, **long)
        self.parents = torch.zeros(shape, **long)
        self.frame_indices = torch.zeros(shape, **long)
        self.durations = torch.zeros(shape, **long)
        self.step_scores = torch.zeros(shape, dtype=float_dtype, device=device)
        beams = (batch_size, beam_size)
        self.length = torch.zeros((), **long)  # columns written
        self.scores = torch.empty(beams, dtype=float_dtype, device=device)
        self.hashes = torch.empty(beams, **long)
        self.prefix_hashes = torch.empty(beams, **long)
        self.non_blank_lengths = torch.empty(beams, **long)
        self.last_labels = torch.empty(beams, **long)
        self.next_frames = torch.empty(beams, **long)
        self.frame_counts = torch.empty(beams, **long)
        self._rows = torch.arange(batch_size, device=device).unsqueeze(1)  # [B, 1]
        self._beam_range = torch.arange(beam_size, device=device)
        self.reset_()

    @property
    def capacity(self) -> int:
        return self.labels.shape[2]

    @property
    def device(self) -> torch.device:
        return self.labels.device

    def reset_(self) -> None:
        """One empty hypothesis per utterance (in beam slot 0), no columns; the buffers are kept."""
        self.length.zero_()
        self.scores.fill_(float("-inf"))
        self.scores[:, 0] = 0.0
        for buffer in (self.hashes, self.prefix_hashes, self.non_blank_lengths, self.next_frames, self.frame_counts):
            buffer.zero_()
        self.last_labels.fill_(NO_LABEL)

    def ensure_capacity_(self, capacity: int) -> None:
        """Room for at least `capacity` columns: grow the [B, K, L] buffers (doubling, amortized), or, for a
        tree made with `growable=False`, raise if there is not (its caller's bound on columns was wrong)."""
        if capacity <= self.capacity:
            return
        if not self.growable:
            raise RuntimeError(f"beam tree full: {capacity} columns needed, {self.capacity} allocated")
        extra = max(capacity, 2 * self.capacity) - self.capacity

        def grow(buffer: Tensor, fill) -> Tensor:
            return torch.cat([buffer, buffer.new_full((self.batch_size, self.beam_size, extra), fill)], dim=2)

        self.labels = grow(self.labels, NO_LABEL)
        self.parents = grow(self.parents, 0)
        self.frame_indices = grow(self.frame_indices, 0)
        self.durations = grow(self.durations, 0)
        self.step_scores = grow(self.step_scores, 0.0)

    def gather(self, values: Tensor, parents: Tensor) -> Tensor:
        """values [B, K, ...] of the current hypotheses -> those of each new hypothesis's parent [B, K, ...]."""
        return values[self._rows, parents]

    def append_(
        self,
        parents: Tensor,
        labels: Tensor,
        scores: Tensor,
        frames: Tensor,
        next_frames: Tensor,
        durations: Tensor | None = None,
    ) -> None:
        """Replace the K hypotheses of each utterance by K new ones, all [B, K]: new hypothesis k extends
        hypothesis `parents[b, k]` by `labels[b, k]` (blank, a label, or NO_LABEL to carry it over unchanged),
        emitted on `frames` and reading `next_frames` next, with total `scores`. The column is written at
        `length`, which the caller has made room for (`ensure_capacity_`)."""
        is_carried = labels < 0
        is_label = ~is_carried & (labels != self.blank_id)
        parent_hashes = self.gather(self.hashes, parents)
        parent_next_frames = self.gather(self.next_frames, parents)
        parent_counts = self.gather(self.frame_counts, parents)
        parent_scores = self.gather(self.scores, parents)

        column = self.length.view(1)
        self.labels.index_copy_(2, column, labels.unsqueeze(2))
        self.parents.index_copy_(2, column, parents.unsqueeze(2))
        self.frame_indices.index_copy_(2, column, frames.unsqueeze(2))
        self.durations.index_copy_(
            2, column, (durations if durations is not None else torch.zeros_like(labels)).unsqueeze(2)
        )
        step_scores = torch.where(is_carried, 0.0, scores - parent_scores).to(self.step_scores.dtype)
        self.step_scores.index_copy_(2, column, step_scores.unsqueeze(2))
        self.length.add_(1)

        # every new value is computed from the parents' before any buffer is overwritten
        prefix_hashes = torch.where(is_label, parent_hashes, self.gather(self.prefix_hashes, parents))
        hashes = torch.where(is_label, extend_hashes(parent_hashes, labels), parent_hashes)
        non_blank_lengths = self.gather(self.non_blank_lengths, parents) + is_label
        last_labels = torch.where(is_label, labels, self.gather(self.last_labels, parents))
        # labels in a row on one frame: a label that stays on its frame counts one more if the frame is the
        # one its parent was on; anything that moves on starts the count again
        stays = is_label & (next_frames == frames)
        same_frame = frames == parent_next_frames
        frame_counts = torch.where(
            is_carried, parent_counts, torch.where(stays, torch.where(same_frame, parent_counts, 0) + 1, 0)
        )
        self.prefix_hashes.copy_(prefix_hashes)
        self.hashes.copy_(hashes)
        self.non_blank_lengths.copy_(non_blank_lengths)
        self.last_labels.copy_(last_labels)
        self.frame_counts.copy_(frame_counts)
        self.next_frames.copy_(torch.where(is_carried, parent_next_frames, next_frames))
        self.scores.copy_(scores)

    def recombine_(self, match_frames: bool) -> None:
        """Merge identical hypotheses: same hash, last label and non-blank length (and, with `match_frames`,
        next frame, for TDT and WIND). The best-scoring one of each group keeps the log-sum-exp of their
        scores and its own path; the others get -inf. Tensor sizes do not change."""
        if self.beam_size == 1:
            return
        same = (
            (self.hashes.unsqueeze(2) == self.hashes.unsqueeze(1))
            & (self.last_labels.unsqueeze(2) == self.last_labels.unsqueeze(1))
            & (self.non_blank_lengths.unsqueeze(2) == self.non_blank_lengths.unsqueeze(1))
        )  # [B, K, K]
        if match_frames:
            same &= self.next_frames.unsqueeze(2) == self.next_frames.unsqueeze(1)
        group_scores = torch.where(same, self.scores.unsqueeze(1), float("-inf"))  # row k: scores of k's group
        keep = group_scores.argmax(dim=2) == self._beam_range  # the first best of each group keeps it
        self.scores.copy_(torch.where(keep, torch.logsumexp(group_scores, dim=2), float("-inf")))

    def ranking(self, length_normalization: bool = True) -> Tensor:
        """[B, K] beam indices, best first, by score / (non_blank_length + 1) (NeMo) or by raw score."""
        scores = self.scores
        if length_normalization:
            scores = scores / (self.non_blank_lengths + 1).to(scores.dtype)
        return torch.sort(scores, dim=1, descending=True, stable=True).indices

    def to_hypotheses(self, beams: Tensor) -> BatchedHypotheses:
        """beams [B', N] beam indices of the first B' utterances -> BatchedHypotheses of B'*N rows (row b*N + n
        is beams[b, n]).

        Walks the parent pointers back from the last column; blanks and carried columns are dropped."""
        batch_size, count = beams.shape
        rows_index = self._rows[:batch_size]
        length = int(self.length)  # one host synchronization
        pointers = beams
        path_labels = self.labels.new_full((batch_size, count, length), NO_LABEL)
        path_frames = torch.zeros_like(path_labels)
        path_durations = torch.zeros_like(path_labels)
        path_scores = self.step_scores.new_zeros((batch_size, count, length))
        for column in range(length - 1, -1, -1):
            path_labels[..., column] = self.labels[rows_index, pointers, column]
            path_frames[..., column] = self.frame_indices[rows_index, pointers, column]
            path_durations[..., column] = self.durations[rows_index, pointers, column]
            path_scores[..., column] = self.step_scores[rows_index, pointers, column]
            pointers = self.parents[rows_index, pointers, column]
        rows = batch_size * count
        is_token = ((path_labels >= 0) & (path_labels != self.blank_id)).view(rows, length)
        token_lengths = is_token.sum(dim=1)
        capacity = int(token_lengths.max()) if rows > 0 and length > 0 else 0
        # each token's place in its row; non-tokens go to a spare last column that is cut off
        places = torch.where(is_token, is_token.cumsum(dim=1) - 1, capacity)
        out = BatchedHypotheses(rows, capacity + 1, self.device, self.scores.dtype, self.with_durations)

        def compact(buffer: Tensor, values: Tensor) -> Tensor:
            buffer.scatter_(1, places, values.view(rows, length).to(buffer.dtype))
            return buffer[:, :capacity].clone()

        out.tokens = compact(out.tokens, path_labels)
        out.frame_indices = compact(out.frame_indices, path_frames)
        out.token_scores = compact(out.token_scores, path_scores)
        if self.with_durations:
            out.durations = compact(out.durations, path_durations)
        out.token_lengths = token_lengths
        out.scores = self.scores[rows_index, beams].reshape(rows).clone()
        if capacity > 0:
            last_frames = out.frame_indices.gather(1, (token_lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
            out.last_frame = torch.where(token_lengths > 0, last_frames, -1)
        return out

    def best(
        self, length_normalization: bool = True, with_nbest: bool = False, batch_size: int | None = None
    ) -> BatchedHypotheses:
        """The best hypothesis of each of the first `batch_size` utterances (all by default); with
        `with_nbest`, also all K, best first, in `.nbest` (hypotheses that do not exist have score -inf and no
        tokens)."""
        order = self.ranking(length_normalization)[:batch_size]
        best = self.to_hypotheses(order[:, :1])
        if with_nbest:
            best.nbest = self.to_hypotheses(order)
        return best
