"""A slow, obvious back-off n-gram scorer over a dict, with its own tiny ARPA parser: an oracle for NgramLm.

p(w | h) = p_arpa(h w) if `h w` is listed, else backoff(h) + p(w | h[1:]), with backoff 0 for a context that
is not listed; a label the ARPA file does not list scores as `<unk>` (log10 -100 if there is none, as KenLM).
The history is the whole sentence so far, cut to the last N - 1 tokens. Tokens are `chr(id + 100)`.
Scores are natural logs.
"""

from __future__ import annotations

import gzip
import math

import numpy as np
import torch

from decoders.ngram.arpa import (
    BOS_ID,
    EOS_ID,
    KENLM_MISSING_UNK_LOG10,
    UNK_ID,
    ArpaFormatError,
    ArpaModel,
    add_missing_prefixes,
)
from decoders.ngram.lm import BOS_STATE, EMPTY_STATE, NgramTensors

LN10 = math.log(10.0)


class DictNgramLm:
    def __init__(self, path: str) -> None:
        opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
        self.entries: dict[tuple[str, ...], tuple[float, float]] = {}
        order = 0
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                line = line.strip("\r\n \t")
                if line.startswith("\\") and line.endswith("-grams:"):
                    order = int(line[1 : line.index("-")])
                    continue
                if not line or order == 0 or line == "\\end\\":
                    continue
                fields = [field for field in line.replace("\t", " ").split(" ") if field]
                words = tuple(fields[1 : order + 1])
                backoff = float(fields[order + 1]) if len(fields) > order + 1 else 0.0
                self.entries[words] = (float(fields[0]), backoff)
        self.max_order = max(len(key) for key in self.entries)
        unk = self.entries.get(("<unk>",))
        self.unk_log10 = unk[0] if unk is not None else -100.0

    def _word(self, word: str) -> str:
        return word if (word,) in self.entries else "<unk>"

    def log10_prob(self, history: tuple[str, ...], word: str) -> float:
        word = self._word(word)
        history = tuple(self._word(w) for w in history)[-(self.max_order - 1) :] if self.max_order > 1 else ()
        total = 0.0
        while True:
            listed = self.entries.get(history + (word,))
            if listed is not None:
                return total + listed[0]
            if not history:
                return total + self.unk_log10
            total += self.entries.get(history, (0.0, 0.0))[1]
            history = history[1:]

    def score(self, token_ids: list[int], bos: bool = True, eos: bool = True) -> float:
        """Natural-log probability of a token id sequence."""
        history: tuple[str, ...] = ("<s>",) if bos else ()
        total = 0.0
        for token in token_ids:
            word = chr(token + 100)
            total += self.log10_prob(history, word)
            history = history + (word,)
        if eos:
            total += self.log10_prob(history, "</s>")
        return total * LN10

    def next_scores(self, token_ids: list[int], vocab_size: int, bos: bool = True) -> list[float]:
        """Natural-log probability of every label 0 .. vocab_size - 1 after the sequence."""
        history = (("<s>",) if bos else ()) + tuple(chr(t + 100) for t in token_ids)
        return [self.log10_prob(history, chr(label + 100)) * LN10 for label in range(vocab_size)]


def reference_tensors_from_arpa(arpa: ArpaModel, vocab_size: int) -> NgramTensors:
    """`decoders.ngram.lm.tensors_from_arpa` written n-gram by n-gram over a dict: its oracle (bit-identical)."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    max_order = arpa.max_order
    entries: dict[tuple[int, ...], tuple[float, float]] = {}  # log10 prob, log10 backoff
    for order_index in range(max_order):
        rows = arpa.tokens[order_index].tolist()
        probs = arpa.log10_probs[order_index].tolist()
        backoffs = arpa.log10_backoffs[order_index].tolist()
        for row, prob, backoff in zip(rows, probs, backoffs):
            key = tuple(row)
            if key in entries:
                raise ArpaFormatError(f"duplicate {len(key)}-gram {key}")
            entries[key] = (prob, backoff)
    unigram_tokens = {key[0] for key in entries if len(key) == 1}
    for key in entries:
        for token in key:
            if token >= vocab_size:
                raise ArpaFormatError(f"token id {token} in n-gram {key} is outside the vocabulary "
                                      f"(vocab_size={vocab_size})")
            if len(key) > 1 and token not in unigram_tokens:
                raise ArpaFormatError(f"token id {token} in n-gram {key} has no unigram entry")
    if (BOS_ID,) not in entries:
        entries[(BOS_ID,)] = (-99.0, 0.0)
    unk_log10 = entries[(UNK_ID,)][0] if (UNK_ID,) in entries else KENLM_MISSING_UNK_LOG10

    add_missing_prefixes(entries, unk_log10)

    # states: the empty context, <s>, then every other listed context of order < N
    state_ids: dict[tuple[int, ...], int] = {(): EMPTY_STATE, (BOS_ID,): BOS_STATE}
    for key in sorted((k for k in entries if len(k) < max_order and EOS_ID not in k), key=lambda k: (len(k), k)):
        state_ids.setdefault(key, len(state_ids))
    num_states = len(state_ids)

    def suffix_state(key: tuple[int, ...], start: int) -> int:
        for offset in range(start, len(key)):
            state = state_ids.get(key[offset:])
            if state is not None:
                return state
        return EMPTY_STATE

    unknown_labels = [label for label in range(vocab_size) if label not in unigram_tokens]
    arc_sources: list[int] = []
    arc_labels: list[int] = []
    arc_log10: list[float] = []
    arc_targets: list[int] = []
    eos_log10: dict[int, float] = {}
    for key, (prob, _) in entries.items():
        context, token = key[:-1], key[-1]
        source = state_ids.get(context)
        if source is None or token == BOS_ID:
            continue  # a context that cannot occur (after </s>), or <s> in the middle: never queried
        if token == EOS_ID:
            eos_log10[source] = prob
            continue
        target = suffix_state(key, 0)
        labels = unknown_labels if token == UNK_ID else [token]
        for label in labels:
            arc_sources.append(source)
            arc_labels.append(label)
            arc_log10.append(prob)
            arc_targets.append(target)
    if (UNK_ID,) not in entries:
        for label in unknown_labels:
            arc_sources.append(EMPTY_STATE)
            arc_labels.append(label)
            arc_log10.append(unk_log10)
            arc_targets.append(EMPTY_STATE)

    backoff_targets = np.zeros(num_states, dtype=np.int64)
    backoff_log10 = np.zeros(num_states, dtype=np.float64)
    final_log10 = np.zeros(num_states, dtype=np.float64)
    for key, state in sorted(state_ids.items(), key=lambda item: len(item[0])):  # shorter contexts first
        if not key:
            final_log10[state] = eos_log10.get(state, entries.get((EOS_ID,), (unk_log10, 0.0))[0])
            continue
        backoff_targets[state] = suffix_state(key, 1)
        backoff_log10[state] = entries[key][1]
        if state in eos_log10:
            final_log10[state] = eos_log10[state]
        else:
            final_log10[state] = backoff_log10[state] + final_log10[backoff_targets[state]]

    sources = np.array(arc_sources, dtype=np.int64)
    keys = sources * vocab_size + np.array(arc_labels, dtype=np.int64)
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
        arc_weights=torch.from_numpy((np.array(arc_log10, dtype=np.float64)[order] * LN10).astype(np.float32)),
        arc_targets=torch.from_numpy(np.array(arc_targets, dtype=np.int32)[order]),
        backoff_targets=torch.from_numpy(backoff_targets),
        backoff_weights=torch.from_numpy((backoff_log10 * LN10).astype(np.float32)),
        final_weights=torch.from_numpy((final_log10 * LN10).astype(np.float32)),
        vocab_size=vocab_size,
        max_order=max_order,
        max_state_arcs=max_state_arcs,
    )
