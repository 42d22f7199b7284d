"""A token-level n-gram LM as tensors, queried over the whole vocabulary for a batch of states at once.

Structure (the GPU n-gram LM of NeMo's `NGramGPULanguageModel`, rebuilt here from the ARPA semantics):
- a state is a context (an n-gram of order < N that appears in the ARPA file, or a missing prefix the loader
  created); state 0 is the empty context and owns exactly V arcs, one per label, so that every label is
  found there at the latest (labels absent from the ARPA file get the `<unk>` probability, as in KenLM);
  state 1 is the context `<s>`;
- arcs are sorted by (state, label) and stored as keys `state * V + label`, so the arcs of state s are the
  contiguous range `arc_offsets[s] .. arc_offsets[s + 1]`, sorted by label; an arc holds the n-gram's
  log-probability and the state after the label (the longest suffix of context + label that is a state);
- each state has a backoff weight and a backoff target (its longest proper suffix that is a state), and a
  final weight: log p(</s> | context), resolved through backoffs at load time.

`advance` walks from each state down its backoff chain (at most N - 1 steps), looking up every label at
every level and keeping the most specific hit, plus the backoff weights passed on the way: exactly the
backoff formula `p(w | h) = p_arpa(h w)` if `h w` is listed, else `backoff(h) + p(w | h[1:])`.
ARPA files whose pruning dropped lower-order prefixes of kept n-grams (SRILM, varikn) get the missing
contexts created as n-grams whose probability is derived through backoff and whose backoff is 0, which
leaves every probability as the backoff formula gives it for the file as written (KenLM refuses such files;
`build.py` writes them out with the contexts restored, which KenLM then reads with the same scores).

Scores are natural logs (ARPA's log10 times ln 10). Dims: B batch, V labels (no blank), S states, A arcs,
N order, K labels queried per state.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from decoders.ngram.arpa import (
    BOS_ID,
    EOS_ID,
    KENLM_MISSING_UNK_LOG10,
    UNK_ID,
    ArpaFormatError,
    ArpaModel,
    read_arpa,
)

LN10 = math.log(10.0)
EMPTY_STATE = 0
BOS_STATE = 1


@dataclass(frozen=True)
class NgramTensors:
    """The LM's arrays. Arcs are sorted by `arc_keys = state * vocab_size + label`."""

    arc_offsets: Tensor  # [S + 1] long: arcs of state s are arc_offsets[s] .. arc_offsets[s + 1]
    arc_keys: Tensor  # [A] long
    arc_weights: Tensor  # [A] float32, natural log
    arc_targets: Tensor  # [A] int32: state after the label
    backoff_targets: Tensor  # [S] long
    backoff_weights: Tensor  # [S] float32, natural log
    final_weights: Tensor  # [S] float32: log p(</s> | state), resolved through backoffs
    vocab_size: int
    max_order: int
    max_state_arcs: int  # most arcs of any state other than state 0 (bounds the binary search)

    @property
    def num_states(self) -> int:
        return self.backoff_targets.shape[0]

    @property
    def num_arcs(self) -> int:
        return self.arc_keys.shape[0]

    @property
    def device(self) -> torch.device:
        return self.arc_keys.device

    def to(self, device: torch.device | str) -> NgramTensors:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, Tensor):
                moved[name] = value.to(device)
        return NgramTensors(**moved)


def walk_torch(lm: NgramTensors, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """states [B], labels [B, K] -> (scores [B, K] float32, next_states [B, K] long): the backoff walk.

    On a GPU the loop has a fixed length and no host synchronization (CUDA graphs can capture it); on the CPU
    it stops as soon as every row has reached the empty context.
    """
    vocab_size = lm.vocab_size
    scores = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
    next_states = torch.zeros(labels.shape, dtype=torch.long, device=labels.device)
    found = torch.zeros(labels.shape, dtype=torch.bool, device=labels.device)
    accumulated = torch.zeros(states.shape, dtype=torch.float32, device=labels.device)  # backoffs passed
    last_arc = lm.num_arcs - 1
    state = states
    for _ in range(lm.max_order - 1):
        if not state.is_cuda and not bool(state.any()):
            break
        keys = state.unsqueeze(1) * vocab_size + labels
        index = torch.searchsorted(lm.arc_keys, keys).clamp_(max=last_arc)
        hit = (lm.arc_keys[index] == keys) & ~found & (state != EMPTY_STATE).unsqueeze(1)
        torch.where(hit, accumulated.unsqueeze(1) + lm.arc_weights[index], scores, out=scores)
        torch.where(hit, lm.arc_targets[index].long(), next_states, out=next_states)
        found |= hit
        accumulated = accumulated + lm.backoff_weights[state]
        state = lm.backoff_targets[state]
    # the empty context holds every label, at arc index == label
    torch.where(found, scores, accumulated.unsqueeze(1) + lm.arc_weights[labels], out=scores)
    torch.where(found, next_states, lm.arc_targets[labels].long(), out=next_states)
    return scores, next_states


def advance_torch(lm: NgramTensors, states: Tensor) -> tuple[Tensor, Tensor]:
    """states [B] -> (scores [B, V] float32, next_states [B, V] long) over the whole vocabulary.

    On a GPU: the backoff walk for every label (`walk_torch`: fixed shapes, no host synchronization, so CUDA
    graphs can capture it). On the CPU: `scatter_arcs_torch`, which touches only the arcs of the states on
    each backoff chain and is several times faster there. Both give bit-identical results.
    """
    if states.is_cuda:
        labels = torch.arange(lm.vocab_size, device=states.device).expand(states.shape[0], lm.vocab_size)
        return walk_torch(lm, states, labels)
    return scatter_arcs_torch(lm, states)


def scatter_arcs_torch(lm: NgramTensors, states: Tensor) -> tuple[Tensor, Tensor]:
    """states [B] -> (scores [B, V], next_states [B, V]): start from the empty context's arcs plus every backoff
    weight of the chain, then write the arcs of the states on the chain, where for each label the most
    specific state's arc wins (found with one scatter-min over the chain level of every gathered arc). Sizes
    depend on the data (host synchronization): meant for the CPU.
    """
    vocab_size = lm.vocab_size
    batch_size = states.shape[0]
    chain, accumulated = [states], [torch.zeros(batch_size, dtype=torch.float32, device=states.device)]
    for _ in range(lm.max_order - 1):
        if not bool(chain[-1].any()):
            break
        accumulated.append(accumulated[-1] + lm.backoff_weights[chain[-1]])
        chain.append(lm.backoff_targets[chain[-1]])
    scores = (accumulated[-1].unsqueeze(1) + lm.arc_weights[:vocab_size]).contiguous()
    next_states = lm.arc_targets[:vocab_size].long().expand(batch_size, vocab_size).contiguous()
    levels = len(chain) - 1  # chain[-1] is the empty context everywhere
    if levels == 0 or batch_size == 0:
        return scores, next_states
    level_states = torch.stack(chain[:-1]).reshape(-1)  # [L * B], level-major
    first = lm.arc_offsets[level_states]
    counts = torch.where(level_states != EMPTY_STATE, lm.arc_offsets[level_states + 1] - first, 0)
    total = int(counts.sum())
    if total == 0:
        return scores, next_states
    items = torch.repeat_interleave(torch.arange(levels * batch_size, device=states.device), counts,
                                    output_size=total)  # the (level, row) each gathered arc belongs to
    starts = torch.cumsum(counts, 0) - counts
    arcs = torch.arange(total, device=states.device) - starts[items] + first[items]
    cells = (items % batch_size) * vocab_size + lm.arc_keys[arcs] - level_states[items] * vocab_size
    level = items // batch_size
    most_specific = torch.full((batch_size * vocab_size,), levels, dtype=torch.long, device=states.device)
    most_specific.scatter_reduce_(0, cells, level, reduce="amin")
    keep = most_specific[cells] == level
    cells, arcs, items = cells[keep], arcs[keep], items[keep]
    scores.view(-1)[cells] = torch.stack(accumulated[:-1]).reshape(-1)[items] + lm.arc_weights[arcs]
    next_states.view(-1)[cells] = lm.arc_targets[arcs].long()
    return scores, next_states


class NgramLm:
    """A token-level n-gram LM (see module docstring) satisfying the `LanguageModel` protocol.

    `advance` runs the Triton kernel for CUDA tensors when Triton is importable (`use_triton=None`), or as
    `use_triton` says; the torch twin otherwise.
    """

    def __init__(self, tensors: NgramTensors, ngram_counts: list[int] | None = None,
                 use_triton: bool | None = None) -> None:
        self.tensors = tensors
        self.vocab_size = tensors.vocab_size
        self.max_order = tensors.max_order
        self.ngram_counts = list(ngram_counts) if ngram_counts is not None else []
        self.use_triton = use_triton

    # --- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_arpa(cls, path: str | Path, vocab_size: int, **kwargs) -> NgramLm:
        """Read a token-level ARPA file (plain or gzip) for labels 0 .. vocab_size - 1."""
        arpa = read_arpa(path)
        try:
            tensors = tensors_from_arpa(arpa, vocab_size)
        except ArpaFormatError as error:
            raise ArpaFormatError(f"{path}: {error}") from None
        return cls(tensors, ngram_counts=[len(p) for p in arpa.log10_probs], **kwargs)

    @classmethod
    def load(cls, path: str | Path, verify: bool = True, **kwargs) -> NgramLm:
        """Memory-map a file written by `save` (see `load_tensors`)."""
        tensors, counts = load_tensors(path, verify=verify)
        return cls(tensors, ngram_counts=counts, **kwargs)

    def save(self, path: str | Path) -> None:
        save_tensors(path, self.tensors, self.ngram_counts)

    def to(self, device: torch.device | str) -> NgramLm:
        if torch.device(device) == self.tensors.device:
            return self
        return NgramLm(self.tensors.to(device), self.ngram_counts, self.use_triton)

    @property
    def device(self) -> torch.device:
        return self.tensors.device

    # --- the LanguageModel protocol -------------------------------------------------------------------------
    def initial_states(self, batch_size: int, bos: bool = True) -> Tensor:
        """-> states [B]: the `<s>` context (or the empty context with bos=False)."""
        return torch.full((batch_size,), BOS_STATE if bos else EMPTY_STATE, dtype=torch.long, device=self.device)

    def advance(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """states [B] -> (scores [B, V] natural-log float32, next_states [B, V] long)."""
        if states.dim() != 1:
            raise ValueError(f"states must be [B], got {tuple(states.shape)}")
        if self._triton_for(states):
            from decoders.ngram.triton import advance_triton

            return advance_triton(self.tensors, states)
        return advance_torch(self.tensors, states)

    def final_scores(self, states: Tensor) -> Tensor:
        """states [B] -> [B] log p(</s> | state)."""
        return self.tensors.final_weights[states]

    # --- queries for tests and perplexity ----------------------------------------------------------------
    def score_labels(self, states: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """states [B], labels [B, K] -> (scores [B, K], next_states [B, K]) for just those labels."""
        if labels.dim() != 2 or labels.shape[0] != states.shape[0]:
            raise ValueError(f"labels must be [B, K] with B={states.shape[0]}, got {tuple(labels.shape)}")
        return walk_torch(self.tensors, states, labels)

    def score_sequences(self, tokens: Tensor, token_lengths: Tensor, bos: bool = True,
                        eos: bool = True) -> Tensor:
        """tokens [B, L], token_lengths [B] -> [B] float64 natural-log probability of each sequence.

        With `bos` the sequence starts in the `<s>` context; with `eos` the end of sentence is scored.
        Perplexity over a set: `exp(-sum(scores) / (sum(token_lengths) + B * eos))`.
        """
        if tokens.dim() != 2 or token_lengths.shape != (tokens.shape[0],):
            raise ValueError(f"tokens must be [B, L] and token_lengths [B], got {tuple(tokens.shape)} and "
                             f"{tuple(token_lengths.shape)}")
        tokens = tokens.to(self.device, torch.long)
        token_lengths = token_lengths.to(self.device, torch.long)
        if tokens.numel() > 0:
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.vocab_size:
                raise ValueError(f"tokens must lie in [0, {self.vocab_size}), got values in [{low}, {high}]")
        states = self.initial_states(tokens.shape[0], bos=bos)
        total = torch.zeros(tokens.shape[0], dtype=torch.float64, device=self.device)
        for position in range(tokens.shape[1]):
            inside = position < token_lengths
            scores, next_states = walk_torch(self.tensors, states, tokens[:, position : position + 1])
            total += torch.where(inside, scores[:, 0].double(), 0.0)
            states = torch.where(inside, next_states[:, 0], states)
        if eos:
            total += self.final_scores(states).double()
        return total

    def _triton_for(self, states: Tensor) -> bool:
        if self.use_triton is not None:
            return self.use_triton
        if not states.is_cuda:
            return False
        try:
            import triton  # noqa: F401
        except ImportError:
            return False
        return True


# --- ARPA -> tensors --------------------------------------------------------------------------------------
class _RowIndex:
    """Exact lookup of int64 rows [n, k] in a table of rows (a sorted byte view: no hashing, no collisions)."""

    def __init__(self, rows: np.ndarray) -> None:
        self.width = rows.shape[1]
        keys = _row_keys(rows)
        self.order = np.argsort(keys, kind="stable")
        self.sorted = keys[self.order]

    def find(self, rows: np.ndarray) -> np.ndarray:
        """rows [m, k] -> [m] index into the table, or -1."""
        if len(self.sorted) == 0 or len(rows) == 0:
            return np.full(len(rows), -1, dtype=np.int64)
        keys = _row_keys(rows)
        positions = np.minimum(np.searchsorted(self.sorted, keys), len(self.sorted) - 1)
        return np.where(self.sorted[positions] == keys, self.order[positions], -1)


def _row_keys(rows: np.ndarray) -> np.ndarray:
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    return rows.view(np.dtype((np.void, 8 * rows.shape[1]))).ravel()


def tensors_from_arpa(arpa: ArpaModel, vocab_size: int) -> NgramTensors:
    """Build the tensors of a token-level LM over labels 0 .. vocab_size - 1 from parsed ARPA n-grams.

    Vectorized over each order with numpy (n-grams are looked up as whole rows); the n-gram-by-n-gram
    version in `tests/reference/ngram.py` gives bit-identical tensors.
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    max_order = arpa.max_order
    rows = [np.asarray(t, dtype=np.int64).reshape(-1, k + 1) for k, t in enumerate(arpa.tokens)]
    probs = [np.asarray(p, dtype=np.float64) for p in arpa.log10_probs]
    backoffs = [np.asarray(b, dtype=np.float64) for b in arpa.log10_backoffs]
    unigram_tokens = np.unique(rows[0][:, 0])
    for k, table in enumerate(rows):
        outside = np.flatnonzero((table >= vocab_size).any(axis=1))
        if len(outside):
            row = tuple(table[outside[0]].tolist())
            token = max(row)
            raise ArpaFormatError(f"token id {token} in n-gram {row} is outside the vocabulary "
                                  f"(vocab_size={vocab_size})")
        if k > 0:
            unlisted = ~np.isin(table, unigram_tokens)
            if unlisted.any():
                row_index = int(np.flatnonzero(unlisted.any(axis=1))[0])
                token = int(table[row_index][unlisted[row_index]][0])
                raise ArpaFormatError(f"token id {token} in n-gram {tuple(table[row_index].tolist())} has no "
                                      "unigram entry")
        if len(np.unique(_row_keys(table))) != len(table):
            keys = _row_keys(table)
            order = np.argsort(keys, kind="stable")
            repeated = order[1:][keys[order][1:] == keys[order][:-1]][0]
            raise ArpaFormatError(f"duplicate {k + 1}-gram {tuple(table[repeated].tolist())}")
    if BOS_ID not in unigram_tokens:
        rows[0] = np.concatenate([rows[0], [[BOS_ID]]])
        probs[0] = np.append(probs[0], -99.0)
        backoffs[0] = np.append(backoffs[0], 0.0)
    unk_rows = np.flatnonzero(rows[0][:, 0] == UNK_ID)
    unk_log10 = float(probs[0][unk_rows[0]]) if len(unk_rows) else KENLM_MISSING_UNK_LOG10

    # missing prefixes (contexts that pruning dropped): found from the highest order down, so that a created
    # context gets its own missing contexts; probabilities derived from the lowest order up (see
    # arpa.add_missing_prefixes, which this mirrors)
    created = [np.zeros(len(table), dtype=bool) for table in rows]
    for k in range(max_order - 1, 0, -1):  # order k + 1 grams, their contexts of order k
        prefixes = np.unique(rows[k][:, :-1], axis=0) if len(rows[k]) else rows[k][:, :-1]
        missing = prefixes[_RowIndex(rows[k - 1]).find(prefixes) < 0]
        if len(missing):
            rows[k - 1] = np.concatenate([rows[k - 1], missing])
            probs[k - 1] = np.append(probs[k - 1], np.zeros(len(missing)))
            backoffs[k - 1] = np.append(backoffs[k - 1], np.zeros(len(missing)))
            created[k - 1] = np.append(created[k - 1], np.ones(len(missing), dtype=bool))
    index = [_RowIndex(table) for table in rows]

    def backoff_of(grams: np.ndarray) -> np.ndarray:
        """log10 backoff of each row (0 for a context that is not listed, or the empty context)."""
        if grams.shape[1] == 0:
            return np.zeros(len(grams))
        found = index[grams.shape[1] - 1].find(grams)
        return np.where(found >= 0, backoffs[grams.shape[1] - 1][np.maximum(found, 0)], 0.0)

    for k in range(1, max_order):
        targets = np.flatnonzero(created[k])
        if len(targets) == 0:
            continue
        grams = rows[k][targets]
        width = k + 1
        total = backoff_of(grams[:, :-1])
        result = np.zeros(len(grams))
        remaining = np.ones(len(grams), dtype=bool)
        for start in range(1, width):
            suffix = grams[:, start:]
            found = index[width - start - 1].find(suffix)
            hit = remaining & (found >= 0)
            result[hit] = total[hit] + probs[width - start - 1][found[hit]]
            remaining &= ~hit
            if start == width - 1:
                break
            total = total + backoff_of(grams[:, start:-1])
        result[remaining] = total[remaining] + unk_log10
        probs[k][targets] = result

    # states: the empty context, <s>, then every other context of order < N without </s>, by (order, tokens)
    state_of = []  # per order: state id of each row, -1 where the row is no state
    next_id = 2
    for k, table in enumerate(rows):
        states = np.full(len(table), -1, dtype=np.int64)
        if k + 1 < max_order or (k == 0 and max_order == 1):
            eligible = np.flatnonzero(~(table == EOS_ID).any(axis=1))
            if k + 1 >= max_order:  # order-1 LM: only <s> is a context
                eligible = eligible[table[eligible, 0] == BOS_ID]
            ordered = eligible[np.lexsort(table[eligible].T[::-1])]
            if k == 0:
                is_bos = table[ordered, 0] == BOS_ID
                states[ordered[is_bos]] = BOS_STATE
                ordered = ordered[~is_bos]
            states[ordered] = np.arange(next_id, next_id + len(ordered))
            next_id += len(ordered)
        state_of.append(states)
    num_states = next_id

    def state_ids(grams: np.ndarray) -> np.ndarray:
        """State of each row (-1 if it is none); the empty rows are the empty context."""
        if grams.shape[1] == 0:
            return np.zeros(len(grams), dtype=np.int64)
        found = index[grams.shape[1] - 1].find(grams)
        return np.where(found >= 0, state_of[grams.shape[1] - 1][np.maximum(found, 0)], -1)

    def longest_suffix_state(grams: np.ndarray, first: int) -> np.ndarray:
        result = np.full(len(grams), -1, dtype=np.int64)
        for start in range(first, grams.shape[1]):
            result = np.where(result < 0, state_ids(grams[:, start:]), result)
        return np.where(result < 0, EMPTY_STATE, result)

    present = set(rows[0][:, 0].tolist())
    unknown_labels = np.array([label for label in range(vocab_size) if label not in present], dtype=np.int64)
    arc_sources, arc_labels, arc_log10, arc_targets = [], [], [], []
    eos_log10 = np.full(num_states, np.nan)
    for k, table in enumerate(rows):
        sources = state_ids(table[:, :-1])
        tokens = table[:, -1]
        keep = (sources >= 0) & (tokens != BOS_ID)
        eos = keep & (tokens == EOS_ID)
        eos_log10[sources[eos]] = probs[k][eos]
        keep &= tokens != EOS_ID
        targets = longest_suffix_state(table[keep], 0)
        sources, tokens, weights = sources[keep], tokens[keep], probs[k][keep]
        is_unk = tokens == UNK_ID
        repeat = np.where(is_unk, len(unknown_labels), 1)
        labels = np.repeat(tokens, repeat)
        if is_unk.any():
            labels[np.repeat(is_unk, repeat)] = np.tile(unknown_labels, int(is_unk.sum()))
        arc_sources.append(np.repeat(sources, repeat))
        arc_labels.append(labels)
        arc_log10.append(np.repeat(weights, repeat))
        arc_targets.append(np.repeat(targets, repeat))
    if not len(unk_rows):
        arc_sources.append(np.full(len(unknown_labels), EMPTY_STATE, dtype=np.int64))
        arc_labels.append(unknown_labels)
        arc_log10.append(np.full(len(unknown_labels), unk_log10))
        arc_targets.append(np.full(len(unknown_labels), EMPTY_STATE, dtype=np.int64))

    backoff_targets = np.zeros(num_states, dtype=np.int64)
    backoff_log10 = np.zeros(num_states, dtype=np.float64)
    final_log10 = np.zeros(num_states, dtype=np.float64)
    unigram_eos = np.flatnonzero(rows[0][:, 0] == EOS_ID)
    final_log10[EMPTY_STATE] = (eos_log10[EMPTY_STATE] if not np.isnan(eos_log10[EMPTY_STATE])
                                else probs[0][unigram_eos[0]] if len(unigram_eos) else unk_log10)
    for k, table in enumerate(rows):  # shorter contexts first: a state's backoff target is settled before it
        is_state = np.flatnonzero(state_of[k] >= 0)
        if len(is_state) == 0:
            continue
        states = state_of[k][is_state]
        backoff_targets[states] = longest_suffix_state(table[is_state], 1)
        backoff_log10[states] = backoffs[k][is_state]
        listed_eos = eos_log10[states]
        final_log10[states] = np.where(np.isnan(listed_eos),
                                       backoff_log10[states] + final_log10[backoff_targets[states]], listed_eos)

    sources = np.concatenate(arc_sources)
    keys = sources * vocab_size + np.concatenate(arc_labels)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    if len(keys) > 1 and bool(np.any(keys[1:] == keys[:-1])):
        duplicate = int(keys[1:][keys[1:] == keys[:-1]][0])
        raise ArpaFormatError(f"two n-grams give state {duplicate // vocab_size} the label {duplicate % vocab_size}")
    sources = sources[order]
    offsets = np.searchsorted(sources, np.arange(num_states + 1), side="left").astype(np.int64)
    root_arcs = int(offsets[1] - offsets[0])
    if root_arcs != vocab_size:
        raise AssertionError(f"the empty context must own {vocab_size} arcs, got {root_arcs}")
    arc_counts = np.diff(offsets)
    max_state_arcs = int(arc_counts[1:].max()) if num_states > 1 else 0
    return NgramTensors(
        arc_offsets=torch.from_numpy(offsets),
        arc_keys=torch.from_numpy(keys),
        arc_weights=torch.from_numpy((np.concatenate(arc_log10)[order] * LN10).astype(np.float32)),
        arc_targets=torch.from_numpy(np.concatenate(arc_targets)[order].astype(np.int32)),
        backoff_targets=torch.from_numpy(backoff_targets),
        backoff_weights=torch.from_numpy((backoff_log10 * LN10).astype(np.float32)),
        final_weights=torch.from_numpy((final_log10 * LN10).astype(np.float32)),
        vocab_size=vocab_size,
        max_order=max_order,
        max_state_arcs=max_state_arcs,
    )


# --- binary format ----------------------------------------------------------------------------------------
MAGIC = b"LSNGRAM\x00"
FORMAT_VERSION = 1
_FIXED_HEADER = struct.Struct("<8sIIQI")  # magic, version, JSON length, data length, CRC-32 of JSON + data
_ALIGNMENT = 64
_ARRAYS = ("arc_offsets", "arc_keys", "arc_weights", "arc_targets", "backoff_targets", "backoff_weights",
           "final_weights")


class NgramFileError(ValueError):
    """A binary LM file that is not one, has another version, or fails its checksum."""


def _aligned(offset: int) -> int:
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


def save_tensors(path: str | Path, lm: NgramTensors, ngram_counts: list[int]) -> None:
    """Write the LM as: fixed header, JSON description, 64-byte aligned little-endian arrays.

    The file is written next to its destination and renamed into place, so a reader never sees half a file.
    """
    arrays = {name: getattr(lm, name).cpu().contiguous().numpy() for name in _ARRAYS}
    layout = {}
    offset = 0
    for name, array in arrays.items():
        offset = _aligned(offset)
        layout[name] = {"offset": offset, "dtype": array.dtype.newbyteorder("<").str, "shape": list(array.shape)}
        offset += array.nbytes
    data_length = _aligned(offset)
    description = json.dumps({
        "vocab_size": lm.vocab_size, "max_order": lm.max_order, "max_state_arcs": lm.max_state_arcs,
        "num_states": lm.num_states, "num_arcs": lm.num_arcs, "ngram_counts": list(ngram_counts),
        "arrays": layout,
    }).encode()
    description += b" " * (_aligned(_FIXED_HEADER.size + len(description)) - _FIXED_HEADER.size - len(description))
    data = bytearray(data_length)
    for name, array in arrays.items():
        start = layout[name]["offset"]
        data[start : start + array.nbytes] = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    checksum = zlib.crc32(data, zlib.crc32(description))
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as out:
        out.write(_FIXED_HEADER.pack(MAGIC, FORMAT_VERSION, len(description), data_length, checksum))
        out.write(description)
        out.write(data)
    partial.replace(path)


def load_tensors(path: str | Path, verify: bool = True) -> tuple[NgramTensors, list[int]]:
    """Memory-map a binary LM (copy-on-write: processes share the pages until one writes).

    `verify` recomputes the CRC-32 over the file (about 1 s per GB); skip it for a file already checked.
    """
    path = str(path)
    with open(path, "rb") as handle:
        fixed = handle.read(_FIXED_HEADER.size)
        if len(fixed) < _FIXED_HEADER.size:
            raise NgramFileError(f"{path}: too short to be a binary n-gram LM")
        magic, version, description_length, data_length, checksum = _FIXED_HEADER.unpack(fixed)
        if magic != MAGIC:
            raise NgramFileError(f"{path}: not a binary n-gram LM (magic {magic!r}); ARPA files load with "
                                 "NgramLm.from_arpa")
        if version != FORMAT_VERSION:
            raise NgramFileError(f"{path}: format version {version}, this code reads version {FORMAT_VERSION}; "
                                 "rebuild it with `python -m decoders.ngram.build`")
        description = handle.read(description_length)
    data_start = _FIXED_HEADER.size + description_length
    mapped = np.memmap(path, dtype=np.uint8, mode="c")
    if mapped.shape[0] < data_start + data_length:
        raise NgramFileError(f"{path}: truncated: {mapped.shape[0]} bytes, header says {data_start + data_length}")
    if verify:
        crc = zlib.crc32(description)
        chunk = 1 << 26
        for start in range(data_start, data_start + data_length, chunk):
            crc = zlib.crc32(mapped[start : min(start + chunk, data_start + data_length)], crc)
        if crc != checksum:
            raise NgramFileError(f"{path}: checksum mismatch (file {checksum:#010x}, contents {crc:#010x}): "
                                 "the file is damaged")
    info = json.loads(description)
    tensors = {}
    for name in _ARRAYS:
        entry = info["arrays"][name]
        dtype = np.dtype(entry["dtype"])
        count = int(np.prod(entry["shape"], dtype=np.int64))
        start = data_start + entry["offset"]
        array = mapped[start : start + count * dtype.itemsize].view(dtype).reshape(entry["shape"])
        tensors[name] = torch.from_numpy(array)
    lm = NgramTensors(**tensors, vocab_size=info["vocab_size"], max_order=info["max_order"],
                      max_state_arcs=info["max_state_arcs"])
    return lm, info["ngram_counts"]


__all__ = ["NgramLm", "NgramTensors", "advance_torch", "walk_torch", "scatter_arcs_torch", "tensors_from_arpa",
           "save_tensors", "load_tensors", "NgramFileError"]
