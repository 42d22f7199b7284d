"""Compile parsed ARPA n-grams into `NgramTensors` (the structure is described in `decoders/ngram/tensors.py`).

ARPA files whose pruning dropped lower-order prefixes of kept n-grams (SRILM, varikn) get the missing
contexts created as n-grams whose probability is derived through backoff and whose backoff is 0, which
leaves every probability as the backoff formula gives it for the file as written (KenLM refuses such files;
`build.py` writes them out with the contexts restored, which KenLM then reads with the same scores).
A label the file does not list scores as `<unk>` (log10 -100 if there is no `<unk>`, as KenLM).

Vectorized over each order with numpy: n-grams are looked up as whole rows (`_RowIndex`), never one by one.
The ARPA values are log10 until `_pack` converts them to natural-log float32.

Dims: V labels (no blank), S states, A arcs, N order, n_k n-grams of order k + 1 (the tables are indexed
from 0, so table k holds rows of k + 1 tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from decoders.ngram.arpa import BOS_ID, EOS_ID, KENLM_MISSING_UNK_LOG10, UNK_ID, ArpaFormatError, ArpaModel
from decoders.ngram.tensors import BOS_STATE, EMPTY_STATE, NgramTensors

LN10 = math.log(10.0)


def tensors_from_arpa(arpa: ArpaModel, vocab_size: int) -> NgramTensors:
    """Build the tensors of a token-level LM over labels 0 .. vocab_size - 1 from parsed ARPA n-grams."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    tables = _Tables.from_arpa(arpa)
    _check_ngrams(tables, vocab_size)
    _list_bos_(tables)
    unk_log10 = _unk_log10(tables)
    created = _add_missing_contexts_(tables)
    index = [_RowIndex(table) for table in tables.rows]  # the tables grow no more
    _derive_created_probs_(tables, index, created, unk_log10)
    states = _number_states(tables, index)
    arcs, eos_log10 = _arcs(tables, states, vocab_size, unk_log10)
    backoff_targets, backoff_log10, final_log10 = _backoffs_and_finals(tables, states, eos_log10, unk_log10)
    return _pack(arcs, backoff_targets, backoff_log10, final_log10, vocab_size, tables.max_order)


@dataclass
class _Tables:
    """The n-grams of each order as arrays (index k holds order k + 1); the steps below grow them in place."""

    rows: list[np.ndarray]  # [n_k, k + 1] int64 token ids
    log10_probs: list[np.ndarray]  # [n_k] float64
    log10_backoffs: list[np.ndarray]  # [n_k] float64
    max_order: int

    @classmethod
    def from_arpa(cls, arpa: ArpaModel) -> _Tables:
        return cls(rows=[np.asarray(t, dtype=np.int64).reshape(-1, k + 1) for k, t in enumerate(arpa.tokens)],
                   log10_probs=[np.asarray(p, dtype=np.float64) for p in arpa.log10_probs],
                   log10_backoffs=[np.asarray(b, dtype=np.float64) for b in arpa.log10_backoffs],
                   max_order=arpa.max_order)


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


# --- the n-grams as the file lists them ---------------------------------------------------------------------
def _check_ngrams(tables: _Tables, vocab_size: int) -> None:
    """Refuse, naming the first offending n-gram of the lowest order: a token outside the vocabulary, a token
    of a longer n-gram with no unigram entry (it would have no arc in the empty context), a repeated n-gram."""
    unigram_tokens = np.unique(tables.rows[0][:, 0])
    for k, table in enumerate(tables.rows):
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


def _list_bos_(tables: _Tables) -> None:
    """List the unigram `<s>` (log10 -99, backoff 0) where the file does not, so that state 1 always exists."""
    if BOS_ID not in tables.rows[0][:, 0]:
        tables.rows[0] = np.concatenate([tables.rows[0], [[BOS_ID]]])
        tables.log10_probs[0] = np.append(tables.log10_probs[0], -99.0)
        tables.log10_backoffs[0] = np.append(tables.log10_backoffs[0], 0.0)


def _unk_log10(tables: _Tables) -> float:
    """log10 p(`<unk>`): the file's, or KenLM's -100 where the file lists none."""
    unk_rows = np.flatnonzero(tables.rows[0][:, 0] == UNK_ID)
    return float(tables.log10_probs[0][unk_rows[0]]) if len(unk_rows) else KENLM_MISSING_UNK_LOG10


# --- contexts that pruning dropped (mirrors arpa.add_missing_prefixes) -------------------------------------
def _add_missing_contexts_(tables: _Tables) -> list[np.ndarray]:
    """Append every context of a listed n-gram that the file lacks, with probability 0 for now and backoff 0;
    -> per order, [n_k] bool: the rows created here.

    Found from the highest order down, so that a created context gets its own missing contexts listed too.
    """
    created = [np.zeros(len(table), dtype=bool) for table in tables.rows]
    for k in range(tables.max_order - 1, 0, -1):  # order k + 1 grams, their contexts of order k
        rows = tables.rows
        prefixes = np.unique(rows[k][:, :-1], axis=0) if len(rows[k]) else rows[k][:, :-1]
        missing = prefixes[_RowIndex(rows[k - 1]).find(prefixes) < 0]
        if len(missing):
            rows[k - 1] = np.concatenate([rows[k - 1], missing])
            tables.log10_probs[k - 1] = np.append(tables.log10_probs[k - 1], np.zeros(len(missing)))
            tables.log10_backoffs[k - 1] = np.append(tables.log10_backoffs[k - 1], np.zeros(len(missing)))
            created[k - 1] = np.append(created[k - 1], np.ones(len(missing), dtype=bool))
    return created


def _listed_backoffs(tables: _Tables, index: list[_RowIndex], grams: np.ndarray) -> np.ndarray:
    """grams [m, k] -> [m] log10 backoff of each (0 for a context that is not listed, or the empty context)."""
    if grams.shape[1] == 0:
        return np.zeros(len(grams))
    found = index[grams.shape[1] - 1].find(grams)
    return np.where(found >= 0, tables.log10_backoffs[grams.shape[1] - 1][np.maximum(found, 0)], 0.0)


def _derive_created_probs_(tables: _Tables, index: list[_RowIndex], created: list[np.ndarray],
                           unk_log10: float) -> None:
    """Give each created n-gram `h w` the probability the backoff formula gives it without the entry,
    `backoff(h) + p(w | h[1:])`, so that listing it changes no score.

    Lowest order first, so that each derivation reads only lower orders that are already settled.
    """
    for k in range(1, tables.max_order):
        targets = np.flatnonzero(created[k])
        if len(targets) == 0:
            continue
        grams = tables.rows[k][targets]
        width = k + 1
        total = _listed_backoffs(tables, index, grams[:, :-1])
        result = np.zeros(len(grams))
        remaining = np.ones(len(grams), dtype=bool)
        for start in range(1, width):
            suffix = grams[:, start:]
            found = index[width - start - 1].find(suffix)
            hit = remaining & (found >= 0)
            result[hit] = total[hit] + tables.log10_probs[width - start - 1][found[hit]]
            remaining &= ~hit
            if start == width - 1:
                break
            total = total + _listed_backoffs(tables, index, grams[:, start:-1])
        result[remaining] = total[remaining] + unk_log10
        tables.log10_probs[k][targets] = result


# --- states ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _States:
    """The state id of every row of the tables (-1 for a row that is no state), found by whole-row lookup."""

    index: list[_RowIndex]
    state_of: list[np.ndarray]  # per order: [n_k] int64
    num_states: int

    def of(self, grams: np.ndarray) -> np.ndarray:
        """grams [m, k] -> [m] state of each row (-1 if it is none); empty rows are the empty context."""
        if grams.shape[1] == 0:
            return np.zeros(len(grams), dtype=np.int64)
        found = self.index[grams.shape[1] - 1].find(grams)
        return np.where(found >= 0, self.state_of[grams.shape[1] - 1][np.maximum(found, 0)], -1)

    def longest_suffix(self, grams: np.ndarray, first: int) -> np.ndarray:
        """grams [m, k] -> [m] the state of the longest suffix `grams[:, start:]`, start >= first, that is one
        (the empty context if none is)."""
        result = np.full(len(grams), -1, dtype=np.int64)
        for start in range(first, grams.shape[1]):
            result = np.where(result < 0, self.of(grams[:, start:]), result)
        return np.where(result < 0, EMPTY_STATE, result)


def _number_states(tables: _Tables, index: list[_RowIndex]) -> _States:
    """Number the states: the empty context 0, `<s>` 1, then every other context of order < N without `</s>`
    (after `</s>` nothing is queried), by (order, tokens). An order-1 LM has only `<s>` besides the empty one.
    """
    max_order = tables.max_order
    state_of = []
    next_id = 2
    for k, table in enumerate(tables.rows):
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
    return _States(index=index, state_of=state_of, num_states=next_id)


# --- arcs, backoffs, final weights -------------------------------------------------------------------------
@dataclass(frozen=True)
class _Arcs:
    """Arcs in the order the n-grams came, not yet sorted; weights still log10."""

    sources: np.ndarray  # [A] int64
    labels: np.ndarray  # [A] int64
    log10_weights: np.ndarray  # [A] float64
    targets: np.ndarray  # [A] int64


def _arcs(tables: _Tables, states: _States, vocab_size: int, unk_log10: float) -> tuple[_Arcs, np.ndarray]:
    """One arc per n-gram `h w` whose context h is a state: from h, label w, to the longest suffix of `h w`
    that is a state. -> (the arcs, [S] log10 p(</s> | state) where the file lists it, else NaN).

    `h </s>` is no arc but the final weight of h; `h <s>` (never queried) and n-grams whose context is no
    state (after `</s>`) are dropped; `h <unk>` stands for every label without a unigram entry, and where
    `<unk>` is not listed those labels get arcs from the empty context with the `<unk>` probability.
    """
    present = set(tables.rows[0][:, 0].tolist())
    unknown_labels = np.array([label for label in range(vocab_size) if label not in present], dtype=np.int64)
    arc_sources, arc_labels, arc_log10, arc_targets = [], [], [], []
    eos_log10 = np.full(states.num_states, np.nan)
    for k, table in enumerate(tables.rows):
        sources = states.of(table[:, :-1])
        tokens = table[:, -1]
        keep = (sources >= 0) & (tokens != BOS_ID)
        eos = keep & (tokens == EOS_ID)
        eos_log10[sources[eos]] = tables.log10_probs[k][eos]
        keep &= tokens != EOS_ID
        targets = states.longest_suffix(table[keep], 0)
        sources, tokens, weights = sources[keep], tokens[keep], tables.log10_probs[k][keep]
        is_unk = tokens == UNK_ID
        repeat = np.where(is_unk, len(unknown_labels), 1)
        labels = np.repeat(tokens, repeat)
        if is_unk.any():
            labels[np.repeat(is_unk, repeat)] = np.tile(unknown_labels, int(is_unk.sum()))
        arc_sources.append(np.repeat(sources, repeat))
        arc_labels.append(labels)
        arc_log10.append(np.repeat(weights, repeat))
        arc_targets.append(np.repeat(targets, repeat))
    if UNK_ID not in present:
        arc_sources.append(np.full(len(unknown_labels), EMPTY_STATE, dtype=np.int64))
        arc_labels.append(unknown_labels)
        arc_log10.append(np.full(len(unknown_labels), unk_log10))
        arc_targets.append(np.full(len(unknown_labels), EMPTY_STATE, dtype=np.int64))
    arcs = _Arcs(sources=np.concatenate(arc_sources), labels=np.concatenate(arc_labels),
                 log10_weights=np.concatenate(arc_log10), targets=np.concatenate(arc_targets))
    return arcs, eos_log10


def _backoffs_and_finals(tables: _Tables, states: _States, eos_log10: np.ndarray,
                         unk_log10: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """-> (backoff targets [S] int64, log10 backoffs [S], log10 final weights [S]).

    A state backs off to its longest proper suffix that is a state. Its final weight is its listed
    `p(</s> | h)`, else its backoff plus its backoff target's final weight; the empty context's is the unigram
    `</s>`, else `<unk>`'s. Shorter contexts first, so that a backoff target is settled before its users.
    """
    num_states = states.num_states
    backoff_targets = np.zeros(num_states, dtype=np.int64)
    backoff_log10 = np.zeros(num_states, dtype=np.float64)
    final_log10 = np.zeros(num_states, dtype=np.float64)
    unigram_eos = np.flatnonzero(tables.rows[0][:, 0] == EOS_ID)
    final_log10[EMPTY_STATE] = (eos_log10[EMPTY_STATE] if not np.isnan(eos_log10[EMPTY_STATE])
                                else tables.log10_probs[0][unigram_eos[0]] if len(unigram_eos) else unk_log10)
    for k, table in enumerate(tables.rows):
        is_state = np.flatnonzero(states.state_of[k] >= 0)
        if len(is_state) == 0:
            continue
        ids = states.state_of[k][is_state]
        backoff_targets[ids] = states.longest_suffix(table[is_state], 1)
        backoff_log10[ids] = tables.log10_backoffs[k][is_state]
        listed_eos = eos_log10[ids]
        final_log10[ids] = np.where(np.isnan(listed_eos), backoff_log10[ids] + final_log10[backoff_targets[ids]],
                                    listed_eos)
    return backoff_targets, backoff_log10, final_log10


def _pack(arcs: _Arcs, backoff_targets: np.ndarray, backoff_log10: np.ndarray, final_log10: np.ndarray,
          vocab_size: int, max_order: int) -> NgramTensors:
    """Sort the arcs by `state * V + label` (refusing two arcs with one key), find each state's arc range, and
    convert log10 to natural-log float32: the layout `advance` and the Triton kernel search."""
    num_states = backoff_targets.shape[0]
    keys = arcs.sources * vocab_size + arcs.labels
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    if len(keys) > 1 and bool(np.any(keys[1:] == keys[:-1])):
        duplicate = int(keys[1:][keys[1:] == keys[:-1]][0])
        raise ArpaFormatError(f"two n-grams give state {duplicate // vocab_size} the label {duplicate % vocab_size}")
    sources = arcs.sources[order]
    offsets = np.searchsorted(sources, np.arange(num_states + 1), side="left").astype(np.int64)
    root_arcs = int(offsets[1] - offsets[0])
    if root_arcs != vocab_size:
        raise AssertionError(f"the empty context must own {vocab_size} arcs, got {root_arcs}")
    arc_counts = np.diff(offsets)
    max_state_arcs = int(arc_counts[1:].max()) if num_states > 1 else 0
    return NgramTensors(
        arc_offsets=torch.from_numpy(offsets),
        arc_keys=torch.from_numpy(keys),
        arc_weights=torch.from_numpy((arcs.log10_weights[order] * LN10).astype(np.float32)),
        arc_targets=torch.from_numpy(arcs.targets[order].astype(np.int32)),
        backoff_targets=torch.from_numpy(backoff_targets),
        backoff_weights=torch.from_numpy((backoff_log10 * LN10).astype(np.float32)),
        final_weights=torch.from_numpy((final_log10 * LN10).astype(np.float32)),
        vocab_size=vocab_size,
        max_order=max_order,
        max_state_arcs=max_state_arcs,
    )


__all__ = ["tensors_from_arpa"]
